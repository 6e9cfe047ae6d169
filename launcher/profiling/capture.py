"""One TensorFlow profiler capture of several tasks at the same moment.

Each task's profiler server was started by autolog on the port the plan gave it
(``DISTLAUNCH_PROFILER_PORT``, recorded as ``profiler_port`` in state.json). One
``profiler_client.trace`` call with every task's address asks them all at once. Each *server*
writes its ``<logdir>/plugins/profile/<timestamp>/<address>_<port>.xplane.pb`` on its own host
(the layout ``tensorboard --logdir <logdir>`` opens); the files of tasks on other hosts are then
copied here over their transport (``fetch_remote``), into the same place.
"""

from __future__ import annotations

import base64
import os
import shlex
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from launcher.errors import UserError
from launcher.plan import host_port

#: seconds the copy of a host's files may take
FETCH_TIMEOUT_S = 300.0


@dataclass(frozen=True)
class Target:
    task: str
    host: str
    address: str
    port: int

    @property
    def service(self) -> str:
        return "grpc://" + host_port(self.address, self.port)

    @property
    def file_name(self) -> str:
        """What TensorFlow's profiler server names its capture: the address as asked, and the port."""
        return f"{self.address}_{self.port}.xplane.pb"


class NoAnswer(Exception):
    """No profiler server answered (the message says which were asked and what to check)."""


def trace(targets: list[Target], logdir: Path, seconds: float) -> None:
    """Capture every target for ``seconds``; each server writes its file under ``logdir`` on its host."""
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    try:
        from tensorflow.python.framework import errors
        from tensorflow.python.profiler import profiler_client
    except ImportError as exc:
        raise UserError(f"distlaunch profile needs TensorFlow on this machine ({exc}); "
                        "install it here (pip install tensorflow) to capture") from None
    logdir.mkdir(parents=True, exist_ok=True, mode=0o700)
    sys.stdout.flush()
    saved = os.dup(1)
    os.dup2(2, 1)  # TensorFlow prints its progress on fd 1: keep stdout for the answer (--json)
    try:
        profiler_client.trace(",".join(t.service for t in targets), str(logdir), max(1, int(seconds * 1000)),
                              num_tracing_attempts=2)
    except errors.OpError as exc:
        names = ", ".join(f"{t.task} ({host_port(t.address, t.port)})" for t in targets)
        first = (exc.message or type(exc).__name__).splitlines()[0]
        raise NoAnswer(f"no capture from {names}: {first}. A task that has not imported TensorFlow yet, runs "
                       "with autolog = false or has ended has no profiler server; one on another host must be "
                       "reachable from this machine at its TF_CONFIG address") from None
    finally:
        os.dup2(saved, 1)
        os.close(saved)


def local_files(logdir: Path) -> list[Path]:
    return sorted(logdir.glob("plugins/profile/*/*.xplane.pb"))


def match(targets: list[Target], files: list[Path]) -> dict[str, Path]:
    """Each target's file, by the exact name its server gives it (``<address>_<port>.xplane.pb``)."""
    by_name: dict[str, Path] = {}
    for path in files:
        by_name.setdefault(path.name, path)
    return {t.task: by_name[t.file_name] for t in targets if t.file_name in by_name}


def fetch_remote(state: dict[str, Any], targets: list[Target], logdir: Path) -> list[str]:
    """Copy the files the servers of tasks on other hosts wrote under ``logdir`` there into
    ``logdir`` here; one line per host whose files could not be had."""
    from launcher.commands.runhosts import open_sessions  # the transports, only for remote tasks

    hosts = state.get("hosts") or {}
    remote = sorted({t.host for t in targets
                     if ((hosts.get(t.host) or {}).get("config") or {}).get("transport") != "local"})
    if not remote:
        return []
    wanted = {t.file_name for t in targets if t.host in remote}
    sessions, problems = open_sessions({**state, "hosts": {h: hosts[h] for h in remote if h in hosts}})
    lines = [f"host {h}: {why}" for h, why in problems.items()]
    script = (f"cd {shlex.quote(str(logdir))} 2>/dev/null || exit 0; "
              "for f in plugins/profile/*/*.xplane.pb; do [ -f \"$f\" ] || continue; "
              "echo \"$f\"; base64 -w0 \"$f\"; echo; done")
    try:
        for name, session in sessions.items():
            if name in problems:
                continue
            result = session.host.run(script, timeout=FETCH_TIMEOUT_S)
            if not result.ok:
                lines.append(f"host {name}: could not read {logdir} ({result.stderr.strip()[:200]})")
                continue
            rows = result.stdout.splitlines()
            for relative, data in zip(rows[0::2], rows[1::2], strict=False):
                if Path(relative).name not in wanted or ".." in Path(relative).parts:
                    continue
                target = logdir / relative
                target.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
                target.write_bytes(base64.b64decode(data))
    finally:
        for session in sessions.values():
            session.host.close()
    return lines
