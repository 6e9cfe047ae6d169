"""A task whose last output comes right before its end (issue 62): ``--steps`` readings as autolog
writes them (``@distlaunch`` metric lines, source autolog), then a log line ``last line <step>``.

Alone it then exits 0 at once. With ``--ready FILE`` it writes FILE after its lines and waits to
be stopped: at SIGTERM it writes one more reading (step ``--steps`` + 1) and its ``last line``,
and exits 0, so the line it wrote last is the one the stop's race could lose. With ``--wait DIR
--count N`` it first waits for N files in DIR (the stopped tasks' ``--ready`` files), so that the
job's success, which stops them, comes after their first lines. Stdlib only, any Python >= 3.9."""

import argparse
import json
import os
import signal
import sys
import time


def reading(step):
    line = {"kind": "metric", "step": step, "loss": 1.0 / step, "values": {}, "source": "autolog"}
    sys.stdout.write("@distlaunch " + json.dumps(line) + "\n")
    sys.stdout.flush()


def last(step):
    reading(step)
    print(f"last line {step}", flush=True)


def stopped(signum, frame):
    last(args.steps + 1)
    os._exit(0)


parser = argparse.ArgumentParser()
parser.add_argument("--steps", type=int, default=30)
parser.add_argument("--ready")
parser.add_argument("--wait")
parser.add_argument("--count", type=int, default=0)
args = parser.parse_args()
if args.wait:
    while len([n for n in os.listdir(args.wait) if n.startswith("ready-")]) < args.count:
        time.sleep(0.05)
if args.ready:
    signal.signal(signal.SIGTERM, stopped)
for step in range(1, args.steps):
    reading(step)
last(args.steps)
if args.ready:
    part = os.path.join(os.path.dirname(args.ready), "." + os.path.basename(args.ready))
    with open(part, "w") as f:
        f.write("ready\n")
    os.rename(part, args.ready)
    while True:
        time.sleep(3600)
