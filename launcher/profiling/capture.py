"""One TensorFlow profiler capture of several tasks at the same moment.

Each task's profiler server was started by autolog on the port the plan gave it
(``DISTLAUNCH_PROFILER_PORT``, recorded as ``profiler_port`` in state.json). One
``profiler_client.trace`` call with every task's address asks them all at once; TensorFlow writes
``<logdir>/plugins/profile/<timestamp>/<host>_<port>.xplane.pb`` per task, the layout
``tensorboard --logdir <logdir>`` opens.
"""

from __future__ import annotations

import os
import sys
from dataclasses import dataclass
from pathlib import Path

from launcher.errors import UserError
from launcher.plan import host_port


@dataclass(frozen=True)
class Target:
    task: str
    address: str
    port: int

    @property
    def service(self) -> str:
        return "grpc://" + host_port(self.address, self.port)


def trace(targets: list[Target], logdir: Path, seconds: float) -> dict[str, Path]:
    """Capture every target for ``seconds``; each task's ``.xplane.pb``. A task whose server does
    not answer is named in a UserError."""
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    from tensorflow.python.framework import errors
    from tensorflow.python.profiler import profiler_client

    logdir.mkdir(parents=True, exist_ok=True, mode=0o700)
    before = set(logdir.glob("plugins/profile/*/*.xplane.pb"))
    sys.stdout.flush()
    saved = os.dup(1)
    os.dup2(2, 1)  # TensorFlow prints its progress on fd 1: keep stdout for the answer (--json)
    try:
        profiler_client.trace(",".join(t.service for t in targets), str(logdir), int(seconds * 1000),
                              num_tracing_attempts=2)
    except (errors.UnavailableError, errors.DeadlineExceededError, errors.UnknownError) as exc:
        names = ", ".join(f"{t.task} ({host_port(t.address, t.port)})" for t in targets)
        raise UserError(f"the profiler server of {names} did not answer ({exc.message.splitlines()[0]}); "
                        "a task that has not imported TensorFlow yet, or runs with autolog = false, "
                        "has none") from None
    finally:
        os.dup2(saved, 1)
        os.close(saved)
    found = sorted(set(logdir.glob("plugins/profile/*/*.xplane.pb")) - before)
    return match(targets, found)


def match(targets: list[Target], files: list[Path]) -> dict[str, Path]:
    """Each target's file, by the ``_<port>.xplane.pb`` TensorFlow names it with (the host part
    is the address as given, or the host's own name)."""
    out: dict[str, Path] = {}
    for target in targets:
        suffix = f"_{target.port}.xplane.pb"
        mine = [f for f in files if f.name.endswith(suffix)]
        exact = [f for f in mine if f.name == f"{target.address}{suffix}"]
        if exact or mine:
            out[target.task] = (exact or mine)[0]
    return out
