"""Both line protocols as typed messages with their encoding: the one place a marker is written.

Every line is a JSON object, an event's JSON line, a ``#`` marker line or empty (a ping), UTF-8,
ended by a newline.

**The control socket**: a client (the dashboard, ``--no-tui``, ``--json``, ``attach``, ``down``,
``restart``, ``stacks``) and the run's supervisor, over a unix socket in a 0700 directory of the
user's (``socket_path``). The client sends one ``Request`` line; the supervisor answers one
``Answer`` line, except to ``follow``, which it answers with the follow stream::

    #hello {"run_id": ..., "supervisor_pid": ..., "launched": ...}   Hello
    <events.jsonl's lines up to the cut>                             the history (unless history=false)
    #live                                                            Live: the history is over
    <each event's JSON line as it is published>; #launched, once     Launched: every task was started
    #end {"outcome": ..., "exit_code": ...}                          End: the job ended (job_exit_code)
    or  #dropped <why>                                               Dropped: this client was let go

**The agent stream**: the launcher and a host agent's follower, on the host's one exec channel. The
launcher sends ``Ping`` (an empty line, every second) and ``AgentRequest`` lines (a JSON object
with ``op`` and ``id``); the agent sends its tasks' event lines and::

    #re {..., "id": ...}                              AgentAnswer: to the request of that id
    #hb <host time>                                   Heartbeat, every second
    #note {"task", "condition", "active", "reason"}   Note: a task's condition that is in no file
    #unwritten <event JSON>                           Unwritten: an event its host could not write
    #preempt <why>                                    Preempted: the host's preemption_notice fired

Before the channel becomes the stream, a launch's preflight sends each host ``#reach {"targets"}``
(``ReachRequest``), answered ``#reach {"failed"}`` or ``#reach {"error"}`` (``ReachAnswer``).

Decoding never raises: it gives the message, an event line as it came (a ``str``), or ``Malformed``
(an unknown marker, a body that does not parse), which readers skip: a newer peer's new marker is
ignored, never fatal. The bytes are those distlaunch wrote before this module existed, so a run's
supervisor or agents started by the previous version are understood, and understand.

Stdlib-only, Python >= 3.9 (the agent zipapp ships it).
"""

from __future__ import annotations

import json
import os
import re
from dataclasses import dataclass, field
from typing import Any, Union

from launcher.events import JOB_SUCCEEDED


def job_exit_code(outcome: str | None, stopped: int | None = None) -> int:
    """The exit-code rule, for the supervisor, ``up`` and every client that followed a job to its
    end: 0 when the job succeeded; else ``stopped``, the code of the stop signal that ended it
    (130 for SIGINT, 143 for SIGTERM) or the one the supervisor told; else 1."""
    if outcome == JOB_SUCCEEDED:
        return 0
    return stopped if stopped is not None else 1


# -- the control socket's address ------------------------------------------------------------------

#: the longest path a unix socket may have (sun_path, less its terminating NUL)
MAX_SOCKET_PATH = 107
_PLAIN_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,63}")


def socket_name(run_id: str) -> str:
    """The socket's file name: the run id where it is a plain name, else a hash of it."""
    if _PLAIN_NAME.fullmatch(run_id):
        return run_id + ".sock"
    import hashlib

    return hashlib.sha256(run_id.encode()).hexdigest()[:32] + ".sock"


def control_dirs(state_home: str) -> list[str]:
    """Where a run's socket may live, best first: each a 0700 directory of the user's."""
    import tempfile

    dirs = [os.path.join(state_home, "control")]
    runtime = os.environ.get("XDG_RUNTIME_DIR")
    if runtime and os.path.isabs(runtime):
        dirs.append(os.path.join(runtime, "distlaunch"))
    dirs.append(os.path.join(tempfile.gettempdir(), "distlaunch-%d" % os.getuid()))
    return dirs


def socket_path(run_id: str, state_home: str) -> str:
    """The run's control socket: in the first of ``control_dirs`` short enough for a socket path
    (client and supervisor share the environment, so both find the same one); where every one is
    too long, in the last (the supervisor then refuses to listen, saying why)."""
    name = socket_name(run_id)
    dirs = control_dirs(state_home)
    for directory in dirs:
        path = os.path.join(directory, name)
        if len(os.fsencode(path)) <= MAX_SOCKET_PATH:
            return path
    return os.path.join(dirs[-1], name)


# -- what every message shares ---------------------------------------------------------------------


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


def _json_line(marker: str, obj: dict[str, Any], separators: tuple[str, str] | None = None) -> str:
    return (marker + " " if marker else "") + json.dumps(obj, separators=separators)


def _object(text: str) -> dict[str, Any] | None:
    """``text`` as a JSON object, or None."""
    try:
        obj = json.loads(text)
    except ValueError:
        return None
    return obj if isinstance(obj, dict) else None


def _int(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def _split(line: str) -> tuple[str, str]:
    """A marker line's word (with its ``#``) and its body."""
    word, _, body = line.partition(" ")
    return word, body


# -- the control socket: a request and its answer ------------------------------------------------

#: what a client may ask of the supervisor
ACTIONS = ("restart", "stop", "teardown", "detach", "stacks", "follow", "drain")


@dataclass(frozen=True)
class Request(Message):
    """One request of a client. ``task``: restart, stop; ``reason`` and ``origin`` (the signal that
    asked, if one did): teardown; ``tasks`` (none: all), ``native`` and ``timeout_s``: stacks;
    ``history`` (the events before the connection too): follow; ``host`` and ``reason``: drain."""

    action: str
    task: str | None = None
    reason: str | None = None
    origin: str = ""
    tasks: tuple[str, ...] = ()
    native: bool = False
    timeout_s: float | None = None
    history: bool = True
    host: str | None = None

    def line(self) -> str:
        if self.action == "follow":
            return _json_line("", {"action": self.action, "history": self.history})
        obj: dict[str, Any] = {"action": self.action, "task": self.task, "reason": self.reason}
        if self.origin:
            obj["origin"] = self.origin
        if self.host is not None:
            obj["host"] = self.host
        if self.action == "stacks":
            obj.update(tasks=list(self.tasks), native=self.native, timeout_s=self.timeout_s)
        return _json_line("", obj)


def decode_request(line: bytes | str) -> Request | Malformed:
    """A client's request line; a field of the wrong type reads as absent."""
    text = line.decode("utf-8", "replace") if isinstance(line, bytes) else line
    obj = _object(text)
    if obj is None:
        return Malformed(text, "a request is one JSON object", Request)
    action, task, reason, origin = (obj.get(k) for k in ("action", "task", "reason", "origin"))
    tasks, timeout, host = obj.get("tasks"), obj.get("timeout_s"), obj.get("host")
    return Request(action if isinstance(action, str) else "", task if isinstance(task, str) else None,
                   reason if isinstance(reason, str) else None, origin if isinstance(origin, str) else "",
                   tuple(str(t) for t in tasks) if isinstance(tasks, list) else (), bool(obj.get("native")),
                   float(timeout) if isinstance(timeout, (int, float)) and not isinstance(timeout, bool) else None,
                   obj.get("history") is not False, host if isinstance(host, str) else None)


@dataclass(frozen=True)
class Answer(Message):
    """The supervisor's answer to a request other than ``follow``: ``ok``, or ``error`` saying why
    not; ``note`` (detach); ``stacks`` (TaskStacks JSON) and ``path`` (where they were kept)."""

    ok: bool
    error: str = ""
    note: str = ""
    stacks: list[dict[str, Any]] | None = None
    path: str | None = None

    def line(self) -> str:
        obj: dict[str, Any] = {"ok": self.ok}
        for key in ("error", "note"):
            if getattr(self, key):
                obj[key] = getattr(self, key)
        for key in ("stacks", "path"):
            if getattr(self, key) is not None:
                obj[key] = getattr(self, key)
        return _json_line("", obj)


def decode_answer(line: bytes | str) -> Answer | Malformed:
    text = line.decode("utf-8", "replace") if isinstance(line, bytes) else line
    obj = _object(text)
    if obj is None:
        return Malformed(text, "an answer is one JSON object", Answer)
    error, note, stacks, path = (obj.get(k) for k in ("error", "note", "stacks", "path"))
    return Answer(obj.get("ok") is True, str(error) if error else "", str(note) if note else "",
                  [s for s in stacks if isinstance(s, dict)] if isinstance(stacks, list) else None,
                  path if isinstance(path, str) else None)


# -- the control socket: the follow stream ---------------------------------------------------------


@dataclass(frozen=True)
class Hello(Message):
    """The follow stream's first line: whose stream this is, and whether its launch is over."""

    MARKER = "#hello"
    run_id: str
    supervisor_pid: int | None
    launched: bool

    def line(self) -> str:
        return _json_line(self.MARKER, {"run_id": self.run_id, "supervisor_pid": self.supervisor_pid,
                                        "launched": self.launched})


@dataclass(frozen=True)
class Live(Message):
    """The history is over: what follows is published as it happens."""

    MARKER = "#live"

    def line(self) -> str:
        return self.MARKER


@dataclass(frozen=True)
class Launched(Message):
    """The launch is over: every task was started (what ``up --detach`` waits for)."""

    MARKER = "#launched"

    def line(self) -> str:
        return self.MARKER


@dataclass(frozen=True)
class End(Message):
    """The job ended: its outcome (``Succeeded``, ``Failed``) and the exit code of a client that
    followed it (``job_exit_code``). Either may be None where the line did not say; the stream
    is over all the same."""

    MARKER = "#end"
    outcome: str | None
    exit_code: int | None

    def line(self) -> str:
        return _json_line(self.MARKER, {"outcome": self.outcome, "exit_code": self.exit_code})


@dataclass(frozen=True)
class Dropped(Message):
    """The supervisor let this client go (it fell behind, or the supervisor was busy): follow again."""

    MARKER = "#dropped"
    reason: str

    def line(self) -> str:
        return "%s %s" % (self.MARKER, self.reason)


FollowMessage = Union[Hello, Live, Launched, End, Dropped]


def decode_follow(line: str) -> FollowMessage | str | Malformed:
    """A line of the follow stream (its newline may be left on): a message, an event's JSON line
    (returned as it came), or Malformed. An ``#end`` whose body does not parse still ends the job's
    stream: it reads as ``End(None, None)``."""
    if not line.startswith("#"):
        return line
    word, body = _split(line.rstrip("\n"))
    if word == Live.MARKER:
        return Live()
    if word == Launched.MARKER:
        return Launched()
    if word == Dropped.MARKER:
        return Dropped(body)
    if word == End.MARKER:
        end = _object(body) or {}
        outcome = end.get("outcome")
        return End(outcome if isinstance(outcome, str) else None, _int(end.get("exit_code")))
    if word == Hello.MARKER:
        obj = _object(body)
        if obj is None:
            return Malformed(line, "a hello is one JSON object", Hello)
        run_id = obj.get("run_id")
        return Hello(run_id if isinstance(run_id, str) else "", _int(obj.get("supervisor_pid")),
                     bool(obj.get("launched")))
    return Malformed(line, "an unknown marker")


# -- the agent stream ------------------------------------------------------------------------------


@dataclass(frozen=True)
class Ping(Message):
    """The launcher still reads this stream (an empty line): the agent keeps the run's lease."""

    def line(self) -> str:
        return ""


@dataclass(frozen=True)
class AgentRequest(Message):
    """The launcher's request on a follow channel: ``body`` (``op``: start, stacks, stop, and its
    fields) and the ``id`` its answer carries back."""

    body: dict[str, Any]
    id: int | None = None

    def line(self) -> str:
        return _json_line("", {**self.body, "id": self.id}, separators=(",", ":"))


@dataclass(frozen=True)
class AgentAnswer(Message):
    """The host agent's answer to the request of ``id``."""

    MARKER = "#re"
    body: dict[str, Any]
    id: int | None = None

    def line(self) -> str:
        return _json_line(self.MARKER, {**self.body, "id": self.id})


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
        return _json_line(self.MARKER, {"task": self.task, "condition": self.condition, "active": self.active,
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
        return _json_line(self.MARKER, {"targets": self.targets})


@dataclass(frozen=True)
class ReachAnswer(Message):
    """The pairs that failed, or why the check could not run."""

    MARKER = "#reach"
    #: what the answer line starts with (``AgentChannel.ask`` waits for it)
    PREFIX = MARKER + " "
    failed: list[dict[str, Any]] = field(default_factory=list)
    error: str = ""

    def line(self) -> str:
        return _json_line(self.MARKER, {"error": self.error} if self.error else {"failed": self.failed})


def _reach_answer(line: str, body: str) -> ReachAnswer | Malformed:
    obj = _object(body)
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
    word, body = _split(line)
    if word == Heartbeat.MARKER:
        try:
            return Heartbeat(float(body))
        except ValueError:
            return Malformed(line, "a heartbeat is a time", Heartbeat)
    if word == Unwritten.MARKER:
        return Unwritten(body)
    if word == AgentAnswer.MARKER:
        obj = _object(body)
        if obj is None:
            return Malformed(line, "an answer is one JSON object", AgentAnswer)
        return AgentAnswer(obj, _int(obj.pop("id", None)))
    if word == Note.MARKER:
        obj = _object(body)
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
        try:
            obj = json.loads(text)
        except ValueError as exc:
            return Malformed(text, "%s: %s" % (type(exc).__name__, exc), AgentRequest)
        if not isinstance(obj, dict):
            return Malformed(text, "a request is one JSON object", AgentRequest)
        return AgentRequest(obj, _int(obj.pop("id", None)))
    word, body = _split(text)
    if word == ReachRequest.MARKER:
        obj = _object(body)
        targets = (obj.get("targets") or []) if obj is not None else None
        if not isinstance(targets, list):
            return Malformed(text, "not a JSON object with a list of targets", ReachRequest)
        return ReachRequest(targets)
    return Malformed(text, "not a request")
