"""Stands in for an unmodified legacy training script: it knows nothing of distlaunch.

It prints ``INFO: global step: N, loss = X`` lines, as old TF1 between-graph scripts do, so
that the profile's ``[metrics]`` regexes are what turns its progress into metric events.
It needs neither TensorFlow nor ``launcher``.
"""

from __future__ import annotations

import argparse
import math
import sys
import time


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=50, help="steps to print (default 50)")
    parser.add_argument("--sleep", type=float, default=0.02, help="seconds between steps (default 0.02)")
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    for step in range(1, args.steps + 1):
        loss = 2.3 * math.exp(-step / 25.0) + 0.05
        print(f"INFO: global step: {step}, loss = {loss:.4f}", flush=True)
        if args.sleep > 0:
            time.sleep(args.sleep)
    return 0


if __name__ == "__main__":
    sys.exit(main())
