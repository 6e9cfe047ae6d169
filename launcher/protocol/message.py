"""What every line of distlaunch's two line protocols shares (``controllines``: the control socket;
``agentlines``: the agent stream): a message encodes itself, and a line that is no message decodes
to ``Malformed``.

Every line is a JSON object, an event's JSON line, a ``#`` marker line or empty (a ping), UTF-8,
ended by a newline. Decoding never raises: it gives the message, an event line as it came (a
``str``), or ``Malformed`` (an unknown marker, a body that does not parse), which readers skip: a
newer peer's new marker is ignored, never fatal. The bytes are those distlaunch wrote before the
protocol modules existed, so a run's supervisor or agents started by the previous version are
understood, and understand.

Stdlib-only, Python >= 3.9 (the agent zipapp ships it).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any


class Message:
    """What every message has: ``line()``, its text without the newline, and ``encode()``, its
    bytes on the wire."""

    def line(self) -> str:
        raise NotImplementedError

    def encode(self) -> bytes:
        return (self.line() + "\n").encode("utf-8")


@dataclass(frozen=True)
class Malformed:
    """A line that is no message: an unknown marker, or a message whose body does not parse.
    ``meant``: the message class the line claims to be (by its marker, or ``{`` for a request),
    where it claims one."""

    line: str
    why: str
    meant: type | None = None


def json_line(marker: str, obj: dict[str, Any], separators: tuple[str, str] | None = None) -> str:
    """``marker`` (if any), a space, and ``obj`` as JSON."""
    return (marker + " " if marker else "") + json.dumps(obj, separators=separators)


def json_object(text: str) -> dict[str, Any] | None:
    """``text`` as a JSON object, or None."""
    try:
        obj = json.loads(text)
    except ValueError:
        return None
    return obj if isinstance(obj, dict) else None


def int_or_none(value: Any) -> int | None:
    """``value`` where it is an int (a bool is none), else None."""
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def split_marker(line: str) -> tuple[str, str]:
    """A marker line's word (with its ``#``) and its body."""
    word, _, body = line.partition(" ")
    return word, body
