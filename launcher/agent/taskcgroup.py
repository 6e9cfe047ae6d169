"""A task's own cgroup (v2) and what ``sweep`` finds beside DISTLAUNCH_RUN_ID (README: nothing left behind).

The host agent makes ``distlaunch-<run id>-<slug>`` under its own cgroup where it may divide it; the
task's wrapper joins it before anything runs (spec.py). ``task.json`` records it with the task's
session. ``escaped`` finds processes in those sessions (``env -i`` and a group of their own) and
cgroups (``env -i setsid`` too); never this process or its ancestors. Stdlib-only, Python >= 3.9.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
from typing import Dict, List, Optional, Set

from launcher.agent.procs import _all_pids, _wait_until, stat_fields

PREFIX = "distlaunch-"  # every cgroup the agent makes; sweep touches no other


#: where cgroup v2 is mounted, read once per process (a host agent makes a cgroup per task: reading
#: the mount table each time cost a 64-task start ~15 ms); a list, filled by the first reader
_MOUNT: List[Optional[str]] = []


def _v2_mount() -> Optional[str]:
    if not _MOUNT:
        _MOUNT.append(_read_v2_mount())
    return _MOUNT[0]


def _read_v2_mount() -> Optional[str]:
    with contextlib.suppress(OSError), open("/proc/self/mountinfo", encoding="utf-8", errors="replace") as f:
        for line in f:
            before, _, after = line.partition(" - ")
            if after.startswith("cgroup2 "):
                return before.split(" ")[4]
    return None


def _own() -> Optional[str]:
    with contextlib.suppress(OSError), open("/proc/self/cgroup", encoding="utf-8", errors="replace") as f:
        for line in f:
            if line.startswith("0::/") and not line.rstrip().endswith(" (deleted)"):
                return line[4:].strip()
    return None


def make(run_id: str, slug: str) -> Optional[str]:
    """The task's cgroup directory (made if missing); None without cgroup v2 or where the agent's
    own is not the user's to divide (moving a process needs the common parent writable)."""
    mount, own = _v2_mount(), _own()
    if mount is None or own is None or not os.access(os.path.join(mount, own, "cgroup.procs"), os.W_OK):
        return None
    path = os.path.join(mount, own, PREFIX + re.sub(r"[^A-Za-z0-9_.-]", "-", "%s-%s" % (run_id, slug)))
    try:
        os.mkdir(path, 0o755)
    except FileExistsError:
        pass
    except OSError:
        return None
    if os.access(os.path.join(path, "cgroup.procs"), os.W_OK):
        return path
    remove(path)
    return None


def members(path: str) -> List[int]:
    if not os.path.basename(path).startswith(PREFIX):
        return []
    with contextlib.suppress(OSError), open(os.path.join(path, "cgroup.procs"), encoding="ascii") as f:
        return [int(line) for line in f if line.strip().isdigit()]
    return []


def remove(path: str) -> None:
    """Remove a task's cgroup once empty (the kernel refuses while a process is in it)."""
    if os.path.basename(path).startswith(PREFIX):
        with contextlib.suppress(OSError):
            os.rmdir(path)


def _tasks(run_dir: str) -> List[Dict[str, object]]:
    out = []
    with contextlib.suppress(OSError):
        for slug in sorted(os.listdir(os.path.join(run_dir, "tasks"))):
            with contextlib.suppress(OSError, ValueError), \
                    open(os.path.join(run_dir, "tasks", slug, "task.json"), encoding="utf-8") as f:
                info = json.load(f)
                if isinstance(info, dict):
                    out.append(info)
    return out


def _number(value: object) -> Optional[int]:
    return value if type(value) is int and value > 0 else None


def escaped(run_dir: str) -> List[int]:
    """Processes in a task's own cgroup or session (whatever their environment says)."""
    found: Set[int] = set()
    sessions: Dict[int, int] = {}  # session id -> the task's start (clock ticks since boot)
    for info in _tasks(run_dir):
        if isinstance(info.get("cgroup"), str):
            found.update(members(str(info["cgroup"])))
        sid, started = _number(info.get("sid")), _number(info.get("started"))
        leader = stat_fields(sid) if sid else []
        if sid and started and (not leader or leader[19:20] == [str(started)]):  # else the pid was used again
            sessions[sid] = started
    for pid in _all_pids() if sessions else ():
        fields = stat_fields(pid)
        if len(fields) > 19 and fields[3].isdigit() and fields[19].isdigit() \
                and int(fields[19]) >= sessions.get(int(fields[3]), 1 << 62):
            found.add(pid)
    pid = os.getpid()
    while pid > 1:  # never this process, nor what runs it
        found.discard(pid)
        fields = stat_fields(pid)
        pid = int(fields[1]) if len(fields) > 1 and fields[1].isdigit() and int(fields[1]) != pid else 0
    return sorted(found)


def other_run(pid: int, run_id: str) -> bool:
    """Does ``pid``'s environment name another run than ``run_id``?"""
    with contextlib.suppress(OSError), open("/proc/%d/environ" % pid, "rb") as f:
        return any(e.startswith(b"DISTLAUNCH_RUN_ID=") and e != b"DISTLAUNCH_RUN_ID=" + run_id.encode()
                   for e in f.read().split(b"\0"))
    return False


def remove_all(run_dir: str, timeout: float = 2.0) -> None:
    """The tasks' cgroups, once empty (a process just killed leaves its cgroup as it exits)."""
    for info in _tasks(run_dir):
        path = info.get("cgroup")
        if isinstance(path, str) and os.path.isdir(path):
            def empty(cgroup: str = path) -> bool:
                return not members(cgroup)

            _wait_until(empty, timeout)
            remove(path)
