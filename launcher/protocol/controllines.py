"""The control socket's line protocol, as typed messages: the one place its lines are written.

A client (the dashboard, ``--no-tui``, ``--json``, ``attach``, ``down``, ``restart``, ``stacks``)
and the run's supervisor talk over a unix socket in a 0700 directory of the user's
(``socket_path``). The client sends one ``Request`` line; the supervisor answers one ``Answer``
line, except to ``follow``, which it answers with the follow stream::

    #hello {"run_id": ..., "supervisor_pid": ..., "launched": ...}   Hello
    <events.jsonl's lines up to the cut>                             the history (unless history=false)
    #live                                                            Live: the history is over
    <each event's JSON line as it is published>; #launched, once     Launched: every task was started
    #end {"outcome": ..., "exit_code": ...}                          End: the job ended (job_exit_code)
    or  #dropped <why>                                               Dropped: this client was let go

What lines are, and how decoding treats a line that is no message: ``launcher/protocol/message.py``.
The agent stream (launcher and host agents) is ``launcher/protocol/agentlines.py``.

Stdlib-only, Python >= 3.9 (the agent zipapp ships the protocol package).
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from typing import Any, Union

from launcher.events import JOB_STOPPED, JOB_SUCCEEDED
from launcher.protocol.message import Malformed, Message, int_or_none, json_line, json_object, split_marker


def job_exit_code(outcome: str | None, stopped: int | None = None) -> int:
    """The exit-code rule, for the supervisor, ``up`` and every client that followed a job to its
    end: 0 when the job succeeded; else ``stopped``, the code of the stop signal that ended it
    (130 for SIGINT, 143 for SIGTERM) or the one the supervisor told; else 143 for a job
    Stopped without a signal (``down``, the dashboard): neither success nor failure; else 1."""
    if outcome == JOB_SUCCEEDED:
        return 0
    if stopped is not None:
        return stopped
    return 143 if outcome == JOB_STOPPED else 1


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


# -- the control socket: a request and its answer ------------------------------------------------

@dataclass(frozen=True)
class Request(Message):
    """One request of a client. ``task``: restart, stop; ``reason`` and ``origin`` (the signal that
    asked, if one did): teardown; ``tasks`` (none: all), ``native`` and ``timeout_s``: stacks;
    ``history`` (the events before the connection too): follow; ``host`` and ``reason``: drain;
    ``role`` and ``count``: resize."""

    action: str
    task: str | None = None
    reason: str | None = None
    origin: str = ""
    tasks: tuple[str, ...] = ()
    native: bool = False
    timeout_s: float | None = None
    history: bool = True
    host: str | None = None
    role: str | None = None
    count: int | None = None

    def line(self) -> str:
        if self.action == "follow":
            return json_line("", {"action": self.action, "history": self.history})
        obj: dict[str, Any] = {"action": self.action, "task": self.task, "reason": self.reason}
        if self.origin:
            obj["origin"] = self.origin
        if self.host is not None:
            obj["host"] = self.host
        if self.role is not None:
            obj.update(role=self.role, count=self.count)
        if self.action == "stacks":
            obj.update(tasks=list(self.tasks), native=self.native, timeout_s=self.timeout_s)
        return json_line("", obj)


def decode_request(line: bytes | str) -> Request | Malformed:
    """A client's request line; a field of the wrong type reads as absent."""
    text = line.decode("utf-8", "replace") if isinstance(line, bytes) else line
    obj = json_object(text)
    if obj is None:
        return Malformed(text, "a request is one JSON object", Request)
    action, task, reason, origin = (obj.get(k) for k in ("action", "task", "reason", "origin"))
    tasks, timeout, host = obj.get("tasks"), obj.get("timeout_s"), obj.get("host")
    role, count = obj.get("role"), obj.get("count")
    return Request(action if isinstance(action, str) else "", task if isinstance(task, str) else None,
                   reason if isinstance(reason, str) else None, origin if isinstance(origin, str) else "",
                   tuple(str(t) for t in tasks) if isinstance(tasks, list) else (), bool(obj.get("native")),
                   float(timeout) if isinstance(timeout, (int, float)) and not isinstance(timeout, bool) else None,
                   obj.get("history") is not False, host if isinstance(host, str) else None,
                   role if isinstance(role, str) else None,
                   count if isinstance(count, int) and not isinstance(count, bool) else None)


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
        return json_line("", obj)


def decode_answer(line: bytes | str) -> Answer | Malformed:
    text = line.decode("utf-8", "replace") if isinstance(line, bytes) else line
    obj = json_object(text)
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
        return json_line(self.MARKER, {"run_id": self.run_id, "supervisor_pid": self.supervisor_pid,
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
    """The job ended: its outcome (``Succeeded``, ``Failed``, ``Stopped``) and the exit code of a
    client that followed it (``job_exit_code``). Either may be None where the line did not say; the stream
    is over all the same."""

    MARKER = "#end"
    outcome: str | None
    exit_code: int | None

    def line(self) -> str:
        return json_line(self.MARKER, {"outcome": self.outcome, "exit_code": self.exit_code})


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
    word, body = split_marker(line.rstrip("\n"))
    if word == Live.MARKER:
        return Live()
    if word == Launched.MARKER:
        return Launched()
    if word == Dropped.MARKER:
        return Dropped(body)
    if word == End.MARKER:
        end = json_object(body) or {}
        outcome = end.get("outcome")
        return End(outcome if isinstance(outcome, str) else None, int_or_none(end.get("exit_code")))
    if word == Hello.MARKER:
        obj = json_object(body)
        if obj is None:
            return Malformed(line, "a hello is one JSON object", Hello)
        run_id = obj.get("run_id")
        return Hello(run_id if isinstance(run_id, str) else "", int_or_none(obj.get("supervisor_pid")),
                     bool(obj.get("launched")))
    return Malformed(line, "an unknown marker")
