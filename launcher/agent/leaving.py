"""A host leaving the run: the preemption notice the agent watches for, and the mark a host
keeps once the run moved off it.

``PreemptionWatch`` runs the host's ``preemption_notice`` command every POLL_SECONDS while tasks
run (in a process group of its own, killed after COMMAND_TIMEOUT); exit 0 means the host is about
to go, and the agent tells its followers (``Preempted``) so the supervisor drains the host. A
command that hangs, fails or is missing is a "no": a notice that cannot be read never stops a task.

``retire`` writes ``retired`` in the host run dir when the supervisor moved the run off the host
(lost, then back; or drained): from then on the agent starts nothing of the run there, whoever asks.

Stdlib-only, Python >= 3.9 (runs on hosts from the agent zipapp).
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import threading
from typing import Callable, List, Optional

RETIRED_NAME = "retired"
POLL_SECONDS = 5.0
COMMAND_TIMEOUT = 10.0


def retire(run_dir: str, reason: str) -> None:
    """Mark the host as left by the run (0600, written whole)."""
    path = os.path.join(run_dir, RETIRED_NAME)
    fd = os.open(path + ".tmp", os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW, 0o600)
    with os.fdopen(fd, "w", encoding="utf-8") as f:
        f.write((reason or "the run moved off this host") + "\n")
    os.replace(path + ".tmp", path)


def retired_reason(run_dir: str) -> Optional[str]:
    """Why the run left this host, or None while it has not."""
    try:
        with open(os.path.join(run_dir, RETIRED_NAME), encoding="utf-8", errors="replace") as f:
            return f.read().strip() or "the run moved off this host"
    except OSError:
        return None


def notice_says_go(command: str, timeout: float = COMMAND_TIMEOUT) -> Optional[str]:
    """Run ``command`` once: the first line it printed (or a plain phrase) when it exited 0, else None."""
    try:
        proc = subprocess.Popen(["/bin/sh", "-c", command], stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                                stderr=subprocess.DEVNULL, start_new_session=True)
    except OSError:
        return None
    try:
        out, _ = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        with contextlib.suppress(OSError):
            os.killpg(proc.pid, signal.SIGKILL)
        proc.communicate()
        return None
    if proc.returncode != 0:
        return None
    first = out.decode("utf-8", "replace").strip().splitlines()[:1]
    return first[0][:200] if first else "the host is about to go"


class PreemptionWatch:
    """Poll the notice command while ``active()`` says tasks run; ``on_notice(why)`` each time it fires."""

    def __init__(self, commands: Callable[[], List[str]], active: Callable[[], bool],
                 on_notice: Callable[[str], None], stop: threading.Event) -> None:
        self._commands = commands
        self._active = active
        self._on_notice = on_notice
        self._stop = stop

    def start(self) -> None:
        threading.Thread(target=self._run, name="preemption", daemon=True).start()

    def _run(self) -> None:
        while not self._stop.wait(POLL_SECONDS):
            if not self._active():
                continue
            for command in self._commands():
                said = notice_says_go(command)
                if said is not None:
                    self._on_notice("preemption notice (%s): %s" % (command, said))
                    break
