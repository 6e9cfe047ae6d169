"""What autolog costs a training script, measured as the agent runs it (the zipapp's
``distlaunch_site`` first on PYTHONPATH) against the same script with autolog off.

1. start-up of a Python that never imports TensorFlow (``python -c pass``): the hook's cost;
2. a tight custom loop (a tiny ``tf.function`` train step with a Keras optimizer, ~1-2 ms):
   the patched ``tf.function`` call plus the optimizer reader thread at the default
   interval (1 s, the profile's ``sample_interval``) and at 0.1 s (promise: < 1 % for the
   reader, < 2 % in all);
3. Keras ``fit`` on a tiny model (per-batch callback, loss and logs kept as references).

Each figure is the best of ``--repeats`` runs, off and on alternating so drift hits both alike.
Run: ``.venv/bin/python benchmarks/autolog_overhead.py [--repeats 5] [--steps 3000]``
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from launcher import agentpack

CUSTOM_LOOP = """
import os, sys, time
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
steps = int(sys.argv[1])
start = time.perf_counter()
for _ in range(steps):
    loss = train_step()
print(steps / (time.perf_counter() - start))
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


def steps_per_s(script: str, steps: int, env: dict[str, str]) -> float:
    out = subprocess.run([sys.executable, "-c", script, str(steps)], env=env, capture_output=True, text=True,
                         check=True, timeout=600)
    return float(out.stdout.strip().splitlines()[-1])


def startup_ms(env: dict[str, str], repeats: int) -> float:
    best = float("inf")
    for _ in range(repeats):
        start = time.perf_counter()
        subprocess.run([sys.executable, "-c", "pass"], env=env, check=True)
        best = min(best, (time.perf_counter() - start) * 1000)
    return best


def compare(script: str, steps: int, repeats: int, pyz: Path, interval: float) -> tuple[float, float]:
    off = on = 0.0
    for _ in range(repeats):
        off = max(off, steps_per_s(script, steps, environment(pyz, False, None)))
        on = max(on, steps_per_s(script, steps, environment(pyz, True, interval)))
    return off, on


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--steps", type=int, default=3000)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        pyz = Path(tmp) / "agent.pyz"
        pyz.write_bytes(agentpack.build_agent_zipapp())
        off_ms = startup_ms(environment(pyz, False, None), args.repeats * 4)
        on_ms = startup_ms(environment(pyz, True, 1.0), args.repeats * 4)
        print(f"python -c pass start-up: {off_ms:.1f} ms without autolog, {on_ms:.1f} ms with "
              f"(+{on_ms - off_ms:.1f} ms)")
        for interval in (1.0, 0.1):
            off, on = compare(CUSTOM_LOOP, args.steps, args.repeats, pyz, interval)
            print(f"custom loop, reader every {interval:g} s: {off:.0f} steps/s off, {on:.0f} on: "
                  f"overhead {100 * (off - on) / off:+.2f} %")
        off, on = compare(KERAS_FIT, args.steps, args.repeats, pyz, 1.0)
        print(f"Keras fit (per-batch callback): {off:.0f} steps/s off, {on:.0f} on: "
              f"overhead {100 * (off - on) / off:+.2f} %")
    return 0


if __name__ == "__main__":
    sys.exit(main())
