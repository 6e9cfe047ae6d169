"""Hung and slow tasks, judged from the metric events the supervisor already sees.

- stalled: a task's step has not advanced for its ``stall_seconds`` while it runs. Armed by
  the first step an incarnation reports (a task that reports no step cannot be judged: a
  parameter server, a script with autolog off and no ``[metrics]``); cleared when it advances.
- straggler: a worker whose steps/s (`launcher.telemetry.steprate`, over a window ending now: a hung
  worker is at 0) stays below ``straggler_ratio`` of the workers' median for ``straggler_seconds``
  (the profile's, default ``STRAGGLER_WINDOW_S``); cleared once it is back at or above that line.
  Judged only while at least two workers report steps (under a ClusterCoordinator only the chief
  does).

Pure logic on the caller's clock: the supervisor feeds it and publishes what ``check`` returns
as ``condition`` events.
"""

from __future__ import annotations

import statistics
from dataclasses import dataclass, field

from launcher import events as ev
from launcher.telemetry.steprate import StepRate

STRAGGLER_WINDOW_S = 30.0


@dataclass(frozen=True)
class ConditionChange:
    task: str
    condition: str  # ev.STALLED / ev.STRAGGLER
    active: bool
    reason: str = ""


@dataclass
class _Progress:
    step: int | None = None
    advanced_at: float = 0.0
    step_rate: StepRate = field(default_factory=StepRate)
    below_since: float | None = None
    active: set[str] = field(default_factory=set)
    reasons: dict[str, str] = field(default_factory=dict)  # why each active condition was raised


class Watchdog:
    def __init__(self, stall_seconds: dict[str, float], workers: list[str], straggler_ratio: float,
                 straggler_seconds: float = STRAGGLER_WINDOW_S) -> None:
        self.stall_seconds = stall_seconds  # task -> seconds; 0 = off
        self.workers = workers
        self.straggler_ratio = straggler_ratio
        self.straggler_seconds = straggler_seconds
        self._tasks: dict[str, _Progress] = {}

    def on_step(self, task: str, step: int, now: float) -> None:
        progress = self._tasks.get(task)
        if progress is None:
            progress = self._tasks[task] = _Progress()
        if progress.step is None or step != progress.step:
            progress.step = step
            progress.advanced_at = now
        progress.step_rate.add(now, step)

    def forget(self, task: str) -> None:
        """The task's incarnation ended (restart, stop, exit): what it had goes with it."""
        self._tasks.pop(task, None)

    def rate(self, task: str, now: float) -> float | None:
        progress = self._tasks.get(task)
        return None if progress is None else progress.step_rate.rate(now)

    def active_reason(self, task: str, condition: str) -> str | None:
        """Why ``condition`` was raised for ``task``, while it still is; else None."""
        progress = self._tasks.get(task)
        if progress is None or condition not in progress.active:
            return None
        return progress.reasons.get(condition, "")

    def check(self, now: float) -> list[ConditionChange]:
        changes = self._check_stalls(now)
        changes += self._check_stragglers(now)
        return changes

    def _check_stalls(self, now: float) -> list[ConditionChange]:
        changes = []
        for task, progress in self._tasks.items():
            limit = self.stall_seconds.get(task, 0.0)
            if not limit or progress.step is None:
                continue
            idle = now - progress.advanced_at
            stalled = idle >= limit
            if stalled and ev.STALLED not in progress.active:
                progress.active.add(ev.STALLED)
                reason = progress.reasons[ev.STALLED] = (f"step {progress.step} has not advanced for {idle:.0f}s "
                                                         f"(stall_seconds = {limit:g})")
                changes.append(ConditionChange(task, ev.STALLED, True, reason))
            elif not stalled and ev.STALLED in progress.active:
                progress.active.discard(ev.STALLED)
                changes.append(ConditionChange(task, ev.STALLED, False, f"step advanced to {progress.step}"))
        return changes

    def _check_stragglers(self, now: float) -> list[ConditionChange]:
        if self.straggler_ratio <= 0:
            return []
        rates = {t: r for t in self.workers if (r := self.rate(t, now)) is not None}
        if len(rates) < 2:
            return []
        median = statistics.median(rates.values())
        if median <= 0:
            return []
        line = self.straggler_ratio * median
        changes = []
        for task, rate in rates.items():
            progress = self._tasks[task]
            if rate < line:
                if progress.below_since is None:
                    progress.below_since = now
                slow_for = now - progress.below_since
                if slow_for >= self.straggler_seconds and ev.STRAGGLER not in progress.active:
                    progress.active.add(ev.STRAGGLER)
                    changes.append(ConditionChange(
                        task, ev.STRAGGLER, True,
                        f"{rate:.2f} steps/s for {slow_for:.0f}s, below {self.straggler_ratio:g} x the "
                        f"workers' median {median:.2f} steps/s"))
            else:
                progress.below_since = None
                if ev.STRAGGLER in progress.active:
                    progress.active.discard(ev.STRAGGLER)
                    changes.append(ConditionChange(task, ev.STRAGGLER, False,
                                                   f"caught up: {rate:.2f} steps/s (median {median:.2f})"))
        return changes
