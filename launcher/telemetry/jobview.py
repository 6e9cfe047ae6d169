"""The picture of a job built from events alone, free of any widget: the dashboard and the
headless progress printer both read it.

`JobView.apply` folds one `Event` into per-task state (`TaskView`), job state, the
placement table and bounded log buffers. Widgets read it; tests drive it directly.
Everything kept over time is bounded (deques), so a week-long job costs the same memory
as a minute-long one.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from launcher import events as ev
from launcher.events import Event
from launcher.protocol.metricnames import STEP_IS_CALLS
from launcher.telemetry import eventcheck
from launcher.telemetry.hosttrends import HostTrends
from launcher.telemetry.mergedlog import MergedLog
from launcher.telemetry.placementview import (  # noqa: F401  (their old home: readers import them from here)
    IMBALANCE_RATIO,
    ROLE_ORDER,
    PlacementView,
    VariablePlacement,
    task_sort_key,
)
from launcher.telemetry.steprate import StepRate
from launcher.telemetry.stepverdict import StepTimes
from launcher.telemetry.timeline import Timeline

HISTORY_POINTS = 120  # points kept per sparkline series (steps/s, GPU util) per task
RATE_POINTS = 200  # (time, steps/s) points kept per task, spread over the task's whole life
LOSS_POINTS = 400  # (step, loss) points kept per task for the loss chart
LOG_LINES = 2000  # log lines kept per task
STALE_AFTER_S = 10.0  # a running task with no event for this long is shown as stale

FAILURE_TAIL_LINES = 8
"""Lines of a failed incarnation's output the failure report shows (each once)."""

FAILURE_TAIL_KEPT = 20 * FAILURE_TAIL_LINES
"""Lines kept per failed incarnation: enough for repeated lines to leave enough distinct ones, and
for a long traceback (which the report shows whole) after TensorFlow's start-up lines."""

UNREACHABLE_REASON = "host unreachable"


def root_cause_text(task: str, why: str, cause: str = "", culprit: str | None = None) -> str:
    """The report's root-cause line for the first failure: the culprit its cause names, where one
    is named ("ps:0 (chief:0 failed first: lost contact with ps:0)"), else the task itself."""
    told = why if not cause else (cause if cause.startswith("killed by") or cause == why else f"{why}: {cause}")
    if culprit and culprit != task:
        return f"{culprit} ({task} failed first: {told})"
    return f"{task} failed first ({told})"


def role_sizes_text(roles: Mapping[str, Mapping[str, int]]) -> str:
    """``worker 1/2, min 1``: the roles that may change size (min below count) or did; "" if none
    (the dashboard's header and ``status``)."""
    parts = [f"{role} {size.get('running')}/{size.get('planned')}, min {size.get('min')}"
             for role, size in sorted(roles.items())
             if size.get("min", 0) < size.get("planned", 0) or size.get("running") != size.get("planned")]
    return "; ".join(parts)

@dataclass
class LogLine:
    stream: str
    line: str
    ts: float


@dataclass
class TaskLog:
    """The last `LOG_LINES` lines of one task; `total` counts every line ever added, so a
    reader that remembers the total it last saw knows how many lines are new."""

    lines: deque[LogLine] = field(default_factory=lambda: deque(maxlen=LOG_LINES))
    total: int = 0

    def add(self, line: LogLine) -> None:
        self.lines.append(line)
        self.total += 1

    def since(self, seen_total: int) -> list[LogLine]:
        """Lines added after a reader saw `seen_total` (only those still kept)."""
        new = min(self.total - seen_total, len(self.lines))
        return list(self.lines)[-new:] if new > 0 else []


@dataclass
class TaskView:
    """Everything shown about one task."""

    task_id: str
    state: str = ev.PENDING
    host: str | None = None
    pid: int | None = None
    #: the program's own pid, below the wrapper shell (sample events): the pid column shows it
    main_pid: int | None = None
    restarts: int = 0
    exit_code: int | None = None
    reason: str = ""
    step: int | None = None
    step_is_calls: bool = False  # the step counts train calls (autolog: no step variable): `step (calls)`
    loss: float | None = None  # the latest finite loss
    #: "nan" / "inf" / "-inf" while the latest loss is no finite number (shown in its place)
    nonfinite_loss: str | None = None
    cpu_percent: float | None = None
    rss_bytes: int | None = None
    gpu_util: float | None = None
    gpu_mem_used: int | None = None
    gpu_mem_total: int | None = None
    has_gpu: bool = False
    #: the last sample's GPUs as reported (``index``, ``util_percent``, ``mem_*_bytes``): the hosts view
    gpus: list[dict[str, object]] = field(default_factory=list)
    last_event_ts: float | None = None
    #: active conditions (``stalled``, ``straggler``, ...) and why each was raised
    conditions: dict[str, str] = field(default_factory=dict)
    stall_stacks: ev.StacksEvent | None = None  # the `stacks` event of this incarnation's stall (where it hangs)
    #: the log's ``total`` when this incarnation started: its own lines are the ones after it
    incarnation_log_start: int = 0
    #: the last lines of the latest incarnation that failed, kept when it failed (failure report)
    failed_tail: list[str] = field(default_factory=list)
    #: why its latest failed incarnation failed (the state event's ``cause``), and the task it names
    cause: str = ""
    #: the host it left when its host was lost or drained (its first running event on the new one)
    moved_from: str | None = None
    #: its host does not answer, or was lost: its last readings are not live
    host_down: str | None = None
    culprit: str | None = None
    #: the last ``seq`` seen from this task's agent, and how many numbers never arrived
    last_seq: int = -1
    lost_events: int = 0
    rate_history: deque[float] = field(default_factory=lambda: deque(maxlen=HISTORY_POINTS))
    gpu_history: deque[float] = field(default_factory=lambda: deque(maxlen=HISTORY_POINTS))
    loss_history: deque[tuple[int, float]] = field(default_factory=lambda: deque(maxlen=LOSS_POINTS))
    #: the event time of each `loss_history` point (same length): the loss chart's time axis
    loss_times: deque[float] = field(default_factory=lambda: deque(maxlen=LOSS_POINTS))
    #: (event time, steps/s) over the whole life of the task for the steps/s-over-time chart: one point
    #: per `rate_spacing` seconds; when `RATE_POINTS` are kept, every other one goes and the spacing doubles
    rate_points: list[tuple[float, float]] = field(default_factory=list)
    rate_spacing: float = 1.0
    #: this incarnation's steps by event time: `steps_per_s` over a window ending at the caller's now
    step_rate: StepRate = field(default_factory=StepRate)
    #: the newest checkpoint it wrote (a ``checkpoint`` event: step, directory, host, files), kept
    #: across restarts: what a restart of it could resume from
    checkpoint: ev.CheckpointEvent | None = None
    #: where copies of that checkpoint are (``host:directory`` each), once something copies them
    checkpoint_copies: list[str] = field(default_factory=list)

    @property
    def role(self) -> str:
        return self.task_id.partition(":")[0]

    @property
    def steps_at_risk(self) -> int | None:
        """The work a loss of this task now would redo: steps since its last checkpoint (the current
        step where no checkpoint is yet); None where a step is unknown."""
        if self.step is None:
            return None
        if self.checkpoint is None:
            return self.step
        if self.checkpoint.step is None:
            return None
        return max(0, self.step - self.checkpoint.step)

    def checkpoint_where(self) -> str | None:
        """``host:directory`` of its last checkpoint (the directory alone where no host is known)."""
        point = self.checkpoint
        if point is None:
            return None
        return f"{point.host}:{point.directory}" if point.host else point.directory

    def age(self, now: float) -> float | None:
        return None if self.last_event_ts is None else max(0.0, now - self.last_event_ts)

    def is_stale(self, now: float) -> bool:
        age = self.age(now)
        return self.state == ev.RUNNING and age is not None and age > STALE_AFTER_S

    def steps_per_s(self, now: float) -> float | None:
        """Steps/s over the window ending at `now` (0.0 once the step stopped moving); None until this
        incarnation reported two steps (leaving `running` forgets the steps of the one before)."""
        return self.step_rate.rate(now)

    def record_step(self, ts: float, step: int) -> None:
        """Adds a step to the rate window and, at this event's time, to the rate's histories."""
        self.step_rate.add(ts, step)
        rate = self.step_rate.rate(ts)
        if rate is not None:
            self.rate_history.append(rate)
            rates = self.rate_points
            if not rates or ts - rates[-1][0] >= self.rate_spacing:
                rates.append((ts, rate))
                if len(rates) > RATE_POINTS:
                    self.rate_points = rates[::2]
                    self.rate_spacing *= 2


@dataclass
class Notice:
    """Something the user should be told about once (a toast)."""

    message: str
    severity: str  # "information" | "warning" | "error"


@dataclass
class JobView:
    """The whole job, as far as the events seen so far tell."""

    run: str = ""
    state: str = ev.JOB_CREATED
    reason: str = ""
    start_ts: float | None = None
    end_ts: float | None = None
    last_ts: float | None = None
    tasks: dict[str, TaskView] = field(default_factory=dict)
    logs: dict[str, TaskLog] = field(default_factory=dict)
    #: every task's lines together, as they arrived (the dashboard's merged log, `L`)
    merged_log: MergedLog = field(default_factory=MergedLog)
    placement: PlacementView = field(default_factory=PlacementView)
    hosts_down: set[str] = field(default_factory=set)
    #: each host's latest `host` event: (state, reason, time)
    host_states: dict[str, tuple[str, str, float]] = field(default_factory=dict)
    #: each role's size from the latest job event that gave it: {role: {"running", "planned", "min"}}
    roles: dict[str, dict[str, int]] = field(default_factory=dict)
    #: per host, its latest whole-machine reading: cpu_percent (of all cores), cpus, mem_used/total_bytes
    machines: dict[str, dict[str, Any]] = field(default_factory=dict)
    #: per host, its network and GPU readings over the last minute or so (the hosts view's sparklines)
    host_trends: HostTrends = field(default_factory=HostTrends)
    #: per host, each GPU's latest entry by index (its use and health, as a sample carries it)
    host_gpus: dict[str, dict[int, dict[str, Any]]] = field(default_factory=dict)
    #: the global step by event time (`global_steps_per_s`)
    global_step_rate: StepRate = field(default_factory=StepRate)
    notices: list[Notice] = field(default_factory=list)
    dirty_tasks: set[str] = field(default_factory=set)
    placement_dirty: bool = False
    events_applied: int = 0
    #: the first task failure of the job: (task id, why); in TF jobs the cause of the others
    first_failure: tuple[str, str] | None = None
    #: that failure's ``cause`` and the culprit it names (the root cause points at the culprit)
    first_failure_cause: tuple[str, str | None] = ("", None)
    #: when that task ended (its agent's `exited_at`, else the event's time): events of different
    #: tasks may arrive out of order, so an earlier failure that arrives later still wins
    first_failure_at: float | None = None
    #: state changes, exits, restarts, conditions and operator actions (the `e` view)
    timeline: Timeline = field(default_factory=Timeline)
    last_stacks: ev.StacksEvent | None = None  # the latest `stacks` event: the stacks view's stored capture
    #: Slurm requeued the run's job and no allocation has run it since (a client goes back to the queue)
    requeued: ev.RequeuedEvent | None = None
    step_times: StepTimes = field(default_factory=StepTimes)  # each task's split, closures per worker

    # -- reading -------------------------------------------------------------------------

    @property
    def ended(self) -> bool:
        return self.state in ev.JOB_ENDS

    @property
    def total_restarts(self) -> int:
        return sum(t.restarts for t in self.tasks.values())

    @property
    def global_step(self) -> int | None:
        """The chief's step; without a chief, the highest worker step."""
        chief = self.tasks.get("chief:0")
        if chief is not None and chief.step is not None:
            return chief.step
        steps = [t.step for t in self.tasks.values() if t.role == "worker" and t.step is not None]
        return max(steps) if steps else None

    def global_steps_per_s(self, now: float) -> float | None:
        """Steps/s of the global step over the window ending at `now`."""
        return self.global_step_rate.rate(now)

    def rate_clock(self, now: float) -> float:
        """Where a rate's window ends: `now` while the job runs, its end once it ended."""
        return self.end_ts if self.ended and self.end_ts is not None else now

    @property
    def root_cause(self) -> str:
        """The task that failed first and why ("ps:0 failed first (exit code 1)"), once one failed; the
        culprit its cause names, where it names one ("ps:0 (chief:0 failed first: lost contact with ps:0)")."""
        if self.first_failure is None:
            return ""
        task_id, why = self.first_failure
        return root_cause_text(task_id, why, *self.first_failure_cause)

    @property
    def failure_cause(self) -> str:
        """The root cause, where the job has failed (what the header and `status` show)."""
        return self.root_cause if self.state == ev.JOB_FAILED else ""

    def failed_tasks(self) -> list[str]:
        """Tasks with a failed incarnation, the first failure first, then in display order."""
        failed = sorted((t for t, v in self.tasks.items() if v.failed_tail or v.state == ev.FAILED),
                        key=task_sort_key)
        first = self.first_failure[0] if self.first_failure else None
        return sorted(failed, key=lambda t: t != first)

    def hosts_up(self) -> set[str]:
        """Hosts with a running task, minus those reported unreachable."""
        return {t.host for t in self.tasks.values()
                if t.state == ev.RUNNING and t.host and t.host not in self.hosts_down}

    def elapsed(self, now: float) -> float:
        if self.start_ts is None:
            return 0.0
        end = self.end_ts if self.end_ts is not None else now
        return max(0.0, end - self.start_ts)

    def log(self, task_id: str) -> TaskLog:
        return self.logs.setdefault(task_id, TaskLog())

    def take_notices(self) -> list[Notice]:
        out, self.notices = self.notices, []
        return out

    def take_dirty(self) -> set[str]:
        out, self.dirty_tasks = self.dirty_tasks, set()
        return out

    # -- folding events ------------------------------------------------------------------

    def task(self, task_id: str) -> TaskView:
        view = self.tasks.get(task_id)
        if view is None:
            view = self.tasks[task_id] = TaskView(task_id)
        return view

    def apply(self, event: Event) -> None:
        self.events_applied += 1
        self.run = self.run or event.run
        if self.start_ts is None:
            self.start_ts = event.ts
        self.last_ts = event.ts if self.last_ts is None else max(self.last_ts, event.ts)
        self.timeline.add(event)
        if isinstance(event, ev.RequeuedEvent):
            self.requeued = event
        if isinstance(event, ev.JobEvent):
            if event.state in (ev.JOB_CREATED, ev.JOB_RUNNING):
                self.requeued = None  # an allocation runs the job again
            self._apply_job(event)
            return
        if isinstance(event, ev.StacksEvent):
            self.last_stacks = event
            if self.step_times.stalled and event.suspect:  # a stall's capture: who holds the job
                self.step_times.stall_suspect = event.suspect
        if isinstance(event, ev.HostEvent):
            self._apply_host(event)
        if event.task is None:
            return
        task = self.task(event.task)
        task.last_event_ts = event.ts
        self.dirty_tasks.add(event.task)
        if event.seq is not None:
            self._check_seq(task, event.seq)
        if isinstance(event, ev.StateEvent):
            self._apply_state(task, event)
        elif isinstance(event, ev.MetricEvent):
            self._apply_metric(task, event)
        elif isinstance(event, ev.SampleEvent):
            self._apply_sample(task, event)
        elif isinstance(event, ev.LogEvent):
            log = self.log(event.task)
            self.merged_log.add(event.task, log.total, event.ts, event.stream, event.line)
            log.add(LogLine(event.stream, event.line, event.ts))
        elif isinstance(event, ev.PlacementEvent):
            self.placement.apply(event.variables)
            self.placement_dirty = True
        elif isinstance(event, ev.CheckpointEvent):
            self._apply_checkpoint(task, event)
        elif isinstance(event, ev.ConditionEvent):
            if event.active:
                task.conditions[event.condition] = event.reason
            else:
                task.conditions.pop(event.condition, None)
                if event.condition == ev.STALLED:
                    task.stall_stacks = None
            if event.condition == ev.STALLED:
                self.step_times.stall(task.task_id, event.active)  # the verdicts blame the stalled task
        elif isinstance(event, ev.StacksEvent) and ev.STALLED in task.conditions:
            task.stall_stacks = event

    @staticmethod
    def _apply_checkpoint(task: TaskView, event: ev.CheckpointEvent) -> None:
        """The newest checkpoint is the task's last one; copies of the one before are not its copies.
        A re-statement of the same checkpoint (the supervisor copied or placed it) adds its copies;
        a re-statement of another (an older one a restart resumes from) makes it the last."""
        if task.checkpoint is not None and event.copies and task.checkpoint.same_checkpoint(event):
            task.checkpoint_copies += [c for c in event.copies if c not in task.checkpoint_copies]
            return
        task.checkpoint = event
        task.checkpoint_copies = list(event.copies)

    def _check_seq(self, task: TaskView, seq: int) -> None:
        if seq > task.last_seq + 1:
            missing = seq - task.last_seq - 1
            task.lost_events += missing
            first = task.last_seq + 1
            span = f"seq {first}" if missing == 1 else f"seq {first}-{seq - 1}"
            self.notices.append(Notice(f"{task.task_id}: {missing} event(s) lost on the way ({span})", "warning"))
        task.last_seq = max(task.last_seq, seq)

    def role_sizes_text(self) -> str:
        return role_sizes_text(self.roles)

    @property
    def lost_events(self) -> dict[str, int]:
        """Tasks some of whose events never arrived, and how many."""
        return {t.task_id: t.lost_events for t in self.tasks.values() if t.lost_events}

    def _apply_job(self, event: ev.JobEvent) -> None:
        state = event.state
        was_ended = self.ended
        self.state, self.reason = state, event.reason
        if event.roles:
            self.roles = {str(r): {str(k): int(v) for k, v in size.items() if isinstance(v, int)}
                          for r, size in event.roles.items() if isinstance(size, dict)}
        for host, status in event.host_state.items():
            if str(status).lower() in ("down", "unreachable", "lost"):
                self.hosts_down.add(str(host))
            else:
                self.hosts_down.discard(str(host))
        if self.ended and not was_ended:
            self.end_ts = event.ts
            why = f": {self.reason}" if self.reason else ""
            self.notices.append(Notice(f"Job {state}{why}",
                                       "error" if state == ev.JOB_FAILED else
                                       "warning" if state == ev.JOB_STOPPED else "information"))

    def _apply_host(self, event: ev.HostEvent) -> None:
        """A host's link went down, came back, or the host left the job: its tasks' last readings
        are shown as not live while it is down."""
        host, state = event.host, event.state
        self.host_states[host] = (state, event.reason, event.ts)
        down = state in (ev.HOST_UNREACHABLE, ev.HOST_LOST)
        if down:
            self.hosts_down.add(host)
        else:
            self.hosts_down.discard(host)
        for task in self.tasks.values():
            if task.host == host:
                task.host_down = state if down else None
                self.dirty_tasks.add(task.task_id)

    def _apply_state(self, task: TaskView, event: ev.StateEvent) -> None:
        old = task.state
        task.state = event.state
        if event.host and event.host != task.host:  # placed (or moved): its new host's word counts
            task.host_down = None
        task.host = event.host or task.host
        pid = event.pid
        task.pid = pid if pid is not None else (None if task.state in ev.FINAL_TASK_STATES else task.pid)
        if pid is not None or task.state in ev.FINAL_TASK_STATES:
            task.main_pid = None  # a new incarnation, or none: its program is not known yet
        task.restarts = event.restarts or task.restarts
        task.exit_code = event.exit_code
        task.reason = event.reason
        if event.moved_from:  # a new host's agent numbers its events from 0
            task.moved_from = event.moved_from
            self.notices.append(Notice(f"{task.task_id} moved from {event.moved_from} to {event.host}", "warning"))
            task.last_seq = event.seq if event.seq is not None else -1
        if task.host:
            if task.reason == UNREACHABLE_REASON:
                self.hosts_down.add(task.host)
            elif task.state == ev.RUNNING:
                self.hosts_down.discard(task.host)
        if task.state == ev.LOST:
            self.step_times.gone.add(task.task_id)
        else:
            self.step_times.gone.discard(task.task_id)
        if task.state != ev.RUNNING:
            task.step_rate.clear()
            task.conditions.clear()  # a stall or a slow pace belongs to the incarnation that had it
            self.step_times.stall(task.task_id, False)
            task.stall_stacks = None
        if task.state == ev.STARTING:
            task.incarnation_log_start = self.log(task.task_id).total
        elif task.state == ev.FAILED:
            self._record_failure(task, event)
        if task.state == old:
            return
        why = f" ({task.reason})" if task.reason else ""
        if task.state == ev.FAILED:
            code = f", exit code {task.exit_code}" if task.exit_code is not None else ""
            self.notices.append(Notice(f"{task.task_id} failed{code}{why}", "error"))
        elif task.state == ev.RESTARTING:
            self.notices.append(Notice(f"{task.task_id} restarting (restart {task.restarts}){why}",
                                       "warning"))

    def _record_failure(self, task: TaskView, event: ev.StateEvent) -> None:
        why = task.reason or (f"exit code {task.exit_code}" if task.exit_code is not None else "failed")
        at = float(event.exited_at) if event.exited_at is not None else event.ts
        task.cause = event.cause
        task.culprit = event.culprit or None
        if self.first_failure_at is None or at < self.first_failure_at:
            self.first_failure, self.first_failure_at = (task.task_id, why), at
            self.first_failure_cause = (task.cause, task.culprit)
        log = self.log(task.task_id)
        own = log.since(task.incarnation_log_start)
        task.failed_tail = [line.line for line in own[-FAILURE_TAIL_KEPT:]]

    def _apply_metric(self, task: TaskView, event: ev.MetricEvent) -> None:
        values = event.values
        if values:
            self.step_times.apply(task.task_id, event.ts, values)  # the table re-judges the rows it shows
        step, loss = event.step, event.loss
        nonfinite = ev.nonfinite_label(event.nonfinite_loss)
        if loss is not None or nonfinite is not None:
            task.nonfinite_loss = nonfinite
        if step is not None:
            task.step, task.step_is_calls = step, values.get(STEP_IS_CALLS) == 1
            task.record_step(event.ts, step)
            self._record_global_step(event.ts)
        if loss is not None:
            task.loss = loss
            if task.step is not None:
                history, times = task.loss_history, task.loss_times
                # a restart from an older checkpoint redoes steps, and a step reported twice is one
                # point: keep the curve a function of the step (drawn back, it made stray strokes)
                while history and history[-1][0] >= task.step:
                    history.pop()
                    times.pop()
                history.append((task.step, loss))
                times.append(event.ts)

    def _record_global_step(self, ts: float) -> None:
        step, points = self.global_step, self.global_step_rate.points
        if step is not None and not (points and points[-1][1] == step):  # another task's metric: no news
            self.global_step_rate.add(ts, step)

    def _apply_sample(self, task: TaskView, event: ev.SampleEvent) -> None:
        machine = event.host
        if machine is not None and task.host:
            self.machines[task.host] = machine
        if task.host:
            self.host_trends.add(task.host, event.ts, machine, event.gpus)
            for gpu in event.gpus:
                if type(gpu.get("index")) is int:
                    self.host_gpus.setdefault(task.host, {})[gpu["index"]] = gpu
        task.cpu_percent = self.step_times.cpu[task.task_id] = event.cpu_percent
        if event.proc_state:
            self.step_times.proc_states[task.task_id] = event.proc_state
        if event.main_pid is not None and task.state not in ev.FINAL_TASK_STATES:
            task.main_pid = event.main_pid
        if machine is not None and isinstance(machine.get("cpus"), int):
            self.step_times.cores[task.task_id] = machine["cpus"]
        task.rss_bytes = int(event.rss_bytes) if event.rss_bytes is not None else None
        gpus = event.gpus
        task.has_gpu = bool(gpus)
        task.gpus = gpus
        if gpus:
            utils = [u for u in (ev.finite(g.get("util_percent")) for g in gpus) if u is not None]
            task.gpu_util = sum(utils) / len(utils) if utils else None
            task.gpu_mem_used = sum(eventcheck.as_int(g.get("mem_used_bytes"), 0) for g in gpus)
            task.gpu_mem_total = sum(eventcheck.as_int(g.get("mem_total_bytes"), 0) for g in gpus)
            if task.gpu_util is not None:
                task.gpu_history.append(task.gpu_util)
        else:
            task.gpu_util = task.gpu_mem_used = task.gpu_mem_total = None
