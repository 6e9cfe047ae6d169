"""The event stream: one schema shared by agents, supervisor, run dir, TUI and printers.

Every event is one JSON object on one line (DESIGN.md section 5)::

    {"v": 2, "ts": 1700000000.0, "run": "<run id>", "task": "worker:1" | null, "kind": "<kind>", ...}

Events that an agent wrote also carry ``seq``: the task's sequence number, gap-free from 0
across all incarnations of the task (the agent continues its event file's last number). Events
the launcher makes itself (job, pending / restarting states, conditions) never cross a link
and carry none.

Each kind has its class (``StateEvent``, ``MetricEvent``, ...: ``KIND_CLASSES``), which declares
its fields with their types; ``Event.from_json`` decodes a line to its kind's class and checks those
types once, so readers take typed attributes (``event.restarts``) instead of guarding each field.

This module is stdlib-only and runs on any Python >= 3.9: it is packed into the agent
zipapp that the launcher uploads to each host.
"""

from __future__ import annotations

import json
import math
import time
from dataclasses import dataclass, field
from typing import Any, Dict, Generic, List, Optional, Tuple, Type, TypeVar, overload

#: 2: events an agent wrote carry ``seq``, gap-free per task across incarnations (1: no seq)
SCHEMA_VERSION = 2
#: versions this codec reads: runs recorded before ``seq`` still replay
READABLE_VERSIONS = (1, 2)

# kinds
JOB = "job"
STATE = "state"
METRIC = "metric"
SAMPLE = "sample"
PLACEMENT = "placement"
LOG = "log"
# extension: a host became unreachable or came back (`host`, `state`: up / unreachable, `reason`)
HOST = "host"
# extension: a task condition was raised or cleared (`condition`: stalled / straggler / ...,
# `active`: bool, `reason`); what the telemetry watchdogs say about a running task
CONDITION = "condition"
# extension: an operator acted on the job (`action`: restart / stop / teardown / detach / attach,
# `target`: a task id or null, `origin`: dashboard / cli); the timeline shows who did what
ACTION = "action"
# extension: every task's stacks were captured (at a stall or on request): `path` of the capture
# in the run dir, `suspect` (a task id or null) and `frame` (its innermost frame of user code)
STACKS = "stacks"
#: a checkpoint a task wrote (autolog, or the profile's ``checkpoint_dir`` watched by the agent)
CHECKPOINT = "checkpoint"
RESIZE = "resize"
#: the run's Slurm job as squeue last showed it (a run `up` submitted with sbatch): `job_id`,
#: `state` (PENDING, RUNNING, CANCELLED, ...), `reason` (Priority, Resources, ...), `start_time`
#: (Slurm's expected or actual start, unix time, or null), `node` (where its batch script runs)
SLURM = "slurm"
REQUEUED = "requeued"
KINDS = (JOB, STATE, METRIC, SAMPLE, PLACEMENT, LOG, HOST, CONDITION, ACTION, STACKS, CHECKPOINT, RESIZE, SLURM,
         REQUEUED)

# task conditions
STALLED = "stalled"
STRAGGLER = "straggler"
NAN_LOSS = "nan_loss"  # the loss became NaN or Inf (launcher/supervise/outputpolicy.py)
LOG_POLICY = "log_policy"  # a line of output matched a [[log_policies]] pattern with action warn
GPU_ERROR = "gpu_error"  # a GPU the task holds reported an Xid or uncorrectable ECC errors (telemetry/gpufaults.py)

# job states
JOB_CREATED = "Created"
JOB_RUNNING = "Running"
JOB_RESTARTING = "Restarting"
JOB_SUCCEEDED = "Succeeded"
JOB_FAILED = "Failed"
#: stopped on purpose (down, a teardown, a stop signal); older runs said Failed
JOB_STOPPED = "Stopped"
JOB_STATES = (JOB_CREATED, JOB_RUNNING, JOB_RESTARTING, JOB_SUCCEEDED, JOB_FAILED, JOB_STOPPED)
JOB_ENDS = (JOB_SUCCEEDED, JOB_FAILED, JOB_STOPPED)

# task states
PENDING = "pending"
STARTING = "starting"
RUNNING = "running"
SUCCEEDED = "succeeded"
FAILED = "failed"
RESTARTING = "restarting"
STOPPED = "stopped"
#: the task's host was lost for good: this incarnation is out of reach (and stopped there by the
#: orphan rule); the task moves to a spare, or the role goes on without it, or the job fails
LOST = "lost"
#: a host's states (the `host` event, `status --json`'s hosts)
HOST_UP = "up"
HOST_UNREACHABLE = "unreachable"
HOST_LOST = "lost"
HOST_DRAINED = "drained"
HOST_SPARE = "spare"
TASK_STATES = (PENDING, STARTING, RUNNING, SUCCEEDED, FAILED, RESTARTING, STOPPED, LOST)
FINAL_TASK_STATES = (SUCCEEDED, FAILED, STOPPED, LOST)

# The prefix a training script puts before one JSON object on stdout to talk to its agent.
REPORT_PREFIX = "@distlaunch "

_DECODER = json.JSONDecoder()


class EventDecodeError(ValueError):
    """A line that is not a valid event."""


@dataclass(frozen=True)
class Event:
    """One event; an instance is always of its kind's class. ``data`` holds the kind-specific fields
    (``state``, ``step``, ...) as they came, unknown ones too, in their order: the class's attributes
    read them typed, ``to_json`` writes them back as they were."""

    kind: str
    run: str
    task: str | None
    ts: float = field(default_factory=time.time)
    data: dict[str, Any] = field(default_factory=dict)

    def __new__(cls, kind: Any = None, *args: Any, **kwargs: Any) -> Event:
        """``Event(kind, ...)`` is an event of that kind's class (``KIND_CLASSES``)."""
        if cls is Event:
            cls = KIND_CLASSES.get(kind, Event)
        return object.__new__(cls)

    def get(self, key: str, default: Any = None) -> Any:
        """A field by name, untyped (a field no class declares); readers of a kind take its attributes."""
        return self.data.get(key, default)

    @property
    def seq(self) -> int | None:
        """The task's sequence number, where an agent wrote the event (checked at decode)."""
        value = self.data.get("seq")
        return value if type(value) is int else None

    def with_data(self, **fields: Any) -> Event:
        """The same event with ``fields`` set (a copy: events are shared by every consumer)."""
        data = dict(self.data)
        data.update(fields)
        return type(self)(self.kind, self.run, self.task, self.ts, data)

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {"v": SCHEMA_VERSION, "ts": self.ts, "run": self.run, "task": self.task,
                               "kind": self.kind}
        out.update(self.data)
        return out

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), separators=(",", ":"), default=_json_default,
                          allow_nan=False)

    def problem(self) -> str | None:
        """Which field has a type its readers do not take (each kind's ``_Field``\\s), else None."""
        if not _TS_RANGE[0] <= self.ts < _TS_RANGE[1]:
            return "ts %r is no time" % (self.ts,)
        data = self.data
        for name, spec in _FIELDS_OF.get(type(self), _BASE_FIELDS).items():
            if name not in data:
                if spec.required:
                    return "%s lacks %s" % (self.kind, name)
                continue
            problem = spec.check(self.kind, data[name])
            if problem is not None:
                return problem
        return None

    @classmethod
    def from_dict(cls, obj: dict[str, Any]) -> Event:
        if not isinstance(obj, dict):
            raise EventDecodeError("event is not a JSON object")
        return cls._from_own_dict(dict(obj))

    @classmethod
    def _from_own_dict(cls, data: dict[str, Any]) -> Event:
        """The event of a dict nobody else holds: its header keys are taken out, the rest is data
        (the launcher decodes thousands of these a second)."""
        kind = data.pop("kind", None)
        if kind not in KINDS:
            raise EventDecodeError("unknown event kind %r" % (kind,))
        version = data.pop("v", None)
        if version not in READABLE_VERSIONS:
            raise EventDecodeError("unsupported event version %r" % (version,))
        run = data.pop("run", None)
        task = data.pop("task", None)
        ts = data.pop("ts", None)
        if not isinstance(run, str) or not (task is None or isinstance(task, str)):
            raise EventDecodeError("event lacks run/task")
        if not isinstance(ts, (int, float)):
            raise EventDecodeError("event lacks ts")
        event = KIND_CLASSES[kind](kind, run, task, float(ts), data)
        problem = event.problem()
        if problem is not None:
            raise EventDecodeError(problem)
        return event

    @classmethod
    def from_json(cls, line: str) -> Event:
        """The typed event of one line (a ``StateEvent`` for a state, ...), its fields checked:
        EventDecodeError for a line that is no event or whose fields have other types."""
        try:
            obj, end = _DECODER.raw_decode(line)  # json.loads without its two whitespace scans
            if end != len(line) and line[end:].strip():
                raise ValueError("extra data after the object")
        except ValueError:
            try:
                obj = json.loads(line)  # leading whitespace, and the error message json gives
            except ValueError as exc:
                raise EventDecodeError("not JSON: %s" % exc) from None
        if not isinstance(obj, dict):
            raise EventDecodeError("event is not a JSON object")
        return cls._from_own_dict(obj)


# -- typed events: one class per kind ----------------------------------------------------------
#
# Each kind's fields are declared once, as ``_Field``\s of its class: their JSON types (checked
# when a line is decoded, ``Event.from_json``) and the Python type a reader gets. The fields stay
# in ``data`` as they came, so an event is encoded again byte for byte, unknown fields included.

_T = TypeVar("_T")
_NULL = type(None)
_NUMBER = (int, float, _NULL)
_TEXT = (str, _NULL)
#: event times readers can put on a calendar (time.localtime): 1970 to the year 5138
_TS_RANGE = (0.0, 1e11)


def _fits(value: Any, types: Tuple[type, ...]) -> bool:
    """``value`` is of one of ``types`` exactly (true is no number); a number also finite and within
    64 bits."""
    kind = type(value)
    if kind not in types:
        return False
    if kind is int:
        return -(2 ** 63) <= value < 2 ** 63
    return kind is not float or math.isfinite(value)


class _Field(Generic[_T]):
    """One field of a kind: ``types`` are the JSON types it may have (exactly; without None the
    field must be there), ``default`` what a reader gets where it is absent or null, ``items`` the
    types of the fields of the objects it holds, ``numbers``: the values of an object are numbers."""

    def __init__(self, types: Tuple[type, ...], default: Any = None,
                 items: Optional[Dict[str, Tuple[type, ...]]] = None, numbers: bool = False,
                 required: Optional[bool] = None) -> None:
        self.name = ""
        self.types = types
        self.default = default
        self.items = items
        self.numbers = numbers
        self.required = _NULL not in types if required is None else required

    def __set_name__(self, owner: type, name: str) -> None:
        self.name = name

    @overload
    def __get__(self, obj: None, owner: type) -> _Field[_T]: ...

    @overload
    def __get__(self, obj: Event, owner: type) -> _T: ...

    def __get__(self, obj: Event | None, owner: type) -> Any:
        if obj is None:
            return self
        value = obj.data.get(self.name)
        if value is None:
            return self.default.copy() if isinstance(self.default, (list, dict)) else self.default
        return value

    def check(self, kind: str, value: Any) -> str | None:
        if not _fits(value, self.types):
            return "%s %s is a %s" % (kind, self.name, type(value).__name__)
        if self.numbers and isinstance(value, dict) and not all(_fits(v, _NUMBER) for v in value.values()):
            return "%s %s holds no number" % (kind, self.name)
        if self.items is None or value is None:
            return None
        for item in value if isinstance(value, list) else [value]:
            if not isinstance(item, dict):
                return "%s %s holds a %s" % (kind, self.name, type(item).__name__)
            for key, item_types in self.items.items():
                if key in item and not _fits(item[key], item_types):
                    return "%s %s.%s is a %s" % (kind, self.name, key, type(item[key]).__name__)
        return None


class JobEvent(Event):
    state = _Field[str]((str,))  # JOB_STATES
    reason = _Field[str](_TEXT, "")
    #: at attach: each host's state then ({host: state})
    host_state = _Field[Dict[str, Any]]((dict, _NULL), {})
    #: each role's size, where it is known or changed: {role: {"running", "planned", "min"}}
    roles = _Field[Dict[str, Any]]((dict, _NULL), {})


class StateEvent(Event):
    state = _Field[str]((str,))  # TASK_STATES
    host = _Field[Optional[str]](_TEXT)
    pid = _Field[Optional[int]]((int, _NULL))
    restarts = _Field[Optional[int]]((int, _NULL))
    exit_code = _Field[Optional[int]]((int, _NULL))
    reason = _Field[str](_TEXT, "")
    #: a failure's cause in plain words, and the task that caused it
    cause = _Field[str](_TEXT, "")
    culprit = _Field[Optional[str]](_TEXT)
    exited_at = _Field[Optional[float]](_NUMBER)
    signal = _Field[Optional[str]](_TEXT)
    oom_kill = _Field[Optional[bool]]((bool, _NULL))
    peak_rss_bytes = _Field[Optional[float]](_NUMBER)
    #: no restart can fix it (the agent says so)
    permanent = _Field[bool]((bool, _NULL), False)
    #: the host this task ran on before its host was lost or drained (the first running event after a move)
    moved_from = _Field[Optional[str]](_TEXT)


class MetricEvent(Event):
    step = _Field[Optional[int]]((int, _NULL))
    loss = _Field[Optional[float]](_NUMBER)
    values = _Field[Dict[str, float]]((dict, _NULL), {}, numbers=True)
    #: "nan", "inf" or "-inf" where the loss is no finite number
    nonfinite_loss = _Field[Optional[str]](_TEXT)


class SampleEvent(Event):
    cpu_percent = _Field[Optional[float]](_NUMBER)
    rss_bytes = _Field[Optional[float]](_NUMBER)
    #: per GPU the task holds: its use, and its health where NVML gives it (launcher/agent/nvml.py's
    #: ``gpu_health``; ``throttle`` a list of reason names) with ``xid_count`` and the latest ``xid``
    gpus = _Field[List[Dict[str, Any]]]((list, _NULL), [], items={
        "index": (int, _NULL), "util_percent": _NUMBER, "mem_used_bytes": _NUMBER, "mem_total_bytes": _NUMBER,
        "temp_c": _NUMBER, "power_w": _NUMBER, "power_limit_w": _NUMBER, "sm_clock_mhz": _NUMBER,
        "sm_clock_max_mhz": _NUMBER, "throttle": (list, _NULL), "ecc_corrected": (int, _NULL),
        "ecc_uncorrected": (int, _NULL), "xid_count": (int, _NULL), "xid": (int, _NULL)})
    source = _Field[str](_TEXT, "")
    #: the machine's own numbers
    host = _Field[Optional[Dict[str, Any]]]((dict, _NULL), items={
        "cpu_percent": _NUMBER, "cpus": (int, _NULL), "mem_used_bytes": _NUMBER, "mem_total_bytes": _NUMBER,
        "outputs_free_bytes": _NUMBER, "run_dir_free_bytes": _NUMBER, "net_rx_bytes_per_s": _NUMBER,
        "net_tx_bytes_per_s": _NUMBER, "disk_write_bytes_per_s": _NUMBER})
    #: the process state last seen (R, S, D, ...)
    proc_state = _Field[str](_TEXT, "")
    #: the process the task's command started (below its wrapper shell): what py-spy, gdb or kill take
    main_pid = _Field[Optional[int]]((int, _NULL))


class PlacementEvent(Event):
    variables = _Field[List[Dict[str, Any]]]((list, _NULL), [], items={
        "name": (str,), "bytes": _NUMBER, "task": _TEXT, "device": _TEXT, "dtype": _TEXT})


class LogEvent(Event):
    stream = _Field[str](_TEXT, "stdout")
    line = _Field[str]((str,))


class HostEvent(Event):
    host = _Field[str]((str,))
    state = _Field[str]((str,))
    reason = _Field[str](_TEXT, "")


class ConditionEvent(Event):
    condition = _Field[str]((str,))
    active = _Field[bool]((bool,))
    reason = _Field[str](_TEXT, "")


class ActionEvent(Event):
    action = _Field[str]((str,))
    target = _Field[Optional[str]](_TEXT)
    origin = _Field[str](_TEXT, "")


class StacksEvent(Event):
    path = _Field[Optional[str]](_TEXT)
    suspect = _Field[Optional[str]](_TEXT)
    frame = _Field[Optional[str]](_TEXT)
    reason = _Field[str](_TEXT, "")


class ResizeEvent(Event):
    """A role changed size on purpose (never a failure, never a restart): ``role`` went from
    ``before`` to ``after`` live tasks, ``reason`` in words (``host c re-admitted after 300 s``),
    ``tasks`` the ones that joined or left, ``restart`` whether the cluster restarted for it."""

    role = _Field[str]((str,))
    before = _Field[int]((int,))
    after = _Field[int]((int,))
    reason = _Field[str](_TEXT, "")
    tasks = _Field[List[str]]((list, _NULL), [])
    restart = _Field[bool]((bool,), False)

    def line(self) -> str:
        """``worker 1 -> 2: host c re-admitted after 300 s``."""
        return f"{self.role} {self.before} -> {self.after}: {self.reason}" if self.reason else \
            f"{self.role} {self.before} -> {self.after}"


class CheckpointEvent(Event):
    """A complete checkpoint on the task's host: ``directory`` as the task's host names it, ``files``
    relative to it (what makes this checkpoint, its ``checkpoint`` state file included), ``api``
    which writer made it (``backup_and_restore``, ``model_checkpoint``, ``checkpoint_manager``,
    ``checkpoint``, ``saver``, ``preemption``, ``watched``). ``copies``: where complete copies of
    it are (``host:directory`` each, ``launcher:<path>`` on the launcher's machine); the supervisor
    re-states the event (same ``ts``) with them once it copied or placed the checkpoint."""

    step = _Field[Optional[int]]((int, _NULL))
    epoch = _Field[Optional[int]]((int, _NULL))
    directory = _Field[str]((str,))
    files = _Field[List[str]]((list, _NULL), [])
    bytes = _Field[Optional[int]]((int, _NULL))
    #: seconds the write took
    seconds = _Field[Optional[float]](_NUMBER)
    api = _Field[str](_TEXT, "")
    host = _Field[Optional[str]](_TEXT)
    copies = _Field[List[str]]((list, _NULL), [])

    def same_checkpoint(self, other: CheckpointEvent) -> bool:
        """Do both name one checkpoint (a re-statement with copies names the one it copies)?"""
        return (self.task, self.host, self.directory, self.step, self.epoch) == (
            other.task, other.host, other.directory, other.step, other.epoch)


class SlurmEvent(Event):
    """The run's Slurm job changed state or reason, as squeue showed it (commands/slurmwatch.py)."""

    job_id = _Field[str]((str,))
    state = _Field[str]((str,))
    reason = _Field[str](_TEXT, "")
    start_time = _Field[Optional[float]](_NUMBER)
    node = _Field[Optional[str]](_TEXT)


class RequeuedEvent(Event):
    """Slurm requeued the run's job (a preemption, `scontrol requeue`, its own time limit near): the
    allocation ended, and the run goes on, the same run, when the job runs again."""

    job_id = _Field[str]((str,))
    reason = _Field[str](_TEXT, "")
    requeues = _Field[int]((int,))  # how many times the job has been requeued, this one included
    node = _Field[Optional[str]](_TEXT)  # where the ended allocation's supervisor ran


KIND_CLASSES: Dict[str, Type[Event]] = {JOB: JobEvent, STATE: StateEvent, METRIC: MetricEvent, SAMPLE: SampleEvent,
                                 PLACEMENT: PlacementEvent, LOG: LogEvent, HOST: HostEvent,
                                 CONDITION: ConditionEvent, ACTION: ActionEvent, STACKS: StacksEvent,
                                 CHECKPOINT: CheckpointEvent, RESIZE: ResizeEvent, SLURM: SlurmEvent,
                                 REQUEUED: RequeuedEvent}
#: every event's own fields: ``seq``, where an agent wrote it
_BASE_FIELDS: Dict[str, _Field[Any]] = {"seq": _Field[Optional[int]]((int,), required=False)}
_BASE_FIELDS["seq"].name = "seq"
_FIELDS_OF: Dict[type, Dict[str, _Field[Any]]] = {
    cls: dict(_BASE_FIELDS, **{name: spec for name, spec in vars(cls).items() if isinstance(spec, _Field)})
    for cls in KIND_CLASSES.values()}


def _json_default(value: Any) -> Any:
    # numpy scalars and similar: anything with item() or __float__
    if hasattr(value, "item"):
        return value.item()
    if hasattr(value, "__float__"):
        return float(value)
    return str(value)


def finite(value: Any) -> float | None:
    """A float, or None for NaN/inf/non-numbers (JSON has no NaN)."""
    try:
        f = float(value)
    except (TypeError, ValueError):
        return None
    return f if math.isfinite(f) else None


# -- constructors: the one place each kind's fields are spelled ------------------------------


def job_event(run: str, state: str, reason: str = "", ts: float | None = None,
              roles: dict[str, dict[str, int]] | None = None) -> JobEvent:
    data: dict[str, Any] = {"state": state, "reason": reason}
    if roles:
        data["roles"] = roles
    return JobEvent(JOB, run, None, ts if ts is not None else time.time(), data)


def state_event(run: str, task: str, state: str, *, host: str | None = None, pid: int | None = None,
                restarts: int = 0, exit_code: int | None = None, reason: str = "",
                ts: float | None = None, **extra: Any) -> StateEvent:
    data: dict[str, Any] = {"state": state, "host": host, "pid": pid, "restarts": restarts,
                            "exit_code": exit_code, "reason": reason}
    data.update(extra)
    return StateEvent(STATE, run, task, ts if ts is not None else time.time(), data)


def metric_event(run: str, task: str, step: int | None = None, loss: float | None = None,
                 values: dict[str, float] | None = None, ts: float | None = None) -> MetricEvent:
    """A NaN or infinite ``loss`` is sent as ``loss: null`` and ``nonfinite_loss``: "nan", "inf" or
    "-inf" (events stay strict JSON, which has no NaN)."""
    clean = {}
    for k, v in (values or {}).items():
        f = finite(v)
        if f is not None:
            clean[str(k)] = f
    data: dict[str, Any] = {"step": int(step) if step is not None else None, "loss": finite(loss), "values": clean}
    label = nonfinite_label(loss)
    if label is not None:
        data["nonfinite_loss"] = label
    return MetricEvent(METRIC, run, task, ts if ts is not None else time.time(), data)


#: how a metric event names a loss that is no finite number
NONFINITE_LABELS = ("nan", "inf", "-inf")


def nonfinite_label(value: Any) -> str | None:
    """"nan", "inf" or "-inf" for such a number (or one of those labels), else None."""
    if isinstance(value, str):
        return value if value in NONFINITE_LABELS else None
    try:
        number = float(value)  # numpy scalars too
    except (TypeError, ValueError):
        return None
    if math.isfinite(number):
        return None
    return "nan" if math.isnan(number) else ("inf" if number > 0 else "-inf")


def sample_event(run: str, task: str, *, cpu_percent: float | None, rss_bytes: int | None,
                 gpus: list | None = None, source: str = "", ts: float | None = None,
                 **extra: Any) -> SampleEvent:
    data: dict[str, Any] = {"cpu_percent": cpu_percent, "rss_bytes": rss_bytes, "gpus": gpus or [],
                            "source": source}
    data.update(extra)
    return SampleEvent(SAMPLE, run, task, ts if ts is not None else time.time(), data)


def placement_event(run: str, task: str, variables: list, ts: float | None = None) -> PlacementEvent:
    return PlacementEvent(PLACEMENT, run, task, ts if ts is not None else time.time(), {"variables": variables})


def host_event(run: str, host: str, state: str, reason: str = "", ts: float | None = None) -> HostEvent:
    return HostEvent(HOST, run, None, ts if ts is not None else time.time(),
                 {"host": host, "state": state, "reason": reason})


def resize_event(run: str, role: str, before: int, after: int, reason: str, tasks: List[str],
                 restart: bool = False, ts: float | None = None) -> ResizeEvent:
    return ResizeEvent(RESIZE, run, None, ts if ts is not None else time.time(),
                       {"role": role, "before": before, "after": after, "reason": reason, "tasks": tasks,
                        "restart": restart})


def log_event(run: str, task: str, stream: str, line: str, ts: float | None = None) -> LogEvent:
    return LogEvent(LOG, run, task, ts if ts is not None else time.time(), {"stream": stream, "line": line})


def condition_event(run: str, task: str, condition: str, active: bool, reason: str = "",
                    ts: float | None = None) -> ConditionEvent:
    return ConditionEvent(CONDITION, run, task, ts if ts is not None else time.time(),
                 {"condition": condition, "active": bool(active), "reason": reason})


def action_event(run: str, action: str, target: str | None = None, origin: str = "",
                 ts: float | None = None) -> ActionEvent:
    return ActionEvent(ACTION, run, None, ts if ts is not None else time.time(),
                 {"action": action, "target": target, "origin": origin})


def stacks_event(run: str, task: str | None, path: str, suspect: str | None = None, frame: str | None = None,
                 reason: str = "", ts: float | None = None) -> StacksEvent:
    """``task``: the task whose stall made the capture (None: taken on request)."""
    return StacksEvent(STACKS, run, task, ts if ts is not None else time.time(),
                 {"path": path, "suspect": suspect, "frame": frame, "reason": reason})


def checkpoint_event(run: str, task: str, directory: str, *, step: int | None = None, epoch: int | None = None,
                     files: list[str] | None = None, nbytes: int | None = None, seconds: float | None = None,
                     api: str = "", host: str | None = None, ts: float | None = None,
                     copies: list[str] | None = None) -> CheckpointEvent:
    data: Dict[str, Any] = {"step": step, "epoch": epoch, "directory": directory, "files": list(files or []),
                            "bytes": nbytes, "seconds": seconds, "api": api, "host": host}
    if copies:
        data["copies"] = list(copies)
    return CheckpointEvent(CHECKPOINT, run, task, ts if ts is not None else time.time(), data)


def slurm_event(run: str, job_id: str, state: str, reason: str = "", start_time: float | None = None,
                node: str | None = None, ts: float | None = None) -> SlurmEvent:
    return SlurmEvent(SLURM, run, None, ts if ts is not None else time.time(),
                      {"job_id": job_id, "state": state, "reason": reason, "start_time": start_time, "node": node})


def requeued_event(run: str, job_id: str, reason: str, requeues: int, node: str | None = None,
                   ts: float | None = None) -> RequeuedEvent:
    return RequeuedEvent(REQUEUED, run, None, ts if ts is not None else time.time(),
                         {"job_id": job_id, "reason": reason, "requeues": requeues, "node": node})
