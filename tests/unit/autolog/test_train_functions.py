"""Issue 46 §1: a train function known by what it does (launcher/autolog/trainfn.py), with real
TensorFlow in one process that has autolog's import hook installed, as the agent installs it.

No optimizer anywhere: the train step takes gradients with ``GradientTape`` and updates with
``assign_sub``. Its calls are the steps (sent with ``step_is_calls``), the scalar it returns the
loss; an evaluation that reads an iterator counts while nothing trains and stops counting once
the train step came; a tf.function nested in the one called is not a train function of its own;
and the user's function holds none of our ops (the timed twin does)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from typing import Any

from tests.integration.jobtools import REPO

SCRIPT = """
import json, sys
from launcher.autolog import hook
hook.install()
import tensorflow as tf
from launcher.autolog import recorder, steptime, stepwatch

w = tf.Variable(tf.zeros([4, 1]))
x = tf.random.stateless_normal([32, 4], seed=[1, 2])
data = tf.data.Dataset.from_tensor_slices((x, tf.sin(tf.reduce_sum(x, 1, keepdims=True)))).repeat().batch(8)
it = iter(data)

@tf.function
def evaluate(it):
    x, y = next(it)
    return tf.reduce_mean(tf.square(tf.matmul(x, w) - y))

@tf.function
def inner(x, y):
    with tf.GradientTape() as tape:
        loss = tf.reduce_mean(tf.square(tf.matmul(x, w) - y))
    return loss, tape.gradient(loss, w)

@tf.function
def train_step(it):
    x, y = next(it)
    loss, g = inner(x, y)
    w.assign_sub(0.1 * g)
    return loss

def said(where):
    recorder.flush(where)
    print("SAID %s %d" % (where, steptime.clock.calls), flush=True)

for _ in range(3):
    evaluate(it)
said("evaluation alone")
for _ in range(30):
    loss = train_step(it)
said("training")
print("LOSS %r" % float(loss), flush=True)
for _ in range(4):
    evaluate(it)
said("evaluation beside training")
ops = lambda f: {op.type for op in f.get_concrete_function(it).graph.get_operations()}
twin = train_step.__dict__.get(stepwatch.TWIN_ATTR)
print("MARKS " + json.dumps({"inner": steptime.TRAIN_MARK in inner.__dict__,
                             "evaluate": steptime.TRAIN_MARK in evaluate.__dict__,
                             "train_step": train_step.__dict__.get(steptime.TRAIN_MARK),
                             "ours_in_user_fn": "Timestamp" in ops(train_step),
                             "ours_in_twin": twin is not None and "Timestamp" in ops(twin)}), flush=True)
"""


def run_script() -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": str(REPO), "DISTLAUNCH_AUTOLOG_INTERVAL": "60",
           "TF_CPP_MIN_LOG_LEVEL": "2", "CUDA_VISIBLE_DEVICES": ""}
    return subprocess.run([sys.executable, "-c", textwrap.dedent(SCRIPT)], env=env, capture_output=True,
                          text=True, timeout=180, cwd=REPO)


def lines_after(stdout: str, marker: str) -> list[dict[str, Any]]:
    """The metric lines before ``marker``'s line and after the one before it."""
    out: list[dict[str, Any]] = []
    for line in stdout.splitlines():
        if line.startswith("SAID "):
            if line.startswith(marker):
                return out
            out = []
        elif line.startswith("@distlaunch ") and '"kind":"metric"' in line:
            out.append(json.loads(line[len("@distlaunch "):]))
    raise AssertionError(f"no {marker!r} in {stdout}")


def test_a_loop_without_an_optimizer_has_steps_loss_and_split_and_an_evaluation_is_no_step() -> None:
    done = run_script()
    assert done.returncode == 0, done.stderr[-3000:]
    assert "distlaunch autolog" not in done.stderr, done.stderr[-3000:]
    out = done.stdout
    first = lines_after(out, "SAID evaluation alone 3")  # an iterator read alone: a loop of calls
    assert first and first[-1]["step"] == 3 and first[-1]["values"].get("step_is_calls") == 1, out
    trained = lines_after(out, "SAID training 33")  # 3 + 30: the evaluation counted until training came
    last = trained[-1]
    assert last["step"] == 33 and last["values"].get("step_is_calls") == 1, out
    loss = float(out.split("LOSS ", 1)[1].split()[0])
    assert last["loss"] == loss, (last, loss)
    assert {"step_time/input", "step_time/compute", "step_time/seconds_per_step"} <= set(last["values"]), last
    assert "SAID evaluation beside training 33" in out, out  # evaluating now is no step
    every = [json.loads(line[len("@distlaunch "):]) for line in out.splitlines() if line.startswith("@distlaunch ")]
    assert all(m["values"].get("step_is_calls") == 1 for m in every if m.get("step") is not None), every
    marks = json.loads(out.split("MARKS ", 1)[1].splitlines()[0])
    assert marks == {"inner": False, "evaluate": False, "train_step": "scalar", "ours_in_user_fn": False,
                     "ours_in_twin": True}, marks
