"""Steps per second over a window that ends now: the one notion of a task's pace.

The dashboard (table, sparkline label, header), the ``--no-tui`` progress line, ``status --json``
and the straggler check all ask a `StepRate` for ``rate(now)``, each with its own clock: event
time against the wall clock for the job view, receive time against the monotonic clock for the
watchdog. ``now`` comes from a clock that advances without events (the dashboard's refresh timer,
the printer's interval, the moment ``status`` runs), so a task whose step stopped moving drops to
0 within the window instead of keeping the pace it had when its last step arrived.

The window's end is ``now`` less at most one reporting gap (the mean spacing of the recent
reports): a task that reports once a second is not called slower between two reports. No step
advanced in the window gives 0.0; fewer than two reports in the incarnation give None (no pace
known yet). A step lower than the last one (a restart from an older checkpoint) starts over.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field

RATE_WINDOW_S = 10.0
"""Steps/s is the step advance over this many seconds before now."""

POINT_SPACING_S = 0.25
"""Reports closer together than this share one point (the rate needs the window's ends, not every step)."""


@dataclass
class StepRate:
    window: float = RATE_WINDOW_S
    #: (time, step), oldest first: one point at or before the window's start, then the ones in it
    points: deque[tuple[float, int]] = field(default_factory=deque)

    def add(self, ts: float, step: int) -> None:
        points = self.points
        if points and step < points[-1][1]:
            points.clear()  # back from an older checkpoint: the old slope means nothing
        if len(points) > 1 and ts - points[-2][0] < POINT_SPACING_S:
            points[-1] = (ts, step)
        else:
            points.append((ts, step))
        while len(points) > 2 and points[1][0] <= ts - self.window:
            points.popleft()

    def clear(self) -> None:
        self.points.clear()

    def rate(self, now: float) -> float | None:
        """Steps/s over the window ending at `now`: 0.0 when the step did not advance in it."""
        points = self.points
        if len(points) < 2:
            return None
        start = now - self.window
        base = 0
        while base + 1 < len(points) and points[base + 1][0] <= start:
            base += 1
        base_ts, base_step = points[base]
        last_ts, last_step = points[-1]
        if base == len(points) - 1 or last_step == base_step:
            return 0.0
        gap = min((last_ts - base_ts) / (len(points) - 1 - base), self.window)
        end = max(last_ts, now - gap)
        return (last_step - base_step) / (end - base_ts) if end > base_ts else None
