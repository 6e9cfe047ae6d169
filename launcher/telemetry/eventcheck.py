"""Reading events back defensively: a run's files may hold torn lines, bytes that are not UTF-8,
or lines hand-edited or written by something else, whose fields are not what their readers take.

``decode_checked`` is how a run's files are read back (rundir.EventLines, the replay, `runs`):
``Event.from_json`` plus a check of every field the readers use against ``FIELD_TYPES``. The
folding code (job view, timeline) also takes each field as it can (``as_int``, ``dicts``), since
a live stream is decoded without the check. Launcher-side only: the agent never reads these back.
"""

from __future__ import annotations

import math
from typing import Any

from launcher.events import (
    ACTION,
    CONDITION,
    HOST,
    JOB,
    LOG,
    METRIC,
    PLACEMENT,
    SAMPLE,
    STACKS,
    STATE,
    Event,
    EventDecodeError,
)

_NULL = type(None)
_NUMBER = (int, float, _NULL)
_TEXT = (str, _NULL)
#: what readers (job view, timeline, status, export, replay) take each field of a kind to be, where it
#: is present (JSON's own types, matched exactly: true is no number); a line of a run's files whose
#: field has another type is a bad line, skipped and counted like one that is not JSON
FIELD_TYPES: dict[str, dict[str, tuple[type, ...]]] = {
    JOB: {"state": (str,), "reason": _TEXT, "host_state": (dict, _NULL)},
    STATE: {"state": (str,), "host": _TEXT, "pid": (int, _NULL), "restarts": (int, _NULL),
            "exit_code": (int, _NULL), "reason": _TEXT, "cause": _TEXT, "culprit": _TEXT,
            "exited_at": _NUMBER, "signal": _TEXT, "oom_kill": (bool, _NULL), "peak_rss_bytes": _NUMBER},
    METRIC: {"step": (int, _NULL), "loss": _NUMBER, "values": (dict, _NULL), "nonfinite_loss": _TEXT},
    SAMPLE: {"cpu_percent": _NUMBER, "rss_bytes": _NUMBER, "gpus": (list, _NULL), "source": _TEXT,
             "host": (dict, _NULL)},
    PLACEMENT: {"variables": (list, _NULL)},
    LOG: {"stream": _TEXT, "line": (str,)},
    HOST: {"host": (str,), "state": (str,), "reason": _TEXT},
    CONDITION: {"condition": (str,), "active": (bool,), "reason": _TEXT},
    ACTION: {"action": (str,), "target": _TEXT, "origin": _TEXT},
    STACKS: {"path": _TEXT, "suspect": _TEXT, "frame": _TEXT, "reason": _TEXT},
}
#: the fields of the objects inside a field (each item of a list field) that readers use
ITEM_TYPES: dict[tuple[str, str], dict[str, tuple[type, ...]]] = {
    (SAMPLE, "gpus"): {"index": (int, _NULL), "util_percent": _NUMBER, "mem_used_bytes": _NUMBER,
                       "mem_total_bytes": _NUMBER},
    (SAMPLE, "host"): {"cpu_percent": _NUMBER, "cpus": (int, _NULL), "mem_used_bytes": _NUMBER,
                       "mem_total_bytes": _NUMBER},
    (PLACEMENT, "variables"): {"name": (str,), "bytes": _NUMBER, "task": _TEXT, "device": _TEXT,
                               "dtype": _TEXT},
}


#: event times readers can put on a calendar (time.localtime): 1970 to the year 5138
_TS_RANGE = (0.0, 1e11)


def _fits(value: Any, types: tuple[type, ...]) -> bool:
    """``value`` is of one of ``types`` exactly; a number also finite and within 64 bits."""
    kind = type(value)
    if kind not in types:
        return False
    if kind is int:
        return -(2 ** 63) <= value < 2 ** 63
    return kind is not float or math.isfinite(value)


def field_problem(event: Event) -> str | None:
    """Which field of ``event`` has a type its readers do not take (``FIELD_TYPES``), else None."""
    if not _TS_RANGE[0] <= event.ts < _TS_RANGE[1]:
        return f"ts {event.ts!r} is no time"
    if "seq" in event.data and not _fits(event.data["seq"], (int,)):
        return "seq is not an integer"
    fields = FIELD_TYPES.get(event.kind, {})
    for name, value in event.data.items():
        types = fields.get(name)
        if types is None:
            continue
        if not _fits(value, types):
            return f"{event.kind} {name} is a {type(value).__name__}"
        inner = ITEM_TYPES.get((event.kind, name))
        if inner is not None and value is not None:
            for item in value if isinstance(value, list) else [value]:
                if not isinstance(item, dict):
                    return f"{event.kind} {name} holds a {type(item).__name__}"
                for key, item_types in inner.items():
                    if key in item and not _fits(item[key], item_types):
                        return f"{event.kind} {name}.{key} is a {type(item[key]).__name__}"
    values = event.data.get("values") if event.kind == METRIC else None
    if isinstance(values, dict) and not all(_fits(v, _NUMBER) for v in values.values()):
        return "metric values holds no number"
    return None


def decode_checked(line: str) -> Event:
    """``Event.from_json`` that also refuses a field of a type its readers do not take."""
    event = Event.from_json(line)
    problem = field_problem(event)
    if problem is not None:
        raise EventDecodeError(problem)
    return event


def as_int(value: Any, default: Any) -> Any:
    """A count or code as readers take it: an int (a whole float too), else ``default`` (never a bool)."""
    if type(value) is int:
        return value
    if type(value) is float and math.isfinite(value):
        return int(value)
    return default


def text(value: Any) -> str | None:
    """A name as readers take it (a host, a task): a string that is not empty, else None."""
    return value if isinstance(value, str) and value else None


def dicts(value: Any) -> list[dict[str, Any]]:
    """The objects of a list field (a placement's variables, a sample's GPUs); [] when it is no list."""
    return [item for item in value if isinstance(item, dict)] if isinstance(value, list) else []
