"""The event stream: one schema shared by agents, supervisor, run dir, TUI and printers.

Every event is one JSON object on one line (DESIGN.md section 5)::

    {"v": 2, "ts": 1700000000.0, "run": "<run id>", "task": "worker:1" | null, "kind": "<kind>", ...}

Events that an agent wrote also carry ``seq``: the task's sequence number, gap-free from 0
across all incarnations of the task (the agent continues its event file's last number). Events
the launcher makes itself (job, pending / restarting states, conditions) never cross a link
and carry none.

This module is stdlib-only and runs on any Python >= 3.9: it is packed into the agent
zipapp that the launcher uploads to each host.
"""

from __future__ import annotations

import json
import math
import time
from dataclasses import dataclass, field
from typing import Any

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
KINDS = (JOB, STATE, METRIC, SAMPLE, PLACEMENT, LOG, HOST, CONDITION, ACTION, STACKS)

# task conditions
STALLED = "stalled"
STRAGGLER = "straggler"

# job states
JOB_CREATED = "Created"
JOB_RUNNING = "Running"
JOB_RESTARTING = "Restarting"
JOB_SUCCEEDED = "Succeeded"
JOB_FAILED = "Failed"
JOB_STATES = (JOB_CREATED, JOB_RUNNING, JOB_RESTARTING, JOB_SUCCEEDED, JOB_FAILED)

# task states
PENDING = "pending"
STARTING = "starting"
RUNNING = "running"
SUCCEEDED = "succeeded"
FAILED = "failed"
RESTARTING = "restarting"
STOPPED = "stopped"
TASK_STATES = (PENDING, STARTING, RUNNING, SUCCEEDED, FAILED, RESTARTING, STOPPED)
FINAL_TASK_STATES = (SUCCEEDED, FAILED, STOPPED)

# The prefix a training script puts before one JSON object on stdout to talk to its agent.
REPORT_PREFIX = "@distlaunch "

_DECODER = json.JSONDecoder()


class EventDecodeError(ValueError):
    """A line that is not a valid event."""


@dataclass(frozen=True)
class Event:
    """One event. ``data`` holds the kind-specific fields (``state``, ``step``, ...)."""

    kind: str
    run: str
    task: str | None
    ts: float = field(default_factory=time.time)
    data: dict[str, Any] = field(default_factory=dict)

    def get(self, key: str, default: Any = None) -> Any:
        return self.data.get(key, default)

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {"v": SCHEMA_VERSION, "ts": self.ts, "run": self.run, "task": self.task,
                               "kind": self.kind}
        out.update(self.data)
        return out

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), separators=(",", ":"), default=_json_default,
                          allow_nan=False)

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
        return cls(kind, run, task, float(ts), data)

    @classmethod
    def from_json(cls, line: str) -> Event:
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


def job_event(run: str, state: str, reason: str = "", ts: float | None = None) -> Event:
    return Event(JOB, run, None, ts if ts is not None else time.time(), {"state": state, "reason": reason})


def state_event(run: str, task: str, state: str, *, host: str | None = None, pid: int | None = None,
                restarts: int = 0, exit_code: int | None = None, reason: str = "",
                ts: float | None = None, **extra: Any) -> Event:
    data: dict[str, Any] = {"state": state, "host": host, "pid": pid, "restarts": restarts,
                            "exit_code": exit_code, "reason": reason}
    data.update(extra)
    return Event(STATE, run, task, ts if ts is not None else time.time(), data)


def metric_event(run: str, task: str, step: int | None = None, loss: float | None = None,
                 values: dict[str, float] | None = None, ts: float | None = None) -> Event:
    clean = {}
    for k, v in (values or {}).items():
        f = finite(v)
        if f is not None:
            clean[str(k)] = f
    return Event(METRIC, run, task, ts if ts is not None else time.time(),
                 {"step": int(step) if step is not None else None, "loss": finite(loss), "values": clean})


def sample_event(run: str, task: str, *, cpu_percent: float | None, rss_bytes: int | None,
                 gpus: list | None = None, source: str = "", ts: float | None = None,
                 **extra: Any) -> Event:
    data: dict[str, Any] = {"cpu_percent": cpu_percent, "rss_bytes": rss_bytes, "gpus": gpus or [],
                            "source": source}
    data.update(extra)
    return Event(SAMPLE, run, task, ts if ts is not None else time.time(), data)


def placement_event(run: str, task: str, variables: list, ts: float | None = None) -> Event:
    return Event(PLACEMENT, run, task, ts if ts is not None else time.time(), {"variables": variables})


def host_event(run: str, host: str, state: str, reason: str = "", ts: float | None = None) -> Event:
    return Event(HOST, run, None, ts if ts is not None else time.time(),
                 {"host": host, "state": state, "reason": reason})


def log_event(run: str, task: str, stream: str, line: str, ts: float | None = None) -> Event:
    return Event(LOG, run, task, ts if ts is not None else time.time(), {"stream": stream, "line": line})


def condition_event(run: str, task: str, condition: str, active: bool, reason: str = "",
                    ts: float | None = None) -> Event:
    return Event(CONDITION, run, task, ts if ts is not None else time.time(),
                 {"condition": condition, "active": bool(active), "reason": reason})


def action_event(run: str, action: str, target: str | None = None, origin: str = "",
                 ts: float | None = None) -> Event:
    return Event(ACTION, run, None, ts if ts is not None else time.time(),
                 {"action": action, "target": target, "origin": origin})


def stacks_event(run: str, task: str | None, path: str, suspect: str | None = None, frame: str | None = None,
                 reason: str = "", ts: float | None = None) -> Event:
    """``task``: the task whose stall made the capture (None: taken on request)."""
    return Event(STACKS, run, task, ts if ts is not None else time.time(),
                 {"path": path, "suspect": suspect, "frame": frame, "reason": reason})
