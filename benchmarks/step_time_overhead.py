"""What the live step-time split costs training (issue 37: at most 1 % of throughput).

Two workloads, each run with the split on (the default) and off (``DISTLAUNCH_STEP_TIME=0``),
alternating, ``--repeats`` pairs, autolog on in both:

1. the demo job, ``cluster_profiles/local.toml`` (ParameterServerStrategy, ps + 2 workers + chief,
   ``examples/ps_mnist.py``), through ``distlaunch up --no-tui`` with ``--train-seconds`` shortened:
   the chief's steps/s over its metric events from the first to the last;
2. Keras ``fit`` of a small model on a cached, prefetched dataset, in one process with autolog's
   hook installed as the agent installs it: steps/s over ``--fit-steps`` steps after a warm-up.

Steps/s of separate processes vary by +-5 % on a shared 2-core machine, more than the 1 % target,
so ``--micro`` measures the split's cost where noise cannot hide it: in ONE process with autolog's
hook installed, one train step (``next(iterator)`` in the function, a Keras optimizer) called in
alternating blocks with the split on (each call counted, one in N timed and run by the timed twin
with its Timestamp ops) and off (the clock off: the call goes straight through, as with
``DISTLAUNCH_STEP_TIME=0``); the medians of the blocks' time per step, and the median over the
pairs of neighbouring blocks of on / off (drift cancels within a pair). Two steps: Keras-fit-sized
(64x32 batch, two Dense(256)) and the demo's per-worker model (``examples/ps_mnist.py``'s
784-128-10 on a batch of 64; the demo's coordinator itself gets no graph ops, only the timed
call, and its workers none).

Prints every run, the medians and the change on vs off, with the load average beside each run.
Run: ``.venv/bin/python benchmarks/step_time_overhead.py --micro`` (and without it, end to end:
``[--repeats 3] [--demo-seconds 20]``)
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
PYTHON = sys.executable

FIT = """
import json, sys, time
from launcher.autolog import hook
hook.install()
import tensorflow as tf
steps = int(sys.argv[1])
batch = (tf.random.normal([64, 32]), tf.random.normal([64, 1]))
data = tf.data.Dataset.from_tensors(batch).cache().repeat().prefetch(8)
model = tf.keras.Sequential([tf.keras.Input((32,)), tf.keras.layers.Dense(256, activation="relu"),
                             tf.keras.layers.Dense(256, activation="relu"), tf.keras.layers.Dense(1)])
model.compile("sgd", "mse")
model.fit(data, steps_per_epoch=200, epochs=1, verbose=0)  # warm-up, tracing
start = time.perf_counter()
model.fit(data, steps_per_epoch=steps, epochs=1, verbose=0)
print(json.dumps({"steps_per_s": steps / (time.perf_counter() - start)}))
"""


MICRO = """
import json, statistics, sys, time
from launcher.autolog import hook
hook.install()
import tensorflow as tf
from launcher.autolog import steptime
sizes = {"fit": ((64, 32), (256, 256), 1), "demo": ((64, 784), (128,), 10)}
(batch, features), hidden, classes = sizes[sys.argv[1]]
blocks, calls = int(sys.argv[2]), int(sys.argv[3])
data = tf.data.Dataset.from_tensors((tf.random.normal([batch, features]), tf.random.normal([batch, classes])))
data = data.cache().repeat().prefetch(8)
layers = [tf.keras.Input((features,))] + [tf.keras.layers.Dense(h, activation="relu") for h in hidden]
model = tf.keras.Sequential(layers + [tf.keras.layers.Dense(classes)])
opt = tf.keras.optimizers.SGD(0.001)
def step(it):
    x, y = next(it)
    with tf.GradientTape() as tape:
        loss = tf.reduce_mean(tf.square(model(x) - y))
    opt.apply_gradients(zip(tape.gradient(loss, model.trainable_variables), model.trainable_variables))
    return loss
it = iter(data)
train = tf.function(step)
for _ in range(100):  # traced, marked as a train step, its timed twin traced too
    train(it)
times = {"on": [], "off": []}
for _ in range(blocks):
    for name in ("off", "on"):
        steptime.clock.on = name == "on"
        start = time.perf_counter()
        for _ in range(calls):
            train(it)
        times[name].append((time.perf_counter() - start) / calls)
steptime.clock.on = True
paired = statistics.median(on / off for on, off in zip(times["on"], times["off"]))
print(json.dumps({**{k: statistics.median(v) for k, v in times.items()}, "paired": paired}))
"""


def micro_run(workload: str, blocks: int, calls: int) -> tuple[float, float, float]:
    env = dict(env_for(True), DISTLAUNCH_AUTOLOG_INTERVAL="1")
    out = subprocess.run([PYTHON, "-c", MICRO, workload, str(blocks), str(calls)], env=env, capture_output=True,
                         text=True, check=True, timeout=900).stdout
    found = json.loads([line for line in out.splitlines() if line.startswith("{")][-1])
    return float(found["off"]), float(found["on"]), float(found["paired"])


def load() -> str:
    one, five, fifteen = os.getloadavg()
    return f"{one:.2f} {five:.2f} {fifteen:.2f}"


def env_for(split_on: bool) -> dict[str, str]:
    env = dict(os.environ, PYTHONPATH=str(REPO), TF_CPP_MIN_LOG_LEVEL="2", DISTLAUNCH_AUTOLOG="1")
    env["DISTLAUNCH_STEP_TIME"] = "1" if split_on else "0"
    return env


def fit_run(split_on: bool, steps: int) -> float:
    out = subprocess.run([PYTHON, "-c", FIT, str(steps)], env=env_for(split_on), capture_output=True,
                         text=True, check=True, timeout=600).stdout
    lines = [line for line in out.splitlines() if line.startswith("{")]
    return float(json.loads(lines[-1])["steps_per_s"])


def demo_run(split_on: bool, seconds: int, scratch: Path, n: int) -> float:
    run_id = f"bench-split-{n}-{'on' if split_on else 'off'}"
    run_dir = scratch / run_id
    command = (f"{{python}} examples/ps_mnist.py --steps 1000000 --train-seconds {seconds} "
               "--checkpoint-dir {outputs}/ckpt")
    argv = [PYTHON, "-c", "import sys; from launcher.cli import main; sys.exit(main())", "up",
            str(REPO / "cluster_profiles/local.toml"), "--no-tui", "--run-id", run_id, "--run-dir", str(run_dir),
            "--set", f"defaults.command={command}",
            "--set", f"defaults.env.DISTLAUNCH_STEP_TIME=\"{'1' if split_on else '0'}\""]
    subprocess.run(argv, env=dict(os.environ, PYTHONPATH=str(REPO)), capture_output=True, check=True,
                   timeout=seconds + 240)
    points = []
    for line in (run_dir / "events.jsonl").read_text().splitlines():
        event = json.loads(line)
        if event.get("kind") == "metric" and event.get("task") == "chief:0" and isinstance(event.get("step"), int):
            points.append((event["ts"], event["step"]))
    (first_ts, first_step), (last_ts, last_step) = points[1], points[-1]  # past the first read
    return (last_step - first_step) / (last_ts - first_ts)


def report(name: str, runs: list[tuple[float, float, str]]) -> None:
    for i, (off, on, where) in enumerate(runs, 1):
        print(f"  {name} pair {i}: off {off:8.1f} steps/s  on {on:8.1f} steps/s  ({100 * (on / off - 1):+.1f} %)"
              f"  load {where}")
    off_m, on_m = statistics.median(r[0] for r in runs), statistics.median(r[1] for r in runs)
    print(f"{name}: median off {off_m:.1f}, on {on_m:.1f} steps/s: {100 * (on_m / off_m - 1):+.2f} % with the split on")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--demo-seconds", type=int, default=20)
    parser.add_argument("--fit-steps", type=int, default=15000)
    parser.add_argument("--only", choices=("demo", "fit"))
    parser.add_argument("--micro", action="store_true", help="in one process, alternating blocks (see above)")
    parser.add_argument("--blocks", type=int, default=200)
    parser.add_argument("--calls", type=int, default=100)
    args = parser.parse_args()
    print(f"python {sys.version.split()[0]}, {os.cpu_count()} cpus, load {load()} at start")
    if args.micro:
        for workload in ("fit", "demo"):
            if args.only in (None, workload):
                off, on, paired = micro_run(workload, args.blocks, args.calls)
                print(f"{workload} step, one process: off {off * 1e6:.1f} us, on {on * 1e6:.1f} us per step "
                      f"(medians); on/off of each pair of blocks, median: {100 * (paired - 1):+.2f} %  (load {load()})")
        return 0
    if args.only != "demo":
        fit_runs = []
        for _ in range(args.repeats):
            off = fit_run(False, args.fit_steps)
            on = fit_run(True, args.fit_steps)
            fit_runs.append((off, on, load()))
        report("keras fit", fit_runs)
    if args.only != "fit":
        with tempfile.TemporaryDirectory(prefix="distlaunch-bench-") as scratch:
            demo_runs = []
            for n in range(args.repeats):
                off = demo_run(False, args.demo_seconds, Path(scratch), n)
                on = demo_run(True, args.demo_seconds, Path(scratch), n)
                demo_runs.append((off, on, load()))
                time.sleep(1)
            report("demo job (chief)", demo_runs)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
