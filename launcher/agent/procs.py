"""Process helpers of the agent: /proc readings, process groups, signals, reaping.

Linux /proc first, with ``kill(0)`` fallbacks; stdlib-only, Python >= 3.9 (runs on hosts).
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import signal
import sys
import threading
import time
from typing import Callable, Collection, List, Optional, Tuple

KILL_CONFIRM_SECONDS = 5.0
PR_SET_CHILD_SUBREAPER = 36
#: held while a task is spawned and while zombies are reaped: a reap between fork and the
#: registration of the new child's pid would take its exit status from Popen
SPAWN_LOCK = threading.Lock()


def default_signals() -> None:
    """No signal ignored or blocked (launcher/agent/runner.py): a preexec_fn for a process
    started from one that may ignore some (a launcher under `nohup`), and the first thing an agent
    does, on its main thread before any other (``spawnable_signals``)."""
    for signum in signal.valid_signals():
        with contextlib.suppress(OSError, ValueError):  # SIGKILL, SIGSTOP
            signal.signal(signum, signal.SIG_DFL)
    signal.pthread_sigmask(signal.SIG_SETMASK, ())


def hush(signum: int, frame: object) -> None:
    """A handler that does nothing: the agent's SIGHUP. Unlike SIG_IGN, exec resets a handler, so
    the tasks it spawns get the default disposition without a preexec_fn."""


def spawnable_signals() -> None:
    """At an agent's start: every disposition back to the default and nothing blocked, so its tasks
    inherit defaults from a plain Popen (a handler is reset at exec; SIGPIPE, the one the agent
    ignores, is restored by Popen's restore_signals). A preexec_fn for that instead made every
    task's spawn a full fork() where Python uses vfork(): about 1.5 ms per task at 21 MB, more as
    the agent grows, one task after another under SPAWN_LOCK."""
    default_signals()


def pause(seconds: float) -> None:
    """Sleep on a timed wait: libfaketime (a host whose clock is faked in tests) makes
    ``time.sleep`` fail with EINVAL, while condition waits keep working."""
    threading.Event().wait(seconds)


def _write_atomic(path: str, text: str) -> None:
    tmp = "%s.tmp.%d" % (path, os.getpid())
    with open(tmp, "w", encoding="utf-8") as f:
        f.write(text)
    os.replace(tmp, path)


def _read_int(path: str) -> Optional[int]:
    try:
        with open(path, encoding="utf-8") as f:
            return int(f.read().strip())
    except (OSError, ValueError):
        return None


def stat_fields(pid: int) -> List[str]:
    """The fields of /proc/PID/stat after the command name (state letter first), [] when it is gone."""
    try:
        with open("/proc/%d/stat" % pid, "rb") as f:
            raw = f.read().decode("ascii", "replace")
    except OSError:
        return []
    return raw[raw.rfind(")") + 2:].split()


def _proc_stat(pid: int) -> Optional[Tuple[str, int]]:
    """(state letter, pgid) of a process from /proc, or None when it is gone."""
    rest = stat_fields(pid)
    try:
        return rest[0], int(rest[2])
    except (IndexError, ValueError):
        return None


def _all_pids() -> List[int]:
    try:
        return [int(n) for n in os.listdir("/proc") if n.isdigit()]
    except OSError:
        return []


def pid_alive(pid: int) -> bool:
    """True while the process exists and is not a zombie."""
    stat = _proc_stat(pid)
    if stat is not None:
        return stat[0] != "Z"
    if os.path.isdir("/proc/self"):
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _group_members(pgid: int) -> List[int]:
    """Live (non-zombie) processes of a process group."""
    if not os.path.isdir("/proc/self"):
        try:
            os.killpg(pgid, 0)
        except ProcessLookupError:
            return []
        except PermissionError:
            pass
        return [pgid]
    members = []
    for pid in _all_pids():
        stat = _proc_stat(pid)
        if stat is not None and stat[1] == pgid and stat[0] != "Z":
            members.append(pid)
    return members


def _environ_has(pid: int, name: str, value: str) -> bool:
    try:
        with open("/proc/%d/environ" % pid, "rb") as f:
            entries = f.read().split(b"\0")
    except OSError:
        return False
    return ("%s=%s" % (name, value)).encode() in entries


def _cmdline(pid: int) -> List[str]:
    try:
        with open("/proc/%d/cmdline" % pid, "rb") as f:
            raw = f.read()
    except OSError:
        return []
    return [part.decode("utf-8", "replace") for part in raw.split(b"\0") if part]


def _signal_group(pgid: int, sig: int) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pgid, sig)


def _signal_pid(pid: int, sig: int) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.kill(pid, sig)


def _wait_until(predicate: Callable[[], bool], timeout: float, interval: float = 0.05) -> bool:
    deadline = time.monotonic() + timeout
    while True:
        if predicate():
            return True
        if time.monotonic() >= deadline:
            return False
        pause(interval)


def _kill_group_for_good(pgid: int, term_first: float, reap: Callable[[], None]) -> None:
    """SIGTERM (when ``term_first`` > 0), wait, then SIGKILL until no live member remains."""
    if not _group_members(pgid):
        return
    if term_first > 0:
        _signal_group(pgid, signal.SIGTERM)

        def gone() -> bool:
            reap()
            return not _group_members(pgid)

        if _wait_until(gone, term_first):
            return
    deadline = time.monotonic() + KILL_CONFIRM_SECONDS
    while _group_members(pgid) and time.monotonic() < deadline:
        _signal_group(pgid, signal.SIGKILL)
        pause(0.05)
        reap()


def _become_subreaper() -> None:
    """Orphaned grandchildren of the task get the agent as parent, so it can reap them."""
    if not sys.platform.startswith("linux"):
        return
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0)
    except (OSError, AttributeError):
        pass


def _reap_adopted(exclude: Collection[int]) -> None:
    """Collect zombies adopted as subreaper, leaving the task leaders (``exclude``) to their Popen."""
    with SPAWN_LOCK:
        for pid in _all_pids():
            if pid in exclude:
                continue
            stat = _proc_stat(pid)
            if stat is None or stat[0] != "Z":
                continue
            with contextlib.suppress(ChildProcessError):
                os.waitpid(pid, os.WNOHANG)


def _is_our_agent(pid: int, task_dir: str, run_id: Optional[str]) -> bool:
    """A pid file may point to a reused pid: trust it only if the process looks like our agent."""
    if not pid_alive(pid):
        return False
    args = _cmdline(pid)
    want = os.path.realpath(task_dir)
    try:
        cwd = os.readlink("/proc/%d/cwd" % pid)
    except OSError:
        cwd = ""
    if any("agent" in a for a in args):
        for arg in args:
            if os.path.realpath(os.path.join(cwd, arg)) == want:
                return True
    return run_id is not None and _environ_has(pid, "DISTLAUNCH_RUN_ID", run_id)


def _is_our_group(pgid: int, run_id: Optional[str]) -> bool:
    members = _group_members(pgid)
    if not members:
        return False
    if run_id is None or not os.path.isdir("/proc/self"):
        return True
    return any(_environ_has(pid, "DISTLAUNCH_RUN_ID", run_id) for pid in members)
