"""A task that keeps its work across allocations, without TensorFlow: it counts steps, keeps its
checkpoint (the step) in the file $CKPT, resumes from it, saves it at every step and once more on
SIGTERM (the checkpoint before the stop), reports each step to distlaunch and ends at $STEPS.
Prints "resumed from step N" at its start and "stopped at step N" when SIGTERM ended it."""

import json
import os
import signal
import sys
import time

ckpt = os.environ["CKPT"]
steps = int(os.environ.get("STEPS", "100"))
start = 0
if os.path.exists(ckpt):
    with open(ckpt) as saved:
        start = int(saved.read())
print(f"resumed from step {start}", flush=True)
stopping = []
signal.signal(signal.SIGTERM, lambda *_: stopping.append(True))
step = start
while step < steps and not stopping:
    time.sleep(float(os.environ.get("STEP_SECONDS", "0.1")))
    step += 1
    with open(ckpt + ".tmp", "w") as f:
        f.write(str(step))
    os.replace(ckpt + ".tmp", ckpt)
    print("@distlaunch " + json.dumps({"kind": "metric", "step": step}), flush=True)
if stopping:
    print(f"stopped at step {step}", flush=True)
    sys.exit(143)
print(f"done at step {step}", flush=True)
