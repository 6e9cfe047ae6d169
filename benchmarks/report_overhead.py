"""How much does ``report.report()`` cost a training loop that calls it every step?

Three measurements, each the best of ``--repeats`` runs, with report lines going to a
sink that only counts them (the agent's pipe is not part of what is measured):

1. a trivial loop (a few float ops per iteration) with and without ``report(step=i, loss=x)``:
   the raw per-call cost in nanoseconds;
2. a loop whose work is sized to ~100,000 iterations/s, the rate the report module
   promises to sustain with only a few percent overhead;
3. with ``--tf``: a tiny TensorFlow training step (tf.function), reporting the loss tensor.

Run: ``.venv/bin/python benchmarks/report_overhead.py [--tf]``
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from collections.abc import Callable

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from launcher import report


class LineCounter:
    """A stdout stand-in that counts lines and keeps nothing."""

    def __init__(self) -> None:
        self.lines = 0

    def write(self, text: str) -> int:
        self.lines += text.count("\n")
        return len(text)

    def flush(self) -> None:
        pass


def trivial_loop(n: int, with_report: bool) -> None:
    x = 1.0
    if with_report:
        for i in range(n):
            x = x * 0.999 + 0.001
            report.report(step=i, loss=x)
    else:
        for _ in range(n):
            x = x * 0.999 + 0.001


def paced_loop(n: int, work: int, with_report: bool) -> None:
    x = 1.0
    for i in range(n):
        for _ in range(work):
            x = x * 0.999 + 0.001
        if with_report:
            report.report(step=i, loss=x)


def best_rate(run: Callable[[], None], n: int, repeats: int,
              clock: Callable[[], float] = time.thread_time) -> float:
    """Iterations per second of the fastest of ``repeats`` runs.

    Pure-Python loops are timed on this thread's CPU clock, so time spent descheduled
    on a busy machine does not count; TensorFlow (many threads) on the wall clock.
    """
    best = 0.0
    for _ in range(repeats):
        start = clock()
        run()
        best = max(best, n / max(clock() - start, 1e-9))
    return best


def compare(run: Callable[[bool], None], n: int, repeats: int,
            clock: Callable[[], float] = time.thread_time) -> tuple[float, float]:
    """Best rate without and with report(), the two runs alternating so drift hits both alike."""
    without = with_ = 0.0
    for _ in range(repeats):
        without = max(without, best_rate(lambda: run(False), n, 1, clock))
        with_ = max(with_, best_rate(lambda: run(True), n, 1, clock))
    return without, with_


def calibrate_work(target_rate: float) -> int:
    """Inner-loop length that makes ``paced_loop`` run at about ``target_rate`` iterations/s."""
    n, probe = 20_000, 100
    rate = best_rate(lambda: paced_loop(n, probe, False), n, 3)
    return max(1, round(probe * rate / target_rate))


def measure_tf(steps: int, repeats: int) -> tuple[float, float]:
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    import tensorflow as tf

    w = tf.Variable(tf.zeros([8, 1]))
    x = tf.random.normal([32, 8])
    y = tf.reduce_sum(x, axis=1, keepdims=True)
    opt = tf.keras.optimizers.SGD(0.01)

    @tf.function
    def step() -> tf.Tensor:
        with tf.GradientTape() as tape:
            loss = tf.reduce_mean(tf.square(tf.matmul(x, w) - y))
        opt.apply_gradients([(tape.gradient(loss, w), w)])
        return loss

    step()

    def run(with_report: bool) -> None:
        for i in range(steps):
            loss = step()
            if with_report:
                report.report(step=i, loss=loss)

    run(False)  # warm up TensorFlow's thread pools and caches before measuring
    return compare(run, steps, repeats, time.perf_counter)


def line(label: str, without: float, with_: float) -> str:
    overhead = (without / with_ - 1.0) * 100.0
    return (f"{label:<34} without: {without:>12,.0f} it/s   with report(): {with_:>12,.0f} it/s   "
            f"ratio {with_ / without:.3f}   overhead {overhead:+.1f} %")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("-n", type=int, default=2_000_000, help="iterations of the trivial loop")
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--tf", action="store_true", help="also measure a tiny TensorFlow loop")
    args = parser.parse_args()

    sink = LineCounter()
    real_stdout = sys.stdout
    report.configure(min_interval=report.DEFAULT_MIN_INTERVAL_S)
    results = []
    sys.stdout = sink
    try:
        n = args.n
        without, with_ = compare(lambda r: trivial_loop(n, r), n, args.repeats)
        per_call_ns = (1 / with_ - 1 / without) * 1e9
        results.append(line("1. trivial loop", without, with_))
        results.append(f"   cost of one report() call: {per_call_ns:.0f} ns "
                       f"-> at 100,000 calls/s: {per_call_ns * 1e5 / 1e9 * 100:.1f} % of one core")

        work = calibrate_work(100_000)
        paced_n = 300_000
        without, with_ = compare(lambda r: paced_loop(paced_n, work, r), paced_n, args.repeats)
        results.append(line("2. loop paced to ~100k it/s", without, with_))

        if args.tf:
            without, with_ = measure_tf(3000, args.repeats)
            results.append(line("3. tiny tf.function train step", without, with_))
        report.flush()
    finally:
        sys.stdout = real_stdout
    print("loops 1-2 timed on thread CPU time, loop 3 on wall time; best of each")
    print(f"report() min_interval {report.DEFAULT_MIN_INTERVAL_S} s; "
          f"report lines written during the run: {sink.lines}")
    for text in results:
        print(text)


if __name__ == "__main__":
    main()
