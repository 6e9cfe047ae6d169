"""A host leaving the run: the preemption notice the agent watches for, and the mark a host
keeps once the run moved off it.

``PreemptionWatch`` runs the host's ``preemption_notice`` every POLL_SECONDS while tasks run;
exit 0: the host is about to go, and the supervisor drains it (``Preempted``). A command that
hangs, fails or is missing is a "no". ``retire`` writes ``retired`` in the host run dir once the
run moved off the host: from then on the agent starts nothing of the run there, until the
supervisor re-admits the host with a new incarnation token (``readmit``). Stdlib-only.
"""

from __future__ import annotations

import contextlib
import os
import select
import signal
import stat
import subprocess
import threading
import time
from typing import Any, Callable, Dict, List, Optional

RETIRED_NAME = "retired"
#: the incarnation tokens this host was re-admitted with, one a line: each lifts the mark once
INCARNATIONS_NAME = "incarnations"
POLL_SECONDS = 5.0
COMMAND_TIMEOUT = 10.0
OUTPUT_BYTES = 4096


def retire(run_dir: str, reason: str) -> None:
    """Mark the host as left by the run (0600, written whole)."""
    path = os.path.join(run_dir, RETIRED_NAME)
    fd = os.open(path + ".tmp", os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW, 0o600)
    with os.fdopen(fd, "w", encoding="utf-8") as f:
        f.write((reason or "the run moved off this host") + "\n")
    os.replace(path + ".tmp", path)


def readmit(run_dir: str, token: str) -> Dict[str, Any]:
    """The supervisor re-admits this host as a new incarnation: the ``retired`` mark is lifted
    only here, and only for a token this host has never been given (a replayed or stale request
    cannot bring the old incarnation back). Answers ``offsets``: each task's events.jsonl size now,
    so that the supervisor follows none of the old incarnation's events; or ``error``."""
    if not token or not token.isprintable() or "\n" in token:
        return {"error": "a re-admission needs an incarnation token"}
    seen_path = os.path.join(run_dir, INCARNATIONS_NAME)
    try:
        with open(seen_path, encoding="utf-8") as f:
            seen = {line.strip() for line in f if line.strip()}
    except FileNotFoundError:
        seen = set()
    if token in seen:
        return {"error": "incarnation token %s was already used on this host" % token}
    fd = os.open(seen_path, os.O_WRONLY | os.O_CREAT | os.O_APPEND | os.O_NOFOLLOW, 0o600)
    with os.fdopen(fd, "a", encoding="utf-8") as f:
        f.write(token + "\n")
    with contextlib.suppress(FileNotFoundError):
        os.unlink(os.path.join(run_dir, RETIRED_NAME))
    offsets: Dict[str, int] = {}
    tasks = os.path.join(run_dir, "tasks")
    for slug in sorted(os.listdir(tasks)) if os.path.isdir(tasks) else []:
        with contextlib.suppress(OSError):
            offsets[slug] = os.lstat(os.path.join(tasks, slug, "events.jsonl")).st_size
    return {"readmitted": token, "offsets": offsets}


def retired_reason(run_dir: str) -> Optional[str]:
    """Why the run left this host, or None while it has not; anything but a regular file there
    (a FIFO, a link) is read as retired, never waited on."""
    try:
        fd = os.open(os.path.join(run_dir, RETIRED_NAME), os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
    except FileNotFoundError:
        return None
    except OSError as exc:
        return "%s/%s: %s" % (run_dir, RETIRED_NAME, exc.strerror)
    with os.fdopen(fd, "rb") as f:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            return "%s/%s: not a regular file; remove it" % (run_dir, RETIRED_NAME)
        return shown(f.read(4096).decode("utf-8", "replace").strip()) or "the run moved off this host"


def shown(text: str) -> str:
    """``text`` with what a terminal would act on written out (``\\x1b``): shown, never obeyed."""
    return "".join(c if c.isprintable() else repr(c)[1:-1] for c in text)


def notice_says_go(command: str, timeout: float = COMMAND_TIMEOUT) -> Optional[str]:
    """Run ``command`` once: the first line it printed (or a plain phrase) when it exited 0, else
    None. At most OUTPUT_BYTES of output are kept, and it takes at most ``timeout``, even when a
    background child holds the output; what is left of its process group is killed."""
    try:
        proc = subprocess.Popen(["/bin/sh", "-c", command], stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                                stderr=subprocess.DEVNULL, start_new_session=True)
    except OSError:
        return None
    out, fd, code = b"", proc.stdout.fileno(), None  # type: ignore[union-attr]
    deadline = time.monotonic() + timeout
    try:
        while code is None:
            left = deadline - time.monotonic()
            if left <= 0:
                return None
            if select.select([fd], [], [], min(left, 0.2))[0]:
                chunk = os.read(fd, 65536)
                if not chunk:
                    code = proc.wait(left)
                out += chunk[:OUTPUT_BYTES - len(out)]
            elif proc.poll() is not None:  # ended; a background child may hold the output
                code = proc.returncode
                if select.select([fd], [], [], 0)[0]:
                    out += os.read(fd, OUTPUT_BYTES)[:OUTPUT_BYTES - len(out)]
    except subprocess.TimeoutExpired:
        return None
    finally:
        proc.stdout.close()  # type: ignore[union-attr]
        with contextlib.suppress(OSError):
            os.killpg(proc.pid, signal.SIGKILL)
        with contextlib.suppress(subprocess.TimeoutExpired):
            proc.wait(5)
    if code != 0:
        return None
    first = out.decode("utf-8", "replace").strip().splitlines()[:1]
    return shown(first[0][:200]) if first else "the host is about to go"


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
                    self._on_notice("preemption notice (%s): %s" % (shown(command), said))
                    break
