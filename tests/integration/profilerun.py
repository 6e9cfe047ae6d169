"""A run for `distlaunch profile` without starting a job: a run dir under the state root whose
state.json names tasks on a local host and the profiler ports to reach them at (real sockets:
tests/badports.py, or a real TensorFlow profiler server), and the outputs to keep captures in."""

from __future__ import annotations

import contextlib
import json
import os
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

SERVER = """
import sys, time
import tensorflow as tf
tf.profiler.experimental.server.start(int(sys.argv[1]))
x = tf.random.uniform((64, 64))
step = 0
while True:
    with tf.profiler.experimental.Trace("train", step_num=step, _r=1):
        tf.matmul(x, x)
    step += 1
    time.sleep(0.005)
"""


def fake_run(home: Path, run_id: str, outputs: Path, ports: dict[str, int]) -> Path:
    """The run dir (0700, state.json 0600) of run ``run_id``: each task of ``ports`` running on the
    local host at 127.0.0.1 with that profiler port; the local host's outputs are ``outputs``."""
    run_dir = home / "runs" / run_id
    run_dir.mkdir(parents=True, mode=0o700)
    for folder in (home, home / "runs", run_dir):
        folder.chmod(0o700)
    tasks = {task: {"host": "local", "address": "127.0.0.1", "port": 20000 + i, "state": "running",
                    "profiler_port": port} for i, (task, port) in enumerate(ports.items())}
    state = {"run_id": run_id, "name": "job", "strategy": "custom", "tasks": tasks,
             "hosts": {"local": {"config": {"transport": "local"}, "outputs_dir": str(outputs)}}}
    (run_dir / "state.json").write_text(json.dumps(state))
    (run_dir / "state.json").chmod(0o600)
    return run_dir


def processes_naming(text: str) -> list[str]:
    """The command lines of processes that name ``text`` in theirs (what a capture left running)."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit() or int(entry.name) == os.getpid():
            continue
        with contextlib.suppress(OSError):
            line = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
            if text in line:
                found.append(f"{entry.name}: {line}")
    return found


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


@contextlib.contextmanager
def profiler_server(log: Path) -> Iterator[int]:
    """A real TensorFlow profiler server (a process running small steps), on a port of 127.0.0.1."""
    port = free_port()
    with log.open("wb") as out:
        proc = subprocess.Popen([sys.executable, "-c", SERVER, str(port)], stdout=out, stderr=subprocess.STDOUT,
                                env={**os.environ, "TF_CPP_MIN_LOG_LEVEL": "2"}, start_new_session=True)
    try:
        deadline = time.monotonic() + 90
        while True:
            assert proc.poll() is None, f"the profiler server ended: {log.read_text()[-2000:]}"
            with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", port), timeout=1):
                break
            assert time.monotonic() < deadline, "the profiler server did not listen within 90 s"
            time.sleep(0.2)
        yield port
    finally:
        proc.kill()
        proc.wait()
