"""How far a host's clock is off, so its events carry times the launcher can compare.

Agents stamp events with their host's clock. When that clock is minutes off, ages and
latencies computed on the launcher go negative or absurd. Each follower sends a ``Heartbeat``
(its host's time) every second, busy or not; its difference to the launcher's receive time is
the host's offset minus the line's delay, and the delay is only ever positive, so the largest
recent difference is the best estimate of the offset. Event times are never used for the
estimate: a backlog sent after a reconnect is seconds old by design, not a slow clock.
Offsets within ``TOLERANCE_S`` are left alone (NTP-synced hosts and ordinary delays); beyond it
the host's times are moved onto the launcher's clock. An event stamped in the future even after
that is given its receive time.
"""

from __future__ import annotations

from collections import deque

#: offsets smaller than this are normal (sync error, link delay, scheduling) and not corrected
TOLERANCE_S = 2.0
#: recent heartbeats kept for the estimate: about a minute
WINDOW = 60


class HostClock:
    """The offset of one host's clock from the launcher's, from the heartbeats it sent."""

    def __init__(self) -> None:
        self._diffs: deque[float] = deque(maxlen=WINDOW)
        self.offset = 0.0  # host clock minus launcher clock, seconds; 0 while within tolerance

    def observe(self, host_ts: float, received: float) -> None:
        self._diffs.append(host_ts - received)
        best = max(self._diffs)
        self.offset = best if abs(best) > TOLERANCE_S else 0.0

    def correct(self, host_ts: float, received: float) -> float:
        """``host_ts`` on the launcher's clock; never later than when it arrived."""
        ts = host_ts - self.offset
        return received if ts > received + TOLERANCE_S else ts

    def describe(self) -> str:
        ahead = "ahead of" if self.offset > 0 else "behind"
        return f"clock is {abs(self.offset):.0f} s {ahead} the launcher's"
