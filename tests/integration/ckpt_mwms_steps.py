"""A tiny MultiWorkerMirrored job that checkpoints and announces it (tests of checkpoints the launcher keeps).

Every worker restores from ``$CKPT_ROOT/ckpt`` (a directory of its host's own). worker:0 keeps its
checkpoints there with a CheckpointManager and announces each with an ``@distlaunch`` checkpoint
line; the other workers write theirs to a temp dir they delete, as TensorFlow's multi-worker
pattern does, so they keep none. After restoring, the workers compare their steps through a
collective: a group that starts from different checkpoints exits 3 ("restored different steps").
Each step is one all-reduce, so the workers go in lock step. Prints ``restored step N`` and
``finished at step N``.
"""

from __future__ import annotations

import json
import os
import shutil
import sys
import time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import tensorflow as tf

STEPS = int(os.environ.get("STEPS", "60"))
EVERY = int(os.environ.get("CKPT_EVERY", "20"))
PAUSE = float(os.environ.get("STEP_SECONDS", "0.1"))


def main() -> int:
    strategy = tf.distribute.MultiWorkerMirroredStrategy()
    index = int(json.loads(os.environ["TF_CONFIG"])["task"]["index"])
    workers = strategy.num_replicas_in_sync
    root = os.environ["CKPT_ROOT"]
    directory = os.path.join(root, "ckpt")
    with strategy.scope():
        step = tf.Variable(0, dtype=tf.int64)
    ckpt = tf.train.Checkpoint(step=step)
    mine = directory if index == 0 else os.path.join(root, f"tmp-worker-{index}")
    manager = tf.train.CheckpointManager(ckpt, mine, max_to_keep=2)
    latest = tf.train.latest_checkpoint(directory)
    if latest:
        ckpt.restore(latest).expect_partial()
    start = int(step.numpy())
    print(f"restored step {start}", flush=True)

    @tf.function
    def total(value: tf.Tensor) -> tf.Tensor:
        def fn(v: tf.Tensor) -> tf.Tensor:
            ctx = tf.distribute.get_replica_context()
            return ctx.all_reduce(tf.distribute.ReduceOp.SUM, v * 1.0)
        return strategy.experimental_local_results(strategy.run(fn, args=(value,)))[0]

    if round(float(total(tf.constant(float(start))).numpy())) != start * workers:
        print(f"restored different steps (mine {start})", flush=True)
        return 3
    one = tf.constant(1.0)
    for s in range(start, STEPS):
        total(one)
        step.assign_add(1)
        done = s + 1
        if done % EVERY == 0 and done < STEPS:
            began = time.monotonic()
            path = manager.save(checkpoint_number=done)
            if index == 0:
                base = os.path.basename(path)
                files = [*sorted(f for f in os.listdir(directory) if f.startswith(base + ".")), "checkpoint"]
                print("@distlaunch " + json.dumps({
                    "kind": "checkpoint", "directory": directory, "step": done, "files": files,
                    "api": "checkpoint_manager", "seconds": time.monotonic() - began,
                    "bytes": sum(os.path.getsize(os.path.join(directory, f)) for f in files)}), flush=True)
            else:
                shutil.rmtree(mine, ignore_errors=True)
        time.sleep(PAUSE)
    print(f"finished at step {int(step.numpy())}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
