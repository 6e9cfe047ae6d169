"""When each phase of a launch ended, per host: where `up`'s seconds go.

``up`` makes one ``LaunchClock`` before it forks the supervisor, which inherits it. Each stamp is
this machine's monotonic clock, taken where the launcher already waits for the phase's answer: a
dict write per host and phase, no thread, no I/O. The supervisor keeps the record as
``state.json``'s ``launch`` (``LaunchClock.to_json``), written with the job's first ``Running``;
``benchmarks/launch_fanout.py`` reads it. Its fields, all seconds from the ``up`` process's start:

- ``imports``: `up`'s own imports done (the profile not read yet); ``forked``: the supervisor runs;
  ``checked``: every host's preflight answered and judged (the reach check, with several hosts,
  included); ``supervisor``: the supervisor made and serving its clients, its first start request
  next;
- per host (``hosts.<name>``): ``connected`` (SSH up, home known), ``agent`` (the zipapp sent, or
  found in the host's cache: ``agent_from.<name>`` says ``sent`` or ``cached``), ``preflight`` (its
  answer read), ``start_sent`` (the first start request sent: on the launch channel it forks the
  host agent), ``spawned`` (the agent answered with the pids), ``first_running`` (the first
  ``running`` state of a task there arrived; it may come before ``spawned``: the agent's events and
  its answer travel apart).

The process start comes from ``/proc/self/stat`` (10 ms resolution); where that cannot be read,
the clock counts from its own making, and ``process_start`` says ``"clock"``.
"""

from __future__ import annotations

import os
import threading
import time
from dataclasses import dataclass, field
from typing import Any

#: the per-host phases, in the order a launch passes them
HOST_PHASES = ("connected", "agent", "preflight", "start_sent", "spawned", "first_running")


def _process_start() -> float | None:
    """This process's start on the monotonic clock, or None where /proc cannot tell it."""
    try:
        with open("/proc/self/stat", "rb") as fh:
            fields = fh.read().rsplit(b")", 1)[1].split()
        ticks = int(fields[19])  # field 22, starttime: clock ticks after boot
        age = time.clock_gettime(time.CLOCK_BOOTTIME) - ticks / os.sysconf("SC_CLK_TCK")
    except (OSError, ValueError, IndexError, AttributeError):
        return None
    return time.monotonic() - age if 0 <= age < 3600 else None


@dataclass
class LaunchClock:
    """The stamps of one launch (see the module's docstring)."""

    started: float
    process_start: str = "proc"
    marks: dict[str, float] = field(default_factory=dict)
    hosts: dict[str, dict[str, float]] = field(default_factory=dict)
    agent_from: dict[str, str] = field(default_factory=dict)
    #: stamps come from the hosts' worker threads while the loop writes the record
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False, compare=False)

    @classmethod
    def begin(cls) -> LaunchClock:
        """A clock counting from this process's start, its ``imports`` stamped now."""
        start = _process_start()
        clock = cls(started=start if start is not None else time.monotonic(),
                    process_start="proc" if start is not None else "clock")
        clock.mark("imports")
        return clock

    def mark(self, phase: str) -> None:
        """A phase of the launch as a whole (``imports``, ``forked``), the first time only."""
        self.marks.setdefault(phase, time.monotonic())

    def stamp(self, host: str, phase: str) -> None:
        """``host`` finished ``phase`` (one of HOST_PHASES), the first time only: a restart later
        in the job stamps nothing. A host first seen after its connection (a spare that takes a
        task hours later) is no part of the launch: only ``connected`` puts a host on the clock."""
        now = time.monotonic()
        with self._lock:
            stamps = self.hosts.get(host)
            if stamps is None:
                if phase != HOST_PHASES[0]:
                    return
                stamps = self.hosts[host] = {}
            stamps.setdefault(phase, now)

    def to_json(self) -> dict[str, Any]:
        def rel(t: float) -> float:
            return round(t - self.started, 4)

        with self._lock:
            hosts = {h: dict(stamps) for h, stamps in self.hosts.items()}

        return {
            "process_start": self.process_start,
            "wall_start": round(time.time() - (time.monotonic() - self.started), 4),
            **{name: rel(t) for name, t in self.marks.items()},
            "hosts": {h: {p: rel(t) for p, t in sorted(stamps.items(), key=lambda kv: kv[1])}
                      for h, stamps in sorted(hosts.items())},
            "agent_from": dict(sorted(self.agent_from.items())),
        }
