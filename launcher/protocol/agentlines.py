"""The agent stream's line protocol, as typed messages: the one place its lines are written.

The launcher and a host agent's follower talk on the host's one exec channel. The launcher sends
``Ping`` (an empty line, every second) and ``AgentRequest`` lines (a request, below, and the
``id`` its answer carries back); the agent sends its tasks' event lines and::

    #re {..., "id": ...}                              AgentAnswer: to the request of that id
    #hb <host time>                                   Heartbeat, every second
    #note {"task", "condition", "active", "reason"}   Note: a task's condition that is in no file
    #unwritten <event JSON>                           Unwritten: an event its host could not write
    #preempt <why>                                    Preempted: the host's preemption_notice fired

Before the channel becomes the stream, a launch's preflight sends each host ``#reach {"targets"}``
(``ReachRequest``), answered ``#reach {"failed"}`` or ``#reach {"error"}`` (``ReachAnswer``).

**Requests to the host agent** (``{"op": ...}``): ``FollowRequest``, ``StartRequest``,
``StopRequest``, ``StacksRequest``, ``StatusRequest``. Each is a JSON line of its own as the first
line on the agent's socket (``launcher/agent/clients.py``; a follow request turns that connection
into the stream), and rides the stream inside an ``AgentRequest`` (compact JSON, with its ``id``).
The host agent answers every one in one place (``HostAgent.handle``).

What lines are, and how decoding treats a line that is no message: ``launcher/protocol/message.py``.
The control socket (clients and the supervisor) is ``launcher/protocol/controllines.py``.

Stdlib-only, Python >= 3.9 (the agent zipapp ships it).
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any, Union

from launcher.protocol.message import Malformed, Message, int_or_none, json_line, json_object, split_marker


@dataclass(frozen=True)
class Ping(Message):
    """The launcher still reads this stream (an empty line): the agent keeps the run's lease."""

    def line(self) -> str:
        return ""


# -- requests to the host agent --------------------------------------------------------------------


class _Op(Message):
    """A request: ``body()``, its JSON object (with its ``op``); alone on a line as the first line on
    the agent's socket."""

    def body(self) -> dict[str, Any]:
        raise NotImplementedError

    def line(self) -> str:
        return json_line("", self.body())


@dataclass(frozen=True)
class FollowRequest(_Op):
    """Make this connection an event stream: each task's events from its byte ``offsets`` on, then
    every line as it is written; ``pinged``: the launcher pings every second, and the run's lease
    is kept only while it does."""

    OP = "follow"
    offsets: dict[str, int] = field(default_factory=dict)
    pinged: bool = False

    def body(self) -> dict[str, Any]:
        return {"op": self.OP, "offsets": dict(self.offsets), "pinged": self.pinged}


@dataclass(frozen=True)
class StartRequest(_Op):
    """Start ``tasks`` (slugs) in this order from their spec.json, written first from ``specs``
    (slug -> ``AgentSpec.to_dict()``) where given; ``secrets`` (slug -> env) stay in the agent's
    memory, never in a file. Answered ``{"pids": {slug: pid}, "errors": {slug: why}}``."""

    OP = "start"
    tasks: tuple[str, ...]
    secrets: dict[str, dict[str, str]] = field(default_factory=dict)
    specs: dict[str, dict[str, Any]] | None = None

    def body(self) -> dict[str, Any]:
        obj: dict[str, Any] = {"op": self.OP}
        if self.specs is not None:
            obj["specs"] = self.specs
        obj.update(tasks=list(self.tasks), secrets=self.secrets)
        return obj


@dataclass(frozen=True)
class StopRequest(_Op):
    """Stop ``tasks`` (SIGTERM to each group, ``grace`` seconds or the task's own, SIGKILL) and
    answer once each wrote its final event: ``{"stopped": [...], "left": [...]}``; with ``exit``
    the agent then stops everything left and ends."""

    OP = "stop"
    tasks: tuple[str, ...]
    grace: float | None = None
    exit: bool = False

    def body(self) -> dict[str, Any]:
        return {"op": self.OP, "tasks": list(self.tasks), "grace": self.grace, "exit": self.exit}


@dataclass(frozen=True)
class StacksRequest(_Op):
    """Every (or these) task's stacks and process state, within ``timeout`` seconds:
    ``{"stacks": [TaskStacks JSON]}`` (``launcher/agent/stacks.py``)."""

    OP = "stacks"
    tasks: tuple[str, ...] = ()
    native: bool = False
    timeout: float | None = None

    def body(self) -> dict[str, Any]:
        return {"op": self.OP, "tasks": list(self.tasks), "native": self.native, "timeout": self.timeout}


@dataclass(frozen=True)
class StatusRequest(_Op):
    """The agent's pid and the tasks it supervises: ``{"pid", "tasks": {slug: {pid, done, adopted}}}``."""

    OP = "status"

    def body(self) -> dict[str, Any]:
        return {"op": self.OP}


AgentOp = Union[FollowRequest, StartRequest, StopRequest, StacksRequest, StatusRequest]


def _slugs(value: Any) -> tuple[str, ...]:
    return tuple(str(s) for s in value) if isinstance(value, list) else ()


def _seconds(value: Any) -> float | None:
    return float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else None


def _string_map(value: Any) -> dict[str, str]:
    return {str(k): str(v) for k, v in value.items()} if isinstance(value, dict) else {}


def read_request(obj: dict[str, Any], text: str) -> AgentOp | Malformed:
    """The request a JSON object (``text``, its line) is; a field of the wrong type reads as absent;
    an op this agent does not know is Malformed (answered with its why)."""
    op = obj.get("op")
    if op == StartRequest.OP:
        specs = obj.get("specs")
        written = {str(k): v for k, v in specs.items() if isinstance(v, dict)} if isinstance(specs, dict) else None
        secrets = obj.get("secrets")
        return StartRequest(_slugs(obj.get("tasks")) or tuple(written or ()),
                            {str(k): _string_map(v) for k, v in secrets.items()} if isinstance(secrets, dict) else {},
                            written)
    if op == StopRequest.OP:
        return StopRequest(_slugs(obj.get("tasks")), _seconds(obj.get("grace")), bool(obj.get("exit")))
    if op == StacksRequest.OP:
        return StacksRequest(_slugs(obj.get("tasks")), bool(obj.get("native")), _seconds(obj.get("timeout")))
    if op == FollowRequest.OP:
        offsets = obj.get("offsets")
        return FollowRequest({str(k): v for k, v in offsets.items() if int_or_none(v) is not None}
                             if isinstance(offsets, dict) else {}, bool(obj.get("pinged")))
    if op == StatusRequest.OP:
        return StatusRequest()
    return Malformed(text, "unknown request %r" % (op,), AgentRequest)


def _request_object(text: str) -> dict[str, Any] | Malformed:
    try:
        obj = json.loads(text)
    except ValueError as exc:
        return Malformed(text, "%s: %s" % (type(exc).__name__, exc), AgentRequest)
    if not isinstance(obj, dict):
        return Malformed(text, "a request is one JSON object", AgentRequest)
    return obj


def decode_request(line: bytes, op: str | None = None) -> AgentOp | Malformed:
    """A request alone on its line (the first line on the agent's socket); ``op``: what a line
    without one asks (the ``start`` verb's stdin)."""
    text = line.decode("utf-8", "replace")
    obj = _request_object(text)
    if isinstance(obj, Malformed):
        return obj
    if op is not None:
        obj.setdefault("op", op)
    return read_request(obj, text)


@dataclass(frozen=True)
class AgentRequest(Message):
    """A request on the stream and the ``id`` its answer carries back. ``request`` is Malformed
    where the line is a JSON object but no request the agent knows: answered with why, under its id."""

    request: AgentOp | Malformed
    id: int | None = None

    def line(self) -> str:
        if isinstance(self.request, Malformed):
            return self.request.line
        return json_line("", {**self.request.body(), "id": self.id}, separators=(",", ":"))


@dataclass(frozen=True)
class AgentAnswer(Message):
    """The host agent's answer to the request of ``id``."""

    MARKER = "#re"
    body: dict[str, Any]
    id: int | None = None

    def line(self) -> str:
        return json_line(self.MARKER, {**self.body, "id": self.id})


@dataclass(frozen=True)
class Heartbeat(Message):
    """The agent's time, every second (the launcher's silence check and clock offset); to the ms."""

    MARKER = "#hb"
    ts: float

    def line(self) -> str:
        return "%s %.3f" % (self.MARKER, self.ts)


@dataclass(frozen=True)
class Note(Message):
    """A task's condition the agent tells live followers only (it is in no file): its host cannot
    write the task's events (``active``), or writes them again."""

    MARKER = "#note"
    task: str
    condition: str
    active: bool
    reason: str = ""

    def line(self) -> str:
        return json_line(self.MARKER, {"task": self.task, "condition": self.condition, "active": self.active,
                                        "reason": self.reason})


@dataclass(frozen=True)
class Unwritten(Message):
    """An event (its JSON line) that its host could not write to its file: it moves no offset."""

    MARKER = "#unwritten"
    event: str

    def line(self) -> str:
        return "%s %s" % (self.MARKER, self.event)


@dataclass(frozen=True)
class Preempted(Message):
    """The host's ``preemption_notice`` command says the host is about to go: the job drains it."""

    MARKER = "#preempt"
    reason: str

    def line(self) -> str:
        return "%s %s" % (self.MARKER, self.reason)


# -- a launch's reach check, on the channel before it becomes the stream -------------------------


@dataclass(frozen=True)
class ReachRequest(Message):
    """The launcher's pairs for one host to connect to (``remote/reach.py`` builds them)."""

    MARKER = "#reach"
    targets: list[dict[str, Any]]

    def line(self) -> str:
        return json_line(self.MARKER, {"targets": self.targets})


@dataclass(frozen=True)
class ReachAnswer(Message):
    """The pairs that failed, or why the check could not run."""

    MARKER = "#reach"
    #: what the answer line starts with (``AgentChannel.ask`` waits for it)
    PREFIX = MARKER + " "
    failed: list[dict[str, Any]] = field(default_factory=list)
    error: str = ""

    def line(self) -> str:
        return json_line(self.MARKER, {"error": self.error} if self.error else {"failed": self.failed})


def _reach_answer(line: str, body: str) -> ReachAnswer | Malformed:
    obj = json_object(body)
    if obj is None:
        return Malformed(line, "a reach answer is one JSON object", ReachAnswer)
    failed = obj.get("failed")
    return ReachAnswer([f for f in failed if isinstance(f, dict)] if isinstance(failed, list) else [],
                       str(obj.get("error") or ""))


AgentMessage = Union[AgentAnswer, Heartbeat, Note, Unwritten, ReachAnswer, Preempted]


def decode_agent(line: str) -> AgentMessage | str | Malformed:
    """A line the launcher reads from an agent's stream (without its newline): a message, an
    event's JSON line (returned as it came: in the task's file, it moves the offset), or Malformed."""
    if not line.startswith("#"):
        return line if line else Malformed(line, "an empty line")
    word, body = split_marker(line)
    if word == Heartbeat.MARKER:
        try:
            return Heartbeat(float(body))
        except ValueError:
            return Malformed(line, "a heartbeat is a time", Heartbeat)
    if word == Unwritten.MARKER:
        return Unwritten(body)
    if word == AgentAnswer.MARKER:
        obj = json_object(body)
        if obj is None:
            return Malformed(line, "an answer is one JSON object", AgentAnswer)
        return AgentAnswer(obj, int_or_none(obj.pop("id", None)))
    if word == Note.MARKER:
        obj = json_object(body)
        if obj is None or "task" not in obj or "condition" not in obj:
            return Malformed(line, "a note is a JSON object with a task and a condition", Note)
        return Note(str(obj["task"]), str(obj["condition"]), bool(obj.get("active")), str(obj.get("reason") or ""))
    if word == ReachAnswer.MARKER:
        return _reach_answer(line, body)
    if word == Preempted.MARKER:
        return Preempted(body or "preemption notice")
    return Malformed(line, "an unknown marker")


def decode_agent_input(line: bytes) -> Ping | AgentRequest | ReachRequest | Malformed:
    """A line the agent reads from the launcher (without its newline): a ping, a request, a reach
    check's pairs, or Malformed (a request that does not parse is answered with an error)."""
    if not line:
        return Ping()
    text = line.decode("utf-8", "replace")
    if text.startswith("{"):
        request = _request_object(text)
        if isinstance(request, Malformed):
            return request
        request_id = int_or_none(request.pop("id", None))
        return AgentRequest(read_request(request, text), request_id)
    word, body = split_marker(text)
    if word == ReachRequest.MARKER:
        obj = json_object(body)
        targets = (obj.get("targets") or []) if obj is not None else None
        if not isinstance(targets, list):
            return Malformed(text, "not a JSON object with a list of targets", ReachRequest)
        return ReachRequest(targets)
    return Malformed(text, "not a request")
