"""What autolog costs a training script, measured as the agent runs it (the zipapp's
``distlaunch_site`` first on PYTHONPATH) against the same script with autolog off.

1. start-up of a Python that never imports TensorFlow (``python -c pass``): the hook's cost;
2. a tight custom loop (a tiny ``tf.function`` train step with a Keras optimizer, ~0.2 ms),
   with the optimizer reader thread at the default interval (1 s, the profile's
   ``sample_interval``) and at 0.1 s (promise: < 1 % for the reader, < 2 % in all). Steps/s
   off vs on vary by +-3 % between runs on a shared machine, as much as the targets, so beside
   them come figures that do not depend on run-to-run noise:

   a. the reader thread's own CPU seconds (``StepReader.cpu_s``, its ``thread_time`` after each
      tick) over the process's CPU seconds during the loop;
   b. the per-call cost of the patched ``tf.function.__call__`` (the only autolog code on the
      step's path: ``apply_gradients`` runs at tracing only), in one process with autolog on:
      blocks of calls of a trivial ``tf.function`` marked as a train step through the patched
      ``__call__`` and through the original it wraps, alternating, medians of the blocks; and
      the wrapper alone around a stub. As a percentage of the loop's step time in the same run;
   c. process CPU time per step (``time.process_time`` in the task around the loop), off and
      on alternating, medians: less noisy than wall time, it also counts TensorFlow's threads;

3. Keras ``fit`` on a tiny model (per-batch callback, loss and logs kept as references).

Steps/s figures are the best of ``--repeats`` runs, the others medians; off and on alternate so
drift hits both alike.
Run: ``.venv/bin/python benchmarks/autolog_overhead.py [--repeats 5] [--steps 20000]``
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

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from launcher.remote import agentpack

# prints one JSON line: steps/s, process CPU and (autolog on) the reader's CPU during the loop
CUSTOM_LOOP = """
import json, sys, time
import tensorflow as tf
w = tf.Variable(tf.zeros([64, 1]))
x = tf.random.normal([128, 64]); y = tf.reduce_sum(x, axis=1, keepdims=True)
opt = tf.keras.optimizers.SGD(0.001)
@tf.function
def train_step():
    with tf.GradientTape() as tape:
        loss = tf.reduce_mean(tf.square(tf.matmul(x, w) - y))
    opt.apply_gradients([(tape.gradient(loss, w), w)])
    return loss
for _ in range(200):
    train_step()
autolog = sys.modules.get("launcher.autolog.recorder")
reader = autolog.reader if autolog is not None else None
steps = int(sys.argv[1])
reader_cpu, ticks = (reader.cpu_s, reader.ticks) if reader is not None else (0.0, 0)
cpu = time.process_time()
start = time.perf_counter()
for _ in range(steps):
    loss = train_step()
wall = time.perf_counter() - start
cpu = time.process_time() - cpu
if reader is not None:
    reader_cpu, ticks = reader.cpu_s - reader_cpu, reader.ticks - ticks
print(json.dumps({"steps_per_s": steps / wall, "cpu_us_per_step": 1e6 * cpu / steps, "cpu_s": cpu,
                  "wall_s": wall, "reader_cpu_s": reader_cpu, "reader_ticks": ticks}))
"""

# autolog on only: per-call cost of the patched tf.function __call__ against the original it wraps
CALL_COST = """
import json, statistics, sys, time
import tensorflow as tf
from launcher.autolog import patches
calls, blocks = int(sys.argv[1]), int(sys.argv[2])
@tf.function
def trivial():
    return tf.constant(1.0)
trivial()
trivial.__dict__[patches._TRAIN_MARK] = "scalar"  # as the wrapper marks a call that applied gradients
patched = type(trivial).__call__
original = patched.__wrapped__
def per_call_us(fn, obj, n):
    start = time.perf_counter()
    for _ in range(n):
        fn(obj)
    return 1e6 * (time.perf_counter() - start) / n
def medians(a, b, obj, n):
    times = {a: [], b: []}
    for i in range(blocks):
        for fn in ((a, b) if i % 2 == 0 else (b, a)):
            times[fn].append(per_call_us(fn, obj, n))
    return statistics.median(times[a]), statistics.median(times[b])
real_on, real_off = medians(patched, original, trivial, calls)
class Stub:
    pass
stub = Stub()
stub.__dict__[patches._TRAIN_MARK] = "scalar"
value = tf.constant(1.0)
def bare(self):
    return value
wrapped = patches.function_call_wrapper(bare)
stub_on, stub_off = medians(wrapped, bare, stub, calls * 50)
print(json.dumps({"real_on_us": real_on, "real_off_us": real_off, "stub_on_us": stub_on, "stub_off_us": stub_off}))
"""

KERAS_FIT = """
import sys, time
import numpy as np
import keras
x = np.random.rand(4096, 32).astype("float32"); y = x[:, :1]
model = keras.Sequential([keras.Input((32,)), keras.layers.Dense(32), keras.layers.Dense(1)])
model.compile(optimizer="sgd", loss="mse")
model.fit(x, y, batch_size=32, epochs=1, verbose=0)
epochs = max(1, int(sys.argv[1]) // 128)
start = time.perf_counter()
model.fit(x, y, batch_size=32, epochs=epochs, verbose=0)
print(epochs * 128 / (time.perf_counter() - start))
"""

INTERVALS = (1.0, 0.1)


def environment(pyz: Path, autolog: bool, interval: float | None) -> dict[str, str]:
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2", DISTLAUNCH_REPORT_INTERVAL="0.1")
    entries = [str(pyz)]
    if autolog:
        entries.insert(0, str(pyz / agentpack.SITE_DIR))
    env["PYTHONPATH"] = os.pathsep.join(entries)
    env["DISTLAUNCH_AUTOLOG"] = "1" if autolog else "0"
    if interval is not None:
        env["DISTLAUNCH_SAMPLE_INTERVAL"] = str(interval)
    return env


def last_line(script: str, args: list[str], env: dict[str, str]) -> str:
    out = subprocess.run([sys.executable, "-c", script, *args], env=env, capture_output=True, text=True,
                         check=True, timeout=600)
    return out.stdout.strip().splitlines()[-1]


def startup_ms(env: dict[str, str], repeats: int) -> float:
    best = float("inf")
    for _ in range(repeats):
        start = time.perf_counter()
        subprocess.run([sys.executable, "-c", "pass"], env=env, check=True)
        best = min(best, (time.perf_counter() - start) * 1000)
    return best


def custom_loops(steps: int, repeats: int, pyz: Path) -> dict[str, list[dict[str, float]]]:
    """Off, on at each interval, alternating, ``repeats`` times: the loop's JSON per run."""
    runs: dict[str, list[dict[str, float]]] = {"off": [], **{f"on {i:g}": [] for i in INTERVALS}}
    for _ in range(repeats):
        runs["off"].append(json.loads(last_line(CUSTOM_LOOP, [str(steps)], environment(pyz, False, None))))
        for interval in INTERVALS:
            env = environment(pyz, True, interval)
            runs[f"on {interval:g}"].append(json.loads(last_line(CUSTOM_LOOP, [str(steps)], env)))
    return runs


def pct(part: float, whole: float) -> float:
    return 100 * part / whole


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--steps", type=int, default=20000, help="custom loop steps (long enough for the reader "
                        "to tick several times at 1 s)")
    parser.add_argument("--fit-steps", type=int, default=3000)
    parser.add_argument("--calls", type=int, default=2000, help="tf.function calls per timed block")
    parser.add_argument("--blocks", type=int, default=21)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        pyz = Path(tmp) / "agent.pyz"
        pyz.write_bytes(agentpack.build_agent_zipapp())
        off_ms = startup_ms(environment(pyz, False, None), args.repeats * 4)
        on_ms = startup_ms(environment(pyz, True, 1.0), args.repeats * 4)
        print(f"python -c pass start-up: {off_ms:.1f} ms without autolog, {on_ms:.1f} ms with "
              f"(+{on_ms - off_ms:.1f} ms)")

        runs = custom_loops(args.steps, args.repeats, pyz)
        off_best = max(r["steps_per_s"] for r in runs["off"])
        off_cpu = statistics.median(r["cpu_us_per_step"] for r in runs["off"])
        step_us = 1e6 / statistics.median(r["steps_per_s"] for r in runs["off"])
        reader_pct: dict[float, float] = {}
        for interval in INTERVALS:
            on = runs[f"on {interval:g}"]
            on_best = max(r["steps_per_s"] for r in on)
            print(f"custom loop, reader every {interval:g} s: {off_best:.0f} steps/s off, {on_best:.0f} on (best of "
                  f"{args.repeats}): overhead {pct(off_best - on_best, off_best):+.2f} %")
            shares = [pct(r["reader_cpu_s"], r["cpu_s"]) for r in on]
            # as if every CPU second of the reader held the training thread up (the GIL) by as much
            of_wall = [pct(r["reader_cpu_s"], r["wall_s"]) for r in on]
            reader_pct[interval] = statistics.median(of_wall)
            print(f"  a. reader thread CPU / process CPU during the loop: median {statistics.median(shares):.3f} %, "
                  f"max {max(shares):.3f} %; / loop wall time: median {reader_pct[interval]:.3f} %, max "
                  f"{max(of_wall):.3f} % ({statistics.median(r['reader_ticks'] for r in on):.0f} ticks, "
                  f"{1e3 * statistics.median(r['reader_cpu_s'] / max(1, r['reader_ticks']) for r in on):.2f} ms "
                  f"CPU per tick)")
            on_cpu = statistics.median(r["cpu_us_per_step"] for r in on)
            print(f"  c. process CPU per step: {off_cpu:.1f} us off, {on_cpu:.1f} us on (medians): "
                  f"{pct(on_cpu - off_cpu, off_cpu):+.2f} %")

        cost = json.loads(last_line(CALL_COST, [str(args.calls), str(args.blocks)], environment(pyz, True, 1.0)))
        real = cost["real_on_us"] - cost["real_off_us"]
        stub = cost["stub_on_us"] - cost["stub_off_us"]
        print(f"  b. patched tf.function __call__ of a train step: {cost['real_on_us']:.2f} us against "
              f"{cost['real_off_us']:.2f} us unpatched (+{real:.2f} us); the wrapper alone around a stub "
              f"+{stub:.2f} us ({cost['stub_on_us']:.3f} vs {cost['stub_off_us']:.3f} us); loop step "
              f"{step_us:.0f} us (off, median): {pct(real, step_us):+.3f} % / {pct(stub, step_us):+.3f} %")
        wrapper = pct(max(real, stub), step_us)
        for interval in INTERVALS:
            print(f"  a + b, reader every {interval:g} s: {reader_pct[interval] + wrapper:.3f} % of the loop's time "
                  f"(reader CPU / wall + the larger wrapper figure)")

        off = on_fit = 0.0
        for _ in range(args.repeats):
            off = max(off, float(last_line(KERAS_FIT, [str(args.fit_steps)], environment(pyz, False, None))))
            on_fit = max(on_fit, float(last_line(KERAS_FIT, [str(args.fit_steps)], environment(pyz, True, 1.0))))
        print(f"Keras fit (per-batch callback): {off:.0f} steps/s off, {on_fit:.0f} on: "
              f"overhead {pct(off - on_fit, off):+.2f} %")
    return 0


if __name__ == "__main__":
    sys.exit(main())
