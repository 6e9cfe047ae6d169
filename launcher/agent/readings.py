"""Raw readings the agent's samplers build on: /proc (a process, the process table, the whole
host) and ``nvidia-smi``'s CSV. Each returns None or an empty result where the source is missing.

Stdlib-only at import and Python >= 3.9: packed into the agent zipapp that runs on hosts.
"""

from __future__ import annotations

import os
import time
from typing import Any, Dict, List, Optional, Tuple

# (pid, start time) names one process even when a pid is reused.
ProcKey = Tuple[int, float]
# per process: (cpu seconds, rss bytes or None)
TreeReading = Dict[ProcKey, Tuple[float, Optional[int]]]

_MIB = 1024 * 1024


#: where the machine's network counters are read; an agent in a private network namespace reads
#: those of the machine's own (pid 1's) instead of its namespace's loopback (launcher/agent/netns.py)
NET_STATS = ["/proc/net/dev"]


class HostReader:
    """The whole machine's CPU (percent of all its cores), memory, network bytes in and out and disk
    bytes written per second, from /proc; None elsewhere.

    Each task's agent reads it with its own sample, so the hosts view has the host's load, not only
    its tasks' share of it. CPU is the busy share of all jiffies since the previous reading."""

    def __init__(self) -> None:
        self._prev: Optional[Tuple[int, int]] = self._cpu_times()
        self.cpus = os.cpu_count() or 1
        #: (time, received, sent, written) at the previous reading: the rates are over the interval
        self._io: Optional[Tuple[float, int, int, int]] = self._io_totals()

    @staticmethod
    def _net_totals() -> Optional[Tuple[int, int]]:
        """Bytes received and sent since boot on every interface but loopback (/proc/net/dev)."""
        received = sent = 0
        try:
            with open(NET_STATS[0], encoding="ascii") as f:
                for line in f.readlines()[2:]:
                    name, _, rest = line.partition(":")
                    fields = rest.split()
                    if name.strip() == "lo" or len(fields) < 9:
                        continue
                    received += int(fields[0])
                    sent += int(fields[8])
        except (OSError, ValueError):
            return None
        return received, sent

    @staticmethod
    def _disk_written() -> Optional[int]:
        """Bytes written since boot to the machine's whole disks (/proc/diskstats, the devices of
        /sys/block but loop, ram and zram ones; sectors are 512 bytes there whatever the disk)."""
        try:
            disks = {d for d in os.listdir("/sys/block") if not d.startswith(("loop", "ram", "zram"))}
            total = 0
            with open("/proc/diskstats", encoding="ascii") as f:
                for line in f:
                    fields = line.split()
                    if len(fields) > 9 and fields[2] in disks:
                        total += int(fields[9]) * 512
        except (OSError, ValueError):
            return None
        return total

    def _io_totals(self) -> Optional[Tuple[float, int, int, int]]:
        net = self._net_totals()
        written = self._disk_written()
        if net is None and written is None:
            return None
        received, sent = net if net is not None else (-1, -1)
        return time.monotonic(), received, sent, written if written is not None else -1

    def _io_rates(self) -> Dict[str, Optional[float]]:
        """Network bytes in and out and disk bytes written per second since the previous reading."""
        now = self._io_totals()
        prev, self._io = self._io, now
        out: Dict[str, Optional[float]] = {"net_rx_bytes_per_s": None, "net_tx_bytes_per_s": None,
                                           "disk_write_bytes_per_s": None}
        if now is None or prev is None or now[0] - prev[0] <= 0:
            return out
        elapsed = now[0] - prev[0]
        for key, i in (("net_rx_bytes_per_s", 1), ("net_tx_bytes_per_s", 2), ("disk_write_bytes_per_s", 3)):
            if now[i] >= 0 and prev[i] >= 0 and now[i] >= prev[i]:
                out[key] = round((now[i] - prev[i]) / elapsed, 1)
        return out

    @staticmethod
    def _cpu_times() -> Optional[Tuple[int, int]]:
        """(busy, total) jiffies of all cores since boot."""
        try:
            with open("/proc/stat", encoding="ascii") as f:
                fields = [int(x) for x in f.readline().split()[1:]]
        except (OSError, ValueError):
            return None
        idle = fields[3] + (fields[4] if len(fields) > 4 else 0)  # idle + iowait
        total = sum(fields[:8])  # guest time is already counted in user
        return total - idle, total

    @staticmethod
    def _memory() -> Tuple[Optional[int], Optional[int]]:
        """(used, total) bytes: total minus what the kernel says is available."""
        values: Dict[str, int] = {}
        try:
            with open("/proc/meminfo", encoding="ascii") as f:
                for line in f:
                    name, _, rest = line.partition(":")
                    if name in ("MemTotal", "MemAvailable"):
                        values[name] = int(rest.split()[0]) * 1024
        except (OSError, ValueError, IndexError):
            return None, None
        total = values.get("MemTotal")
        available = values.get("MemAvailable")
        return (total - available if total is not None and available is not None else None), total

    def read(self) -> Dict[str, Any]:
        cpu_percent: Optional[float] = None
        now = self._cpu_times()
        if now is not None and self._prev is not None and now[1] > self._prev[1]:
            cpu_percent = round(100.0 * (now[0] - self._prev[0]) / (now[1] - self._prev[1]), 1)
        self._prev = now
        used, total = self._memory()
        reading: Dict[str, Any] = {"cpu_percent": cpu_percent, "cpus": self.cpus, "mem_used_bytes": used,
                                   "mem_total_bytes": total}
        reading.update(self._io_rates())
        return reading


def parse_nvidia_smi(text: str) -> Dict[int, Dict[str, Any]]:
    """Parse ``index, util %, used MiB, total MiB`` CSV lines; "[N/A]"-style values become None."""
    out: Dict[int, Dict[str, Any]] = {}
    for line in text.splitlines():
        fields = [f.strip() for f in line.split(",")]
        if len(fields) < 4:
            continue
        index = _number(fields[0])
        if index is None:
            continue
        util, used, total = (_number(f) for f in fields[1:4])
        out[int(index)] = {
            "index": int(index),
            "util_percent": util,
            "mem_used_bytes": int(used * _MIB) if used is not None else None,
            "mem_total_bytes": int(total * _MIB) if total is not None else None,
            "proc_mem_bytes": None,
            "proc_util_percent": None,
        }
    return out


def _number(text: str) -> Optional[float]:
    try:
        return float(text)
    except ValueError:
        return None


def empty_gpu(index: int) -> Dict[str, Any]:
    return {"index": index, "util_percent": None, "mem_used_bytes": None, "mem_total_bytes": None,
            "proc_mem_bytes": None, "proc_util_percent": None}


def read_proc_stat(pid: int, states: Optional[Dict[int, str]] = None) -> Optional[Tuple[int, int, float]]:
    """``(ppid, utime+stime ticks, start time ticks)`` from ``/proc/<pid>/stat``, or None if gone;
    ``states`` (if given) gets the process's state letter (R, S, D, T, t, Z ...)."""
    try:
        with open("/proc/%d/stat" % pid, "rb") as f:
            data = f.read().decode("ascii", "replace")
    except OSError:
        return None
    # the command name (field 2) may contain spaces and parentheses: fields start after the last ')'
    fields = data[data.rfind(")") + 2:].split()
    try:
        stat = int(fields[1]), int(fields[11]) + int(fields[12]), float(fields[19])
    except (IndexError, ValueError):
        return None
    if states is not None:
        states[pid] = fields[0]
    return stat


def proc_children(pid: int) -> List[int]:
    """Children of every thread of ``pid``, from ``/proc/<pid>/task/*/children``."""
    out: List[int] = []
    try:
        tids = os.listdir("/proc/%d/task" % pid)
    except OSError:
        return out
    for tid in tids:
        try:
            with open("/proc/%d/task/%s/children" % (pid, tid)) as f:
                out.extend(int(c) for c in f.read().split())
        except (OSError, ValueError):
            continue
    return out


def scan_parents() -> Dict[int, List[int]]:
    """``{ppid: [pid, ...]}`` for every process, for kernels without the ``children`` files."""
    parents: Dict[int, List[int]] = {}
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        stat = read_proc_stat(int(name))
        if stat is not None:
            parents.setdefault(stat[0], []).append(int(name))
    return parents


def scan_stats(states: Optional[Dict[int, str]] = None) -> Dict[int, Tuple[int, int, float]]:
    """``{pid: (ppid, cpu ticks, start time)}`` for every process, in one walk of /proc; ``states``
    (if given) gets each one's state letter, from the same read."""
    out: Dict[int, Tuple[int, int, float]] = {}
    try:
        names = os.listdir("/proc")
    except OSError:
        return out
    for name in names:
        if name.isdigit():
            stat = read_proc_stat(int(name), states)
            if stat is not None:
                out[int(name)] = stat
    return out

