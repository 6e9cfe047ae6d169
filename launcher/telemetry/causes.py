"""Why a task's incarnation failed, in plain words: the ``cause`` of its failed state event.

The launcher works it out when a failed state event comes from a host agent, from what it knows
then: the agent's evidence in the event (the signal, whether the kernel's OOM killer sent the
SIGKILL, the peak RSS), the last lines of the incarnation's output (``OutputTails``) and the plan
(every task's address:port and ``/job:J/task:N``, to name the culprit a message points at).

In order: a SIGKILL is told as the host saw it (no output explains it); a known signature
(launcher/telemetry/signatures.py) in plain words, naming the culprit where the failure lies with a peer; the
last Python traceback (its exception and the innermost frame of the user's own code); else the exit.
"""

from __future__ import annotations

import re
from collections import deque
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, replace
from typing import Any

from launcher import events as ev
from launcher.events import Event
from launcher.telemetry.jobview import LogLine, TaskLog
from launcher.telemetry.signatures import ADDRESS, SIGNATURES, TASK_NAME

TAIL_LINES = 200
"""Output lines kept per task on the launcher to find a failure's cause."""

PEER_CONTEXT_LINES = 10
"""Lines either side of a signature's line searched for the peer it is about."""

MESSAGE_CHARS = 120

_TRACEBACK = "Traceback (most recent call last):"
_FRAME = re.compile(r'^\s*File "(?P<file>[^"]+)", line (?P<line>\d+), in ')
_EXCEPTION = re.compile(r"^(?P<type>[A-Za-z_][\w.]*)(?::\s?(?P<message>.*))?$")
_LIBRARY = ("/site-packages/", "/dist-packages/", "/lib/python3", "<frozen ")
_FUNCTION_NODE = re.compile(r"\{\{function_node [^}]*\}\}\s*")


@dataclass(frozen=True)
class Cause:
    text: str
    #: the task the failure lies with, where another task's message named it
    culprit: str | None = None


class PeerIndex:
    """Task ids by their address:port and their TensorFlow name (``/job:ps/task:0``)."""

    def __init__(self, tasks: Iterable[tuple[str, str, int | None]]) -> None:
        self.by_address: dict[tuple[str, int], str] = {}
        by_port: dict[int, set[str]] = {}
        self.ids: set[str] = set()
        for task_id, address, port in tasks:
            self.ids.add(task_id)
            if port is not None:
                self.by_address[(address, port)] = task_id
                by_port.setdefault(port, set()).add(task_id)
        #: a port only one task has: found whatever the address is written as (127.0.0.1, localhost)
        self.by_port = {port: next(iter(ids)) for port, ids in by_port.items() if len(ids) == 1}

    def name(self, text: str, exclude: str = "") -> str | None:
        """The first task other than ``exclude`` that ``text`` names."""
        for match in TASK_NAME.finditer(text):
            task_id = f"{match['job']}:{match['index']}"
            if task_id in self.ids and task_id != exclude:
                return task_id
        for match in ADDRESS.finditer(text):
            port = int(match["port"])
            host = match["host"].strip("[]")
            found = self.by_address.get((host, port)) or self.by_port.get(port)
            if found is not None and found != exclude:
                return found
        return None


class OutputTails:
    """The last `TAIL_LINES` output lines of each task's current incarnation."""

    def __init__(self) -> None:
        self._logs: dict[str, TaskLog] = {}
        self._starts: dict[str, int] = {}

    def _log(self, task: str) -> TaskLog:
        log = self._logs.get(task)
        if log is None:
            log = self._logs[task] = TaskLog(lines=deque(maxlen=TAIL_LINES))
        return log

    def add(self, event: Event) -> None:
        """Fold a task's event in: its log lines are kept, a start begins a new incarnation."""
        if event.task is None:
            return
        if event.kind == ev.LOG:
            self._log(event.task).add(LogLine(str(event.get("stream", "stdout")), str(event.get("line", "")),
                                              event.ts))
        elif event.kind == ev.STATE and event.get("state") == ev.STARTING:
            self._starts[event.task] = self._log(event.task).total

    def lines(self, task: str) -> list[str]:
        return [line.line for line in self._log(task).since(self._starts.get(task, 0))]


def exit_cause(data: Mapping[str, Any]) -> str:
    """The exit as the host saw it: a SIGKILL by the OOM killer or by someone else, another signal,
    or the exit code (or the agent's own reason, e.g. "could not start: ...")."""
    signal = data.get("signal")
    if signal == "SIGKILL":
        if data.get("oom_kill"):
            peak = data.get("peak_rss_bytes")
            return "killed by the kernel OOM killer" + (f" (peak RSS {_gib(peak)})" if isinstance(peak, int) else "")
        return "killed by SIGKILL (not by distlaunch)"
    if signal:
        return f"killed by {signal}"
    reason = data.get("reason")
    if reason:
        return str(reason)
    code = data.get("exit_code")
    return f"exit code {code}" if code is not None else "failed"


def _gib(n: int) -> str:
    """11.2 GiB, 300 MiB."""
    return f"{n / 2**30:.1f} GiB" if n >= 2**30 else f"{n / 2**20:.0f} MiB"


@dataclass(frozen=True)
class Traceback:
    exc_type: str  # the short name: "UnavailableError"
    message: str
    where: str  # "train.py:88", the innermost frame of the user's code
    line_index: int  # the exception line's index in the lines


def last_traceback(lines: list[str]) -> Traceback | None:
    """The last Python traceback in ``lines``: its exception and where in the user's code it arose."""
    start = next((i for i in range(len(lines) - 1, -1, -1) if lines[i].strip() == _TRACEBACK), None)
    if start is None:
        return None
    frames: list[tuple[str, str]] = []
    for i in range(start + 1, len(lines)):
        line = lines[i]
        frame = _FRAME.match(line)
        if frame:
            frames.append((frame["file"], frame["line"]))
            continue
        if line[:1].isspace() or not line:
            continue
        exc = _EXCEPTION.match(line.strip())
        if exc is None:
            return None
        user = [f for f in frames if not any(part in f[0] for part in _LIBRARY)] or frames
        where = f"{user[-1][0].rsplit('/', 1)[-1]}:{user[-1][1]}" if user else ""
        message = _FUNCTION_NODE.sub("", exc["message"] or "").strip().rstrip(":")  # "...error:" + more lines
        return Traceback(exc["type"].rsplit(".", 1)[-1], message, where, i)
    return None


def describe_traceback(tb: Traceback) -> str:
    """ "MemoryError at oom.py:3", "ValueError: bad shape at train.py:88"."""
    message = tb.message if len(tb.message) <= MESSAGE_CHARS else tb.message[:MESSAGE_CHARS - 3] + "..."
    what = f"{tb.exc_type}: {message}" if message else tb.exc_type
    return f"{what} at {tb.where}" if tb.where else what


def signature_cause(lines: list[str], peers: PeerIndex, task: str, host: str,
                    first: int | None = None) -> Cause | None:
    """The first signature found (line ``first`` first, then the newest line back), in plain words."""
    order = ([first] if first is not None else []) + [i for i in range(len(lines) - 1, -1, -1) if i != first]
    for i in order:
        for sig in SIGNATURES:
            match = sig.pattern.search(lines[i])
            if match is None:
                continue
            culprit = None
            if sig.peer:
                near = lines[i:i + PEER_CONTEXT_LINES + 1] + lines[max(0, i - PEER_CONTEXT_LINES):i][::-1]
                culprit = next((c for c in (peers.name(text, exclude=task) for text in near) if c), None)
                if culprit is None:
                    return Cause(sig.fallback)
            fields = {k: v or "" for k, v in match.groupdict().items()}
            if fields.get("module"):
                fields["module"] = fields["module"].split(".")[0]
            return Cause(sig.template.format(culprit=culprit, host=host, **fields), culprit)
    return None


def cause_of(data: Mapping[str, Any], lines: list[str], peers: PeerIndex, task: str) -> Cause:
    """The cause of a failed incarnation from its state event's fields and its last output lines."""
    if data.get("signal") == "SIGKILL" or str(data.get("reason") or "").startswith("could not start"):
        return Cause(exit_cause(data))
    tb = last_traceback(lines)
    found = signature_cause(lines, peers, task, str(data.get("host") or "?"),
                            tb.line_index if tb is not None else None)
    if found is not None:  # the signature says what in plain words; the traceback adds where
        where = f" ({tb.exc_type} at {tb.where})" if tb and tb.where else (f" ({tb.exc_type})" if tb else "")
        return Cause(found.text + where, found.culprit)
    if tb is not None:
        return Cause(describe_traceback(tb))
    return Cause(exit_cause(data))


def with_cause(event: Event, tails: OutputTails, peers: PeerIndex) -> Event:
    """A task's event folded into ``tails``; a failed state event comes back with its ``cause`` (and
    the ``culprit`` it names) added, as it is then recorded and published."""
    tails.add(event)
    if event.kind != ev.STATE or event.get("state") != ev.FAILED or event.task is None or "cause" in event.data:
        return event
    cause = cause_of(event.data, tails.lines(event.task), peers, event.task)
    data = {**event.data, "cause": cause.text}
    if cause.culprit:
        data["culprit"] = cause.culprit
    return replace(event, data=data)
