"""Step time of a TF1 between-graph training with and without the loss autolog fetches alongside.

Issue 40 §3: a Session-era script runs ``sess.run([train_step, global_step], feed_dict=...)``
and never fetches its loss; autolog adds it (``sess.run([fetches, loss])``) once per read
interval. The loss is computed for the gradients anyway, so the step should cost the same. Each
run is a fresh process with an in-process cluster (one ps server, one worker server, gRPC between
them, variables on the ps by ``replica_device_setter``) training ``tests/data/autolog/
tf1_mnist_replica.py``'s model (784-100-10, Adam, batch 100) for ``--steps`` steps after a
warm-up. The ways, alternating, ``--repeats`` times:

- ``plain``: the script's fetch, no autolog;
- ``loss every step``: ``[[train_step, global_step], loss]`` on every step, no autolog: the
  added fetch itself, at its most (autolog adds it at most once per interval);
- ``autolog``: the script's fetch with autolog's import hook installed (read interval 1 s, the
  default ``sample_interval``): the loss fetched once a second, and the global step read.

Per run: the median and mean per-step wall time (each ``sess.run`` timed) and the load average
(1 min) read just before it. Last, per way, the median of the runs' medians and its difference to
``plain``.
Run: ``.venv/bin/python benchmarks/tf1_loss_fetch.py [--repeats 3] [--steps 3000]``
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent

# argv: way, steps, warm-up steps; prints "RESULT {json}" last
TRAINING = r"""
import json, os, socket, sys, time
way, steps, warmup = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
if way == "autolog":
    from launcher.autolog import hook
    hook.install()
import numpy as np
import tensorflow as tf
v1 = tf.compat.v1
v1.disable_eager_execution()

def free_port():
    with socket.socket() as s:
        s.bind(("localhost", 0))
        return s.getsockname()[1]

cluster = tf.train.ClusterSpec({"ps": ["localhost:%d" % free_port()], "worker": ["localhost:%d" % free_port()]})
ps = tf.distribute.Server(cluster, job_name="ps", task_index=0)
worker = tf.distribute.Server(cluster, job_name="worker", task_index=0)
with v1.device(v1.train.replica_device_setter(worker_device="/job:worker/task:0", cluster=cluster)):
    global_step = tf.Variable(0, name="global_step", trainable=False)
    x = v1.placeholder(tf.float32, [None, 784])
    y_ = v1.placeholder(tf.float32, [None, 10])
    hid_w = tf.Variable(v1.truncated_normal([784, 100], stddev=1.0 / 28))
    hid_b = tf.Variable(tf.zeros([100]))
    sm_w = tf.Variable(v1.truncated_normal([100, 10], stddev=0.1))
    sm_b = tf.Variable(tf.zeros([10]))
    hid = tf.nn.relu(v1.nn.xw_plus_b(x, hid_w, hid_b))
    y = tf.nn.softmax(v1.nn.xw_plus_b(hid, sm_w, sm_b))
    cross_entropy = tf.negative(tf.reduce_sum(y_ * tf.math.log(tf.clip_by_value(y, 1e-10, 1.0))),
                                name="cross_entropy")
    train_step = v1.train.AdamOptimizer(0.01).minimize(cross_entropy, global_step=global_step)
    init = v1.global_variables_initializer()
rng = np.random.default_rng(0)
centres = rng.normal(size=(10, 784)).astype("float32")
batches = []
for _ in range(16):
    labels = rng.integers(0, 10, 100)
    batches.append((centres[labels] + rng.normal(scale=3.0, size=(100, 784)).astype("float32"),
                    np.eye(10, dtype="float32")[labels]))
times = []
with v1.Session(worker.target) as sess:
    sess.run(init)
    for i in range(warmup + steps):
        xs, ys = batches[i % len(batches)]
        feed = {x: xs, y_: ys}
        start = time.perf_counter()
        if way == "loss every step":
            sess.run([[train_step, global_step], cross_entropy], feed_dict=feed)
        else:
            sess.run([train_step, global_step], feed_dict=feed)
        times.append(time.perf_counter() - start)
times = times[warmup:]
times.sort()
print("RESULT " + json.dumps({"median_ms": 1e3 * times[len(times) // 2], "mean_ms": 1e3 * sum(times) / len(times)}),
      flush=True)
"""

WAYS = ("plain", "loss every step", "autolog")


def load1() -> float:
    return os.getloadavg()[0]


def one_run(way: str, steps: int, warmup: int) -> tuple[dict[str, float], int]:
    """The run's figures, and how many metric lines with a loss autolog printed in it."""
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2", PYTHONPATH=str(REPO))
    env.pop("DISTLAUNCH_AUTOLOG_INTERVAL", None)
    env.pop("DISTLAUNCH_SAMPLE_INTERVAL", None)
    done = subprocess.run([sys.executable, "-c", TRAINING, way, str(steps), str(warmup)], env=env,
                          capture_output=True, text=True, timeout=900, check=True)
    lines = done.stdout.splitlines()
    result = json.loads(next(line for line in reversed(lines) if line.startswith("RESULT "))[len("RESULT "):])
    losses = sum(1 for line in lines if line.startswith("@distlaunch ") and '"kind":"metric"' in line
                 and '"loss":null' not in line and '"loss":' in line)
    return result, losses


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--steps", type=int, default=3000)
    parser.add_argument("--warmup", type=int, default=200)
    args = parser.parse_args()
    medians: dict[str, list[float]] = {way: [] for way in WAYS}
    print(f"{'run':>3}  {'way':<16} {'load 1m':>7}  {'median ms/step':>14}  {'mean ms/step':>12}  losses reported")
    for run in range(1, args.repeats + 1):
        for way in WAYS:
            load = load1()
            result, losses = one_run(way, args.steps, args.warmup)
            medians[way].append(result["median_ms"])
            print(f"{run:>3}  {way:<16} {load:>7.2f}  {result['median_ms']:>14.3f}  {result['mean_ms']:>12.3f}  "
                  f"{losses if way == 'autolog' else '-'}", flush=True)
    base = statistics.median(medians["plain"])
    print(f"\nmedian of the runs' medians (load average now: {' '.join(f'{x:.2f}' for x in os.getloadavg())}):")
    for way in WAYS:
        value = statistics.median(medians[way])
        spread = max(medians[way]) - min(medians[way])
        print(f"  {way:<16} {value:.3f} ms/step (runs spread {spread:.3f} ms); "
              f"vs plain {value - base:+.3f} ms ({100 * (value - base) / base:+.1f} %)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
