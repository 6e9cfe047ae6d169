"""Why a task's incarnation failed, in plain words: the ``cause`` of its failed state event.

The launcher works it out when a failed state event comes from a host agent, from what it knows
then: the agent's evidence in the event (the signal, whether the kernel's OOM killer sent the
SIGKILL, the peak RSS), the last lines of the incarnation's output (``OutputTails``) and the plan
(every task's address:port and ``/job:J/task:N``, to name the culprit a message points at).

In order: a SIGKILL is told as the host saw it (no output explains it); a known signature
(launcher/telemetry/signatures.py) in plain words, naming the culprit where the failure lies with a peer; the
last Python traceback (its exception and the innermost frame of the user's own code); else the exit.

Where the failure lies with a peer, the peer row that names it wins over one that cannot, and a
specific one ("it stopped sending heartbeats") over the generic "lost contact", within the same
failure's output: an ``UnavailableError`` exception line matches the generic row, while the line
that says which task went silent may lie many lines away. What a stacks capture (a stall's, or
``distlaunch stacks``) last saw of the culprit's process is added when it was stopped or in disk
wait: the launcher has no other record of a task's /proc state.
"""

from __future__ import annotations

import itertools
import re
from collections import deque
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, replace
from typing import Any

from launcher import events as ev
from launcher.agent.stackmodel import STATE_WORDS, Frame, TaskStacks, is_library
from launcher.events import Event
from launcher.telemetry.gpufaults import GpuFault
from launcher.telemetry.jobview import LogLine, TaskLog
from launcher.telemetry.signatures import ADDRESS, SIGNATURES, TASK_NAME, Signature

TAIL_LINES = 200
"""Output lines kept per task on the launcher to find a failure's cause."""

PEER_CONTEXT_LINES = 10
"""Lines either side of a signature's line searched for the peer it is about."""

FAILURE_CONTEXT_LINES = 50
"""Lines before the last traceback that still belong to its failure (TensorFlow logs the error it
is about to raise just before the traceback): where a peer row there names the culprit, it wins over
the first row found if that one names none or says only "lost contact"."""

STATE_EVIDENCE_SECONDS = 120.0
"""How long a process state a stacks capture saw stays evidence: older, the peer may have been
continued since (the capture shows a state, not how long it lasted)."""

MESSAGE_CHARS = 120

_TRACEBACK = "Traceback (most recent call last):"
_FRAME = re.compile(r'^\s*File "(?P<file>[^"]+)", line (?P<line>\d+), in (?P<function>.*?)\s*$')
_EXCEPTION = re.compile(r"^(?P<type>[A-Za-z_][\w.]*)(?::\s?(?P<message>.*))?$")
_FUNCTION_NODE = re.compile(r"\{\{function_node [^}]*\}\}\s*")
_STATE_LETTERS = {word: letter for letter, word in STATE_WORDS.items()}
#: the states that explain a peer's silence, as the cause tells them
_EVIDENCE = {"T": "was stopped", "t": "was stopped by a tracer", "D": "was in disk wait"}


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


@dataclass(frozen=True)
class ProcState:
    """A task's process state as its agent's sampler or a stacks capture saw it: the /proc state
    letter, and when."""

    letter: str
    seen: float


class OutputTails:
    """What the launcher keeps of each task's current incarnation to explain a failure: its last
    `TAIL_LINES` output lines, the process state the latest stacks capture saw, and the latest
    fault of a GPU on each host (``note_gpu_fault``): a task that fails on a host whose GPU erred
    since the task started is said to have failed of it first."""

    def __init__(self) -> None:
        self._logs: dict[str, TaskLog] = {}
        self._starts: dict[str, int] = {}
        self._states: dict[str, ProcState] = {}
        self._started_at: dict[str, float] = {}
        self._gpu_faults: dict[str, GpuFault] = {}

    def _log(self, task: str) -> TaskLog:
        log = self._logs.get(task)
        if log is None:
            log = self._logs[task] = TaskLog(lines=deque(maxlen=TAIL_LINES))
        return log

    def add(self, event: Event) -> None:
        """Fold a task's event in: its log lines are kept, a start begins a new incarnation."""
        if event.task is None:
            return
        if isinstance(event, ev.LogEvent):
            self._log(event.task).add(LogLine(event.stream, event.line, event.ts))
        elif isinstance(event, ev.StateEvent) and event.state == ev.STARTING:
            self._starts[event.task] = self._log(event.task).total
            self._states.pop(event.task, None)  # a new process: the old one's state says nothing of it
            self._started_at[event.task] = event.ts
        elif isinstance(event, ev.SampleEvent) and event.proc_state:
            # the agent's sampler reads every task's process states each pass (T: a member stopped)
            self._states[event.task] = ProcState(event.proc_state, event.ts)

    def lines(self, task: str) -> list[str]:
        return [line.line for line in self._log(task).since(self._starts.get(task, 0))]

    def note_states(self, captures: Iterable[TaskStacks], seen: float) -> None:
        """The process states of a stacks capture taken at ``seen`` (unix time); a task whose host
        did not answer keeps what an earlier capture saw."""
        for capture in captures:
            letter = _STATE_LETTERS.get(capture.state)
            if letter is not None:
                self._states[capture.task] = ProcState(letter, seen)

    @property
    def states(self) -> Mapping[str, ProcState]:
        return self._states

    def note_gpu_fault(self, fault: GpuFault) -> None:
        self._gpu_faults[fault.host] = fault

    def gpu_fault(self, task: str, host: str | None) -> GpuFault | None:
        """The latest GPU fault of ``host`` since ``task``'s current incarnation started, if any."""
        fault = self._gpu_faults.get(host) if host else None
        if fault is None or fault.seen < self._started_at.get(task, 0.0):
            return None
        return fault


#: the agent's own reasons for a task that never ran its command: the cause as they say it
AGENT_REASONS = ("could not start", "container did not start")


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
    start: int = 0  # the index of its "Traceback (most recent call last):" line


def last_traceback(lines: list[str]) -> Traceback | None:
    """The last Python traceback in ``lines``: its exception and where in the user's code it arose.

    The place is the innermost frame that is the user's own (``stackmodel.is_library`` decides,
    as for stacks: not the stdlib, installed packages or distlaunch's autolog, report and agent,
    whose wrapper sits between a training loop and every ``tf.function`` it calls); only a
    traceback with no such frame names its innermost frame."""
    start = next((i for i in range(len(lines) - 1, -1, -1) if lines[i].strip() == _TRACEBACK), None)
    if start is None:
        return None
    frames: list[Frame] = []
    for i in range(start + 1, len(lines)):
        line = lines[i]
        found = _FRAME.match(line)
        if found:
            frames.append(Frame(found["function"], found["file"], int(found["line"])))
            continue
        if line[:1].isspace() or not line:
            continue
        exc = _EXCEPTION.match(line.strip())
        if exc is None:
            return None
        user = [f for f in frames if not is_library(f)] or frames
        name = user[-1].file.replace("\\", "/").rsplit("/", 1)[-1] if user else ""
        where = f"{name}:{user[-1].line}" if user else ""
        message = _FUNCTION_NODE.sub("", exc["message"] or "").strip().rstrip(":")  # "...error:" + more lines
        return Traceback(exc["type"].rsplit(".", 1)[-1], message, where, i, start)
    return None


def describe_traceback(tb: Traceback) -> str:
    """ "MemoryError at oom.py:3", "ValueError: bad shape at train.py:88"."""
    message = tb.message if len(tb.message) <= MESSAGE_CHARS else tb.message[:MESSAGE_CHARS - 3] + "..."
    what = f"{tb.exc_type}: {message}" if message else tb.exc_type
    return f"{what} at {tb.where}" if tb.where else what


@dataclass(frozen=True)
class _Finding:
    """A signature row that matched line ``line``, and the peer it names (peer rows)."""

    sig: Signature
    match: re.Match[str]
    line: int
    culprit: str | None

    @property
    def rank(self) -> tuple[bool, bool]:
        """Between peer rows: one that names the culprit first, then a specific one."""
        return self.culprit is not None, not self.sig.generic


def _peer_named(sig: Signature, match: re.Match[str], lines: list[str], i: int, peers: PeerIndex,
                task: str) -> str | None:
    """The task a peer row's line is about: for a ``listed`` row the first task of the list after
    the match (the rest of its line, then lines that are each a task's name), else, and when that
    list names none, the nearest line around it that names one."""
    texts: list[str] = []
    if sig.listed:
        following = lines[i + 1:i + 1 + PEER_CONTEXT_LINES]
        texts = [lines[i][match.end():], *itertools.takewhile(lambda t: t.strip().startswith("/job:"), following)]
    texts += lines[i:i + PEER_CONTEXT_LINES + 1] + lines[max(0, i - PEER_CONTEXT_LINES):i][::-1]
    return next((c for c in (peers.name(text, exclude=task) for text in texts) if c), None)


def _findings(lines: list[str], order: Iterable[int], peers: PeerIndex, task: str) -> Iterator[_Finding]:
    for i in order:
        for sig in SIGNATURES:
            match = sig.pattern.search(lines[i])
            if match is not None:
                yield _Finding(sig, match, i, _peer_named(sig, match, lines, i, peers, task) if sig.peer else None)


def signature_cause(lines: list[str], peers: PeerIndex, task: str, host: str,
                    first: int | None = None, since: int = 0) -> Cause | None:
    """The first signature found (line ``first`` first, then the newest line back), in plain words.

    When that is a peer row that names no culprit, or the generic "lost contact" row, the best peer
    row from line ``since`` on takes its place: one that names the culprit, then a specific one,
    then the first found (a row that cannot name the culprit never beats one that can)."""
    order = ([first] if first is not None else []) + [i for i in range(len(lines) - 1, -1, -1) if i != first]
    findings = _findings(lines, order, peers, task)
    found = next(findings, None)
    if found is None:
        return None
    if found.sig.peer and found.rank != (True, True):
        rivals = [f for f in findings if f.sig.peer and f.line >= since]
        found = max([found, *rivals], key=lambda f: f.rank)  # the first of the best: max keeps the earliest
    if found.sig.peer and found.culprit is None:
        return Cause(found.sig.fallback)
    fields = {k: v or "" for k, v in found.match.groupdict().items()}
    if fields.get("module"):
        fields["module"] = fields["module"].split(".")[0]
    return Cause(found.sig.template.format(culprit=found.culprit, host=host, **fields), found.culprit)


def state_evidence(culprit: str | None, states: Mapping[str, ProcState], at: float | None) -> str:
    """ "worker:1 was stopped, state T": what the agent's sampler (or a stacks capture) last saw of
    the culprit's process, when it was frozen and that is recent enough at ``at`` (the failure's
    time); else ""."""
    state = states.get(culprit) if culprit else None
    if state is None or state.letter not in _EVIDENCE:
        return ""
    if at is not None and abs(at - state.seen) > STATE_EVIDENCE_SECONDS:
        return ""
    return f"{culprit} {_EVIDENCE[state.letter]}, state {state.letter}"


def cause_of(data: Mapping[str, Any], lines: list[str], peers: PeerIndex, task: str,
             states: Mapping[str, ProcState] | None = None, at: float | None = None) -> Cause:
    """The cause of a failed incarnation from its state event's fields and its last output lines
    (and the process states stacks captures saw, ``states``, as of the failure's time ``at``)."""
    if data.get("signal") == "SIGKILL" or str(data.get("reason") or "").startswith(AGENT_REASONS):
        return Cause(exit_cause(data))
    tb = last_traceback(lines)
    since = max(0, (tb.start if tb is not None else len(lines)) - FAILURE_CONTEXT_LINES)
    found = signature_cause(lines, peers, task, str(data.get("host") or "?"),
                            tb.line_index if tb is not None else None, since)
    if found is not None:  # the signature says what in plain words; the evidence adds how, the traceback where
        evidence = state_evidence(found.culprit, states or {}, at)
        text = found.text + (f" ({evidence})" if evidence else "")
        where = f" ({tb.exc_type} at {tb.where})" if tb and tb.where else (f" ({tb.exc_type})" if tb else "")
        return Cause(text + where, found.culprit)
    if tb is not None:
        return Cause(describe_traceback(tb))
    return Cause(exit_cause(data))


def with_cause(event: Event, tails: OutputTails, peers: PeerIndex) -> Event:
    """A task's event folded into ``tails``; a failed state event comes back with its ``cause`` (and
    the ``culprit`` it names) added, as it is then recorded and published."""
    tails.add(event)
    if not isinstance(event, ev.StateEvent) or event.state != ev.FAILED or event.task is None or "cause" in event.data:
        return event
    cause = cause_of(event.data, tails.lines(event.task), peers, event.task, tails.states, event.ts)
    fault = tails.gpu_fault(event.task, event.host)
    text = f"{fault.text}; then {cause.text}" if fault is not None else cause.text
    data = {**event.data, "cause": text}
    if cause.culprit:
        data["culprit"] = cause.culprit
    return replace(event, data=data)
