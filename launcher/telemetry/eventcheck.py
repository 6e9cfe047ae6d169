"""Reading events back defensively: a run's files may hold torn lines, bytes that are not UTF-8,
or lines hand-edited or written by something else, whose fields are not what their readers take.

The check itself is the typed events' (``launcher.events``: each kind's class declares its fields'
types, and ``Event.from_json`` refuses a line whose fields have others), so live streams and stored
files are checked alike; ``decode_checked`` is its name for the readers of a run's files.
Launcher-side only: the agent never reads these back.
"""

from __future__ import annotations

import math
from typing import Any

from launcher.events import Event


def decode_checked(line: str) -> Event:
    """The typed event of one line of a run's files (``Event.from_json``: its fields checked)."""
    return Event.from_json(line)


def as_int(value: Any, default: Any) -> Any:
    """A count or code as readers take it: an int (a whole float too), else ``default`` (never a bool)."""
    if type(value) is int:
        return value
    if type(value) is float and math.isfinite(value):
        return int(value)
    return default
