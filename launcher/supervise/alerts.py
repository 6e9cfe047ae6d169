"""Alerts: the conditions [notify] tells someone about before a job dies.

``AlertWatch`` reads a job's events (the clock is the events' own ``ts``: samples arrive every
interval, so time-based conditions are judged at least that often) and gives each change of an
alert once: ``Alert(active=True)`` when a condition starts, ``Alert(active=False)`` when it clears
(``moved`` and ``drained`` are one-shot: they have no clear). Nothing here runs a command; the
notifier (``notify.py``) does, rate-limited.

What each alert reads:

- ``stall``, ``straggler``, ``nan``: the watchdog's ``condition`` events (stalled, straggler, nan_loss);
- ``gpu_error``: the ``gpu_error`` condition (an Xid or uncorrectable ECC errors on a GPU the task
  holds, ``supervise/gpudrain.py``); it clears when the task restarts or ends;
- ``host_unreachable``, ``host_lost``, ``drained``: ``host`` events; a host ``up`` again clears;
- ``moved``: a task's first ``running`` state after a move (``moved_from``);
- ``throughput_drop``: the job's global step (the largest any task reports): its rate over the last
  ``window`` seconds against the median of its rates over the ten windows before, when that is
  below by ``percent``; the reference is held while the drop lasts; a step that goes back (a
  restart from a checkpoint) starts the history again;
- ``gpu_idle``: every GPU of a running task under ``IDLE_PERCENT`` for ``minutes``;
- ``disk_low``: a host's free bytes at ``outputs`` or the run dir (the agent's host sample) under
  the threshold; clears above 1.25 times it;
- ``checkpoint_old``: minutes since a running task's last ``checkpoint`` event (since it started
  running, before its first).
"""

from __future__ import annotations

import statistics
from collections import deque
from dataclasses import dataclass, field

from launcher import events as ev
from launcher.model import ALERT_NAMES, DEFAULT_ALERTS

STALL = "stall"
STRAGGLER = "straggler"
NAN = "nan"
HOST_UNREACHABLE = "host_unreachable"
HOST_LOST = "host_lost"
MOVED = "moved"
DRAINED = "drained"
THROUGHPUT_DROP = "throughput_drop"
GPU_IDLE = "gpu_idle"
GPU_ERROR = "gpu_error"
DISK_LOW = "disk_low"
CHECKPOINT_OLD = "checkpoint_old"
ALERTS = (STALL, STRAGGLER, NAN, HOST_UNREACHABLE, HOST_LOST, MOVED, DRAINED, THROUGHPUT_DROP, GPU_IDLE, GPU_ERROR,
          DISK_LOW, CHECKPOINT_OLD)
assert ALERTS == ALERT_NAMES and set(DEFAULT_ALERTS) <= set(ALERTS)
ONE_SHOT = (MOVED, DRAINED)
#: the watchdog's condition names -> the alert each one is
CONDITION_ALERTS = {ev.STALLED: STALL, ev.STRAGGLER: STRAGGLER, ev.NAN_LOSS: NAN, ev.GPU_ERROR: GPU_ERROR}
#: a GPU below this utilisation is idle
IDLE_PERCENT = 5.0
#: windows of history the throughput reference is the median of, and the fewest it needs
REFERENCE_WINDOWS = 10
MIN_REFERENCE_WINDOWS = 3
DISK_CLEAR_FACTOR = 1.25


@dataclass(frozen=True)
class Thresholds:
    throughput_drop_percent: float = 50.0
    throughput_window_seconds: float = 60.0
    gpu_idle_minutes: float = 10.0
    disk_low_bytes: float = 5 * 1024**3
    checkpoint_old_minutes: float = 60.0


@dataclass(frozen=True)
class Alert:
    """A change of one alert: ``subject`` is a task id, a host name, or ``job``."""

    name: str
    subject: str
    active: bool
    figure: str
    ts: float
    host: str = ""

    @property
    def one_shot(self) -> bool:
        return self.name in ONE_SHOT

    def line(self, run_id: str) -> str:
        """One line a person reads at 3 a.m.: what, where, the figure, the command to look."""
        verb = "" if self.one_shot else " started" if self.active else " cleared"
        return f"{run_id}: {self.name}{verb} on {self.subject}: {self.figure} (`distlaunch attach {run_id}`)"


@dataclass
class _Throughput:
    points: deque[tuple[float, int]] = field(default_factory=deque)
    last_step: int | None = None
    latest: dict[str, int] = field(default_factory=dict)  # each task's last step
    reference: float | None = None  # held while the drop is active


class AlertWatch:
    """Events in, alert changes out (``feed``); ``chosen`` are the alerts anyone wants."""

    def __init__(self, chosen: tuple[str, ...] | frozenset[str], thresholds: Thresholds | None = None) -> None:
        self.chosen = frozenset(chosen)
        self.t = thresholds or Thresholds()
        self.active: dict[tuple[str, str], bool] = {}
        self._host_of: dict[str, str] = {}
        self._running_since: dict[str, float] = {}
        self._last_checkpoint: dict[str, float] = {}
        self._idle_since: dict[str, float] = {}
        self._throughput = _Throughput()

    def feed(self, event: ev.Event) -> list[Alert]:
        out: list[Alert] = []
        if isinstance(event, ev.ConditionEvent) and event.task:
            name = CONDITION_ALERTS.get(event.condition)
            if name is not None:
                out += self._set(name, event.task, event.active, event.reason or event.condition, event.ts)
        elif isinstance(event, ev.HostEvent):
            out += self._host(event)
        elif isinstance(event, ev.StateEvent) and event.task:
            out += self._state(event)
        elif isinstance(event, ev.MetricEvent) and event.step is not None and event.task:
            out += self._step(event.task, event.step, event.ts)
        elif isinstance(event, ev.SampleEvent) and event.task:
            out += self._sample(event)
        elif isinstance(event, ev.CheckpointEvent) and event.task:
            self._last_checkpoint[event.task] = event.ts
            out += self._set(CHECKPOINT_OLD, event.task, False, f"checkpoint at step {event.step}", event.ts)
        return out

    # -- the sources ----------------------------------------------------------------------------

    def _host(self, event: ev.HostEvent) -> list[Alert]:
        host, state, ts = event.host, event.state, event.ts
        why = f" ({event.reason})" if event.reason else ""
        out: list[Alert] = []
        if state == ev.HOST_UNREACHABLE:
            out += self._set(HOST_UNREACHABLE, host, True, f"host {host} does not answer{why}", ts, host)
        elif state == ev.HOST_LOST:
            out += self._set(HOST_UNREACHABLE, host, False, f"host {host} was declared lost", ts, host)
            out += self._set(HOST_LOST, host, True, f"host {host} is lost{why}", ts, host)
        elif state == ev.HOST_DRAINED:
            out += self._set(DRAINED, host, True, f"host {host} was drained{why}", ts, host)
        elif state == ev.HOST_UP:
            out += self._set(HOST_UNREACHABLE, host, False, f"host {host} answers again", ts, host)
            out += self._set(HOST_LOST, host, False, f"host {host} is back", ts, host)
        return out

    def _state(self, event: ev.StateEvent) -> list[Alert]:
        task = str(event.task)
        if event.host:
            self._host_of[task] = event.host
        out: list[Alert] = []
        if event.state == ev.RUNNING:
            self._running_since.setdefault(task, event.ts)
            if event.moved_from:
                out += self._set(MOVED, task, True, f"{task} moved from {event.moved_from} to {event.host}",
                                 event.ts, event.host or "")
        elif event.state in ev.FINAL_TASK_STATES or event.state == ev.RESTARTING:
            self._running_since.pop(task, None)
            self._idle_since.pop(task, None)
            for name in (GPU_IDLE, GPU_ERROR, CHECKPOINT_OLD):
                out += self._set(name, task, False, f"{task} is {event.state}", event.ts)
        return out

    def _step(self, task: str, task_step: int, ts: float) -> list[Alert]:
        tp = self._throughput
        tp.latest[task] = task_step
        step = max(tp.latest.values())  # the job's global step: a task behind the others is no drop
        if tp.last_step is not None and step < tp.last_step:
            tp.points.clear()  # resumed from a checkpoint: rates before it say nothing now
            tp.reference = None
        elif tp.last_step is not None and step == tp.last_step:
            return []
        tp.last_step = step
        tp.points.append((ts, step))
        window = self.t.throughput_window_seconds
        while tp.points and tp.points[0][0] < ts - window * (REFERENCE_WINDOWS + 2):
            tp.points.popleft()
        if THROUGHPUT_DROP not in self.chosen:
            return []
        now_rate = self._rate(ts - window, ts)
        if now_rate is None:
            return []
        reference = tp.reference
        if reference is None:
            rates = [r for k in range(1, REFERENCE_WINDOWS + 1)
                     if (r := self._rate(ts - window * (k + 1), ts - window * k)) is not None]
            if len(rates) < MIN_REFERENCE_WINDOWS:
                return []
            reference = statistics.median(rates)
        if reference <= 0:
            return []
        drop = 100.0 * (1.0 - now_rate / reference)
        figure = f"{now_rate:.3g} steps/s, {drop:.0f}% below the run's recent {reference:.3g}"
        if drop >= self.t.throughput_drop_percent:
            tp.reference = reference
            return self._set(THROUGHPUT_DROP, "job", True, figure, ts)
        tp.reference = None
        return self._set(THROUGHPUT_DROP, "job", False, f"{now_rate:.3g} steps/s, back near {reference:.3g}", ts)

    def _rate(self, start: float, end: float) -> float | None:
        """Steps per second between ``start`` and ``end``, from the points on both sides."""
        points = self._throughput.points
        if not points or points[0][0] > start + 1e-9:
            return None
        before = [p for p in points if p[0] <= start]
        inside = [p for p in points if p[0] <= end]
        if not before or not inside:
            return None
        (t0, s0), (t1, s1) = before[-1], inside[-1]
        if t1 - t0 < (end - start) * 0.5:
            return None
        return (s1 - s0) / (t1 - t0)

    def _sample(self, event: ev.SampleEvent) -> list[Alert]:
        task, ts = str(event.task), event.ts
        out: list[Alert] = []
        gpus = [g for g in event.gpus if g.get("util_percent") is not None]
        if gpus and task in self._running_since:
            busiest = max(float(g["util_percent"]) for g in gpus)
            if busiest < IDLE_PERCENT:
                since = self._idle_since.setdefault(task, ts)
                if ts - since >= self.t.gpu_idle_minutes * 60:
                    out += self._set(GPU_IDLE, task, True, f"its GPUs at {busiest:.0f}% for "
                                     f"{(ts - since) / 60:.0f} min", ts, self._host_of.get(task, ""))
            else:
                self._idle_since.pop(task, None)
                out += self._set(GPU_IDLE, task, False, f"its GPUs at {busiest:.0f}% again", ts)
        host_info = event.host or {}
        host = self._host_of.get(task, "")
        free = [v for k in ("outputs_free_bytes", "run_dir_free_bytes")
                if isinstance(v := host_info.get(k), (int, float))]
        if free and host:
            least = min(free)
            if least < self.t.disk_low_bytes:
                out += self._set(DISK_LOW, host, True, f"{_size(least)} free on host {host} "
                                 f"(alert under {_size(self.t.disk_low_bytes)})", ts, host)
            elif least >= self.t.disk_low_bytes * DISK_CLEAR_FACTOR:
                out += self._set(DISK_LOW, host, False, f"{_size(least)} free on host {host} again", ts, host)
        started = self._running_since.get(task)
        if started is not None and CHECKPOINT_OLD in self.chosen:
            last = self._last_checkpoint.get(task)
            age = ts - (last if last is not None else started)
            if age >= self.t.checkpoint_old_minutes * 60:
                what = "its last checkpoint" if last is not None else "it started, with no checkpoint yet"
                out += self._set(CHECKPOINT_OLD, task, True, f"{age / 60:.0f} min since {what}", ts, host)
        return out

    # -- changes --------------------------------------------------------------------------------

    def _set(self, name: str, subject: str, active: bool, figure: str, ts: float, host: str = "") -> list[Alert]:
        key = (name, subject)
        if name in ONE_SHOT:
            return [Alert(name, subject, True, figure, ts, host)] if active and name in self.chosen else []
        if self.active.get(key, False) == active:
            return []
        self.active[key] = active
        if name not in self.chosen:
            return []
        return [Alert(name, subject, active, figure, ts, host or self._host_of.get(subject, ""))]


def _size(n: float) -> str:
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if n < 1024 or unit == "TiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return f"{n:.1f} TiB"
