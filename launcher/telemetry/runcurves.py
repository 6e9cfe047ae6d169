"""A run's training curves read back from its events.jsonl: loss against the step and steps/s against
the step, of the task that reports the job's step (the chief; without one, the first worker). What
the runs screen's compare view (``tui/runs_compare.py``) overlays for several runs: against the step,
runs that went at different paces or started at different times line up.

Bounded in memory and time, however long the run: only lines that name a ``metric`` are decoded
(logs and samples, the bulk of a file, are skipped by a byte test); each curve keeps at most
``MAX_POINTS`` points spread over the whole run (``SpreadPoints``), and one task's curves are kept,
not every worker's. Reading resumes where it stopped (``RunCurves.read_more``), at most
``READ_BYTES`` a call, so a live run's curves follow it at the cost of its new lines and a caller
can show a long file's curves while the rest is read. Steps/s is ``StepRate``'s, as the dashboard
computes it: the step advance over the window ending at each report.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from launcher import events as ev
from launcher.privatedir import open_trusted
from launcher.rundir import EVENTS_FILE
from launcher.telemetry.eventcheck import decode_checked
from launcher.telemetry.placementview import task_sort_key
from launcher.telemetry.steprate import StepRate

MAX_POINTS = 400
"""Points kept per curve: a chart is ~100 cells wide; enough to show a curve's shape over a long run."""

READ_BYTES = 32 * 1024 * 1024
"""Bytes of events.jsonl one ``read_more`` reads at most."""

TRAINER_ROLES = ("chief", "worker")


class SpreadPoints:
    """At most ``limit`` (x, y) points spread over a whole series, in O(limit) memory: every
    ``stride``-th point offered is kept; past ``limit``, every other kept point goes and the stride
    doubles. The latest point offered is always part of ``points``, so a curve ends where the run is."""

    def __init__(self, limit: int = MAX_POINTS) -> None:
        self.limit = max(2, limit)
        self.stride = 1
        self._kept: list[tuple[float, float]] = []
        self._offered = 0
        self._last: tuple[float, float] | None = None

    def add(self, x: float, y: float) -> None:
        if self._offered % self.stride == 0:
            self._kept.append((x, y))
            if len(self._kept) > self.limit:
                self._kept = self._kept[::2]
                self.stride *= 2
        self._offered += 1
        self._last = (x, y)

    def drop_from(self, x: float) -> None:
        """Forget the points at ``x`` and beyond: a restart from an older checkpoint redoes those steps,
        and a step told twice is one point (the curve stays a function of the step)."""
        while self._kept and self._kept[-1][0] >= x:
            self._kept.pop()
        if self._last is not None and self._last[0] >= x:
            self._last = self._kept[-1] if self._kept else None

    @property
    def points(self) -> list[tuple[float, float]]:
        last = self._last
        if last is None or (self._kept and self._kept[-1] == last):
            return list(self._kept)
        return [*self._kept, last]

    def __len__(self) -> int:
        return len(self.points)


@dataclass
class TaskCurves:
    """One task's loss and steps/s against its step."""

    task_id: str
    loss: SpreadPoints = field(default_factory=SpreadPoints)
    rate: SpreadPoints = field(default_factory=SpreadPoints)
    step_rate: StepRate = field(default_factory=StepRate)
    step: int | None = None
    first_step: int | None = None

    def add(self, event: ev.MetricEvent) -> None:
        step = event.step
        if step is not None:
            if self.step is not None and step < self.step:
                self.rate.drop_from(step)
            self.step = step
            self.first_step = step if self.first_step is None else min(self.first_step, step)
            self.step_rate.add(event.ts, step)
            rate = self.step_rate.rate(event.ts)
            if rate is not None:
                self.rate.drop_from(step)
                self.rate.add(step, rate)
        if event.loss is not None and self.step is not None:
            self.loss.drop_from(self.step)
            self.loss.add(self.step, event.loss)


@dataclass
class RunCurves:
    """The curves of one run dir, read incrementally from its events.jsonl (``read_more``)."""

    path: Path
    #: the task whose curves these are (None: no trainer reported a step yet)
    task: TaskCurves | None = None
    #: bytes of events.jsonl consumed: complete lines only, a torn last line waits for its end
    offset: int = 0
    #: metric lines that were no events (torn, not UTF-8, a field of the wrong type)
    skipped: int = 0
    #: the file was read to its end by the last ``read_more``
    at_end: bool = False

    def read_more(self, limit: int = READ_BYTES) -> int:
        """Reads at most ``limit`` bytes past ``offset``; the bytes consumed. UnsafePath when the
        file is not the user's alone or not a regular file (``open_trusted``); a missing file is no
        events yet."""
        try:
            fh = open_trusted(self.path / EVENTS_FILE, "the run's events")
        except FileNotFoundError:
            self.at_end = True
            return 0
        with fh:
            fh.seek(self.offset)
            chunk = fh.read(limit + 1)
        more = len(chunk) > limit
        chunk = chunk[:limit]
        end = chunk.rfind(b"\n") + 1
        if end == 0 and more:  # one line longer than a whole read: it holds no curve
            end = len(chunk)
        for raw in chunk[:end].split(b"\n"):
            if b'"metric"' in raw:
                self._take(raw)
        self.offset += end
        self.at_end = not more
        return end

    def read_all(self) -> None:
        """Reads to the end of the file as it is now."""
        while self.read_more() and not self.at_end:
            pass

    def _take(self, raw: bytes) -> None:
        try:
            event = decode_checked(raw.decode("utf-8"))
        except (UnicodeDecodeError, ev.EventDecodeError):
            self.skipped += 1
            return
        task_id = event.task
        if not isinstance(event, ev.MetricEvent) or task_id is None:
            return
        if task_id.partition(":")[0] not in TRAINER_ROLES:
            return
        current = self.task
        if current is None or current.task_id != task_id:
            if event.step is None:
                return
            if current is not None and task_sort_key(task_id) >= task_sort_key(current.task_id):
                return  # the chief (or a first worker) already reports the step
            current = self.task = TaskCurves(task_id)
        current.add(event)

    # -- what a chart and its legend read --------------------------------------------------

    @property
    def loss_points(self) -> list[tuple[float, float]]:
        return self.task.loss.points if self.task else []

    @property
    def rate_points(self) -> list[tuple[float, float]]:
        return self.task.rate.points if self.task else []

    @property
    def step_range(self) -> tuple[int, int] | None:
        """The first and the last step the reporting task told (None: none yet)."""
        task = self.task
        if task is None or task.step is None or task.first_step is None:
            return None
        return task.first_step, task.step
