"""report_placement and keras_callback against real TensorFlow (CPU), each script in a subprocess.

Two logical CPU devices stand in for two GPUs so MirroredStrategy really mirrors. A real
ParameterServerStrategy needs a cluster; its ShardedVariable is built directly instead.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from launcher.events import REPORT_PREFIX

pytestmark = pytest.mark.slow

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

TWO_CPUS = """
import tensorflow as tf
cpus = tf.config.list_physical_devices("CPU")
tf.config.set_logical_device_configuration(cpus[0], [tf.config.LogicalDeviceConfiguration()] * 2)
from launcher import report
"""

PLACEMENT_SCRIPT = TWO_CPUS + """
with tf.device("/cpu:0"):
    plain = [tf.Variable(tf.zeros([3, 4]), name="plain_w"),
             tf.Variable(tf.zeros([5], dtype=tf.int64), name="plain_b")]
report.report_placement(plain)
strategy = tf.distribute.MirroredStrategy(["/cpu:0", "/cpu:1"])
with strategy.scope():
    mirrored = tf.Variable(tf.ones([2, 2], dtype=tf.float16), name="mirrored")
report.report_placement([mirrored])
with tf.device("/cpu:1"):
    parts = [tf.Variable(tf.zeros([6, 4]), name="emb/part_0"),
             tf.Variable(tf.zeros([4, 4]), name="emb/part_1")]
report.report_placement([tf.__internal__.distribute.ShardedVariable(parts)])
"""

FIT_SCRIPT = TWO_CPUS + """
import sys
import numpy as np
import keras
strategy = tf.distribute.MirroredStrategy(["/cpu:0", "/cpu:1"])
with strategy.scope():
    model = keras.Sequential([keras.Input((4,)), keras.layers.Dense(8, activation="relu"),
                              keras.layers.Dense(1)])
    model.compile(optimizer="sgd", loss="mse")
rng = np.random.default_rng(0)
x = rng.random((256, 4), dtype=np.float32)
y = x.sum(axis=1, keepdims=True)
every, verbose = int(sys.argv[1]), int(sys.argv[2])
model.fit(x, y, batch_size=32, epochs=2, verbose=verbose,
          callbacks=[report.keras_callback(every_n_batches=every)])
"""


def _run_tf(script: str, *args: str) -> list[str]:
    env = {**os.environ, "PYTHONPATH": REPO, "TF_CPP_MIN_LOG_LEVEL": "2", "DISTLAUNCH_REPORT_INTERVAL": "0",
           "CUDA_VISIBLE_DEVICES": ""}
    done = subprocess.run([sys.executable, "-c", script, *args], capture_output=True, text=True,
                          timeout=180, cwd=REPO, env=env, check=False)
    assert done.returncode == 0, done.stderr[-3000:]
    return done.stdout.splitlines()


def _messages(lines: list[str], kind: str) -> list[dict]:
    out = []
    for line in lines:
        assert REPORT_PREFIX not in line or line.startswith(REPORT_PREFIX), f"report line broken: {line!r}"
        if line.startswith(REPORT_PREFIX):
            message = json.loads(line[len(REPORT_PREFIX):])
            if message["kind"] == kind:
                out.append(message)
    return out


@pytest.fixture(scope="module")
def placements() -> list[list[dict]]:
    return [m["variables"] for m in _messages(_run_tf(PLACEMENT_SCRIPT), "placement")]


def test_plain_variables_one_entry_each(placements: list[list[dict]]) -> None:
    w, b = placements[0]
    assert (w["name"], w["shape"], w["dtype"], w["bytes"]) == ("plain_w", [3, 4], "float32", 48)
    assert (b["name"], b["shape"], b["dtype"], b["bytes"]) == ("plain_b", [5], "int64", 40)
    assert w["device"].endswith("device:CPU:0") and w["task"] == ""


def test_mirrored_variable_one_entry_per_replica(placements: list[list[dict]]) -> None:
    replicas = placements[1]
    assert [r["device"].rsplit("/", 1)[-1] for r in replicas] == ["device:CPU:0", "device:CPU:1"]
    assert [r["name"] for r in replicas] == ["mirrored", "mirrored/replica_1"]
    assert all(r["dtype"] == "float16" and r["bytes"] == 8 for r in replicas)


def test_sharded_variable_one_entry_per_shard(placements: list[list[dict]]) -> None:
    shards = placements[2]
    assert [s["name"] for s in shards] == ["emb/part_0", "emb/part_1"]
    assert [s["shape"] for s in shards] == [[6, 4], [4, 4]]
    assert sum(s["bytes"] for s in shards) == 10 * 4 * 4
    assert all(s["device"].endswith("device:CPU:1") for s in shards)


def test_keras_callback_reports_placement_and_rising_steps() -> None:
    lines = _run_tf(FIT_SCRIPT, "1", "2")
    (placement,) = _messages(lines, "placement")
    variables = placement["variables"]
    assert len(variables) == 4 * 2, "2 kernels + 2 biases, mirrored on 2 devices"
    assert {v["device"].rsplit("/", 1)[-1] for v in variables} == {"device:CPU:0", "device:CPU:1"}
    assert any(v["name"] == "sequential/dense/kernel" and v["shape"] == [4, 8] for v in variables)
    metrics = _messages(lines, "metric")
    steps = [m["step"] for m in metrics]
    assert steps == sorted(steps) and steps[-1] == 16, steps  # 256 / 32 = 8 batches x 2 epochs
    assert set(range(1, 17)) <= set(steps)
    assert all(isinstance(m["loss"], float) for m in metrics)
    epochs = [m["values"]["epoch"] for m in metrics if "epoch" in m["values"]]
    assert epochs == [1.0, 2.0]


def test_keras_callback_every_n_batches_beside_the_progress_bar() -> None:
    # verbose=1 draws Keras' progress bar, which leaves its line open; _messages checks that
    # every report line still starts a line of its own
    metrics = _messages(_run_tf(FIT_SCRIPT, "4", "1"), "metric")
    batch_steps = [m["step"] for m in metrics if "epoch" not in m["values"]]
    assert batch_steps == [4, 8, 12, 16]
