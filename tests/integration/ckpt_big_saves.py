"""A task that saves a big checkpoint and announces it, without TensorFlow (tests of the copies).

Writes ``$CKPT_ROOT/ckpt/ckpt-10.index`` and ``ckpt-10.data-00000-of-00001`` (``SAVE_BYTES`` of
random bytes; worker:0 only, the others a few bytes) and announces them with an ``@distlaunch``
checkpoint line; then waits for ``$CKPT_ROOT/go`` (the test's word that it has seen what it
looks for) before saving step 20, a small one, and ending.
"""

from __future__ import annotations

import json
import os
import sys
import time


def save(directory: str, step: int, nbytes: int) -> None:
    os.makedirs(directory, exist_ok=True)
    files = [f"ckpt-{step}.data-00000-of-00001", f"ckpt-{step}.index"]
    with open(os.path.join(directory, files[0]), "wb") as f:
        f.write(os.urandom(nbytes))
    with open(os.path.join(directory, files[1]), "wb") as f:
        f.write(f"index of step {step}\n".encode())
    with open(os.path.join(directory, "checkpoint"), "w") as f:
        f.write(f'model_checkpoint_path: "ckpt-{step}"\nall_model_checkpoint_paths: "ckpt-{step}"\n')
    files.append("checkpoint")
    print("@distlaunch " + json.dumps({
        "kind": "checkpoint", "directory": directory, "step": step, "files": files, "api": "checkpoint_manager",
        "bytes": sum(os.path.getsize(os.path.join(directory, n)) for n in files)}), flush=True)


def main() -> int:
    root = os.environ["CKPT_ROOT"]
    index = int(json.loads(os.environ["TF_CONFIG"])["task"]["index"])
    directory = os.path.join(root, "ckpt")
    save(directory, 10, int(os.environ.get("SAVE_BYTES", "1000")) if index == 0 else 100)
    deadline = time.monotonic() + float(os.environ.get("WAIT_SECONDS", "300"))
    while not os.path.exists(os.path.join(root, "go")):  # the test says when; bounded all the same
        if time.monotonic() > deadline:
            print("no go within the wait", flush=True)
            return 4
        time.sleep(0.2)
    save(directory, 20, 100)
    print("done at step 20", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
