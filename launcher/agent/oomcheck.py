"""The host's evidence that the kernel's OOM killer ended a task (the agent reads it at a SIGKILL).

Three sources, each where it is readable: the ``oom_kill`` counter of every memory cgroup a
process of the task was seen in (cgroup v2 ``memory.events``, which counts the whole subtree; cgroup
v1 ``memory.oom_control``), compared with its value when first seen; and the kernel log
(``/dev/kmsg``): an OOM kill after the task started, of a pid seen in its process tree. The paths are
parameters, so tests hand in a directory of their own.

Stdlib-only, Python >= 3.9 (runs on hosts from the agent zipapp).
"""

from __future__ import annotations

import errno
import os
import re
import time
from typing import Dict, Iterable, List, Optional, Set

#: kernel log lines naming the process the OOM killer ended
_KMSG_KILLED = re.compile(r"(?:Killed process (\d+)\b|oom-kill:.*\bpid=(\d+))")
#: records read from /dev/kmsg at most (its ring buffer holds a few thousand)
_KMSG_MAX_RECORDS = 100000
#: pids remembered per task (a long job's short-lived helpers must not grow it without end)
_MAX_PIDS = 256


def oom_kill_count(text: str) -> Optional[int]:
    """The ``oom_kill`` counter of a ``memory.events`` (v2) or ``memory.oom_control`` (v1) file."""
    for line in text.splitlines():
        key, _, value = line.partition(" ")
        if key == "oom_kill" and value.strip().isdigit():
            return int(value.strip())
    return None


def memory_counter_files(cgroup_text: str, cgroup_root: str) -> List[str]:
    """The files holding the OOM-kill counter of the memory cgroups a ``/proc/PID/cgroup`` names."""
    out: List[str] = []
    for line in cgroup_text.splitlines():
        parts = line.split(":", 2)
        if len(parts) != 3:
            continue
        _, controllers, path = parts
        rel = path.lstrip("/")
        if controllers == "":  # cgroup v2 (unified; under unified/ on a hybrid host)
            # a task's own cgroup (taskcgroup.py) may lack the memory controller: its parent counts it too
            rels = [rel, os.path.dirname(rel)] if os.path.basename(rel).startswith("distlaunch-") else [rel]
            for base in (cgroup_root, os.path.join(cgroup_root, "unified")):
                out.extend(os.path.join(base, r, "memory.events") for r in rels)
        elif "memory" in controllers.split(","):
            out.append(os.path.join(cgroup_root, "memory", rel, "memory.oom_control"))
    return out


def kmsg_oom_pids(records: Iterable[str], since_usec: int) -> Set[int]:
    """Pids the kernel log says the OOM killer ended at or after ``since_usec`` (its clock)."""
    out: Set[int] = set()
    for record in records:
        head, sep, message = record.partition(";")
        fields = head.split(",")
        if not sep or len(fields) < 3 or not fields[2].isdigit() or int(fields[2]) < since_usec:
            continue
        match = _KMSG_KILLED.search(message)
        if match:
            out.add(int(match.group(1) or match.group(2)))
    return out


def read_kmsg(path: str) -> List[str]:
    """Every record the kernel log still holds (empty where it cannot be read)."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK)
    except OSError:
        return []
    records: List[str] = []
    try:
        pending = ""
        while len(records) < _KMSG_MAX_RECORDS:
            try:
                chunk = os.read(fd, 8192)
            except OSError as exc:
                if exc.errno == errno.EPIPE:  # a record was overwritten while read: go on
                    continue
                break  # EAGAIN: the end; EINVAL and others: unreadable
            if not chunk:
                break
            pending += chunk.decode("utf-8", errors="replace")
            *done, pending = pending.split("\n")
            records.extend(r for r in done if r and not r.startswith(" "))  # " KEY=value": continuations
        if pending:
            records.append(pending)
    finally:
        os.close(fd)
    return records


def _read(path: str) -> Optional[str]:
    try:
        with open(path, encoding="utf-8", errors="replace") as f:
            return f.read()
    except OSError:
        return None


class OomWatch:
    """What one task's incarnation left as OOM-killer evidence, and its peak RSS."""

    def __init__(self, proc_root: str = "/proc", cgroup_root: str = "/sys/fs/cgroup",
                 kmsg: str = "/dev/kmsg") -> None:
        self.proc_root = proc_root
        self.cgroup_root = cgroup_root
        self.kmsg = kmsg
        self.since_usec = int(time.monotonic() * 1e6)  # the kernel log's clock
        self.counters: Dict[str, int] = {}  # counter file -> its value when first seen
        self.pids: Set[int] = set()
        self.peak_rss: Optional[int] = None

    def see(self, pids: Iterable[int], rss_bytes: Optional[int] = None) -> None:
        """Processes of the task seen alive (with their summed RSS): their cgroups' counters are
        remembered as they are now."""
        if rss_bytes is not None:
            self.peak_rss = max(self.peak_rss or 0, rss_bytes)
        for pid in pids:
            if pid in self.pids or len(self.pids) >= _MAX_PIDS:
                continue
            self.pids.add(pid)
            text = _read(os.path.join(self.proc_root, str(pid), "cgroup"))
            for path in memory_counter_files(text or "", self.cgroup_root):
                if path not in self.counters:
                    count = oom_kill_count(_read(path) or "")
                    if count is not None:
                        self.counters[path] = count

    def oom_killed(self) -> bool:
        """Did the kernel's OOM killer act in the task's cgroup, or on one of its processes, since?"""
        for path, before in self.counters.items():
            now = oom_kill_count(_read(path) or "")
            if now is not None and now > before:
                return True
        return bool(self.pids & kmsg_oom_pids(read_kmsg(self.kmsg), self.since_usec))
