"""Events out of one task: the event file writer, and task output turned into events.

Stdlib-only, Python >= 3.9 (runs on hosts from the agent zipapp).
"""

from __future__ import annotations

import contextlib
import json
import math
import os
import threading
from typing import Any, Callable, Dict, List, Optional, Set

from launcher import events
from launcher.agent.agentlog import warn
from launcher.agent.metricregex import MetricRegexes
from launcher.agent.spec import AgentSpec
from launcher.protocol.agentlines import Note, Unwritten

MAX_LINE_BYTES = 1024 * 1024
MALFORMED_REPORT_EVERY = 100
# -- events out -------------------------------------------------------------------------------


class EventWriter:
    """The one writer of ``events.jsonl``: one line per event, whole or not at all, under one lock.

    Each event gets the next ``seq`` of its task, continuing the file's last one, so the numbers
    run gap-free across incarnations and any reader can tell a lost line. A line that cannot be
    written (a full disk) still uses its number: the gap is the truth, and once writing works
    again a log line says how many were lost and why. After ``close`` further events are
    dropped, so nothing follows the final state event.
    """

    def __init__(self, path: str, lock: Optional[Any] = None,
                 publish: Optional[Callable[[str, bytes], None]] = None) -> None:
        # the host agent shares one lock among its writers and publishes each written line to its
        # followers under it: a follower that joins sees every line either in the file or pushed
        self._lock = lock if lock is not None else threading.Lock()
        self._publish = publish
        self._slug = os.path.basename(os.path.dirname(os.path.abspath(path)))
        self._path = path
        self._seq = last_seq(path)
        self._fd: Optional[int] = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
        _end_partial_line(path, self._fd)
        self._failed = 0
        self._failure = ""

    def write(self, event: events.Event) -> None:
        with self._lock:
            if self._fd is None:
                return
            if self._failed and event.task is not None:
                told = events.log_event(event.run, event.task, "stderr",
                                        "distlaunch agent: %d event(s) could not be written to %s (%s); "
                                        "the task ran on" % (self._failed, self._path, self._failure))
                if self._append(told):
                    self._failed = 0
                    if self._publish is not None:
                        note = Note(event.task, "events_unwritten", False, "its host writes events again")
                        self._publish(self._slug, note.encode())
            self._append(event)

    def _append(self, event: events.Event) -> bool:
        assert self._fd is not None
        self._seq += 1
        event.data["seq"] = self._seq
        data = (event.to_json() + "\n").encode("utf-8")
        written = 0
        try:
            while written < len(data):
                written += os.write(self._fd, data[written:])
        except OSError as exc:
            if written:  # cut the partial line off, or the next line would be glued to it
                with contextlib.suppress(OSError):
                    os.ftruncate(self._fd, os.fstat(self._fd).st_size - written)
            if not self._failed:
                warn("agent: cannot write events to %s: %s" % (self._path, exc.strerror))
                self._tell_followers(event, exc)
            self._failed += 1
            self._failure = exc.strerror or str(exc)
            if self._publish is not None:  # live followers still get it, marked as in no file
                self._publish(self._slug, Unwritten(data[:-1].decode("utf-8")).encode())
            return False
        if self._publish is not None:
            self._publish(self._slug, data)
        return True

    def _tell_followers(self, event: events.Event, exc: OSError) -> None:
        """Once per failing spell: a ``Note`` line to the followers (it is in no file), so a
        launcher says at once that this task's events are being dropped, not only when writing
        works again and the gap in ``seq`` shows. Under the writers' lock, like a publish."""
        if self._publish is None or event.task is None:
            return
        note = Note(event.task, "events_unwritten", True,
                    "its host cannot write events to %s (%s): they reach a live launcher but are "
                    "not kept on the host; the task runs on" % (self._path, exc.strerror or exc))
        self._publish(self._slug, note.encode())

    def close(self) -> None:
        with self._lock:
            if self._fd is not None:
                os.close(self._fd)
                self._fd = None


def _end_partial_line(path: str, fd: int) -> None:
    """A writer killed mid-line left a partial last line: end it, so the next line stands alone."""
    with contextlib.suppress(OSError), open(path, "rb") as f:
        f.seek(0, os.SEEK_END)
        if f.tell() == 0:
            return
        f.seek(-1, os.SEEK_END)
        if f.read(1) != b"\n":
            os.write(fd, b"\n")


# -- task output ------------------------------------------------------------------------------


class OutputInterpreter:
    """Turns one line of task output into events: report lines, logs, regex metrics."""

    def __init__(self, spec: AgentSpec, emit: Callable[[events.Event], None]) -> None:
        self._spec = spec
        #: the newest step this task's metric events gave (a watched checkpoint's step)
        self.last_step: Optional[int] = None

        def emit_noting_step(event: events.Event) -> None:
            if isinstance(event, events.MetricEvent) and event.step is not None:
                self.last_step = event.step
            emit(event)

        self._emit = emit_noting_step
        self._lock = threading.Lock()
        self._malformed = 0
        self._regexes = MetricRegexes(spec.metrics)
        for name, error in self._regexes.invalid:
            emit(events.log_event(spec.run, spec.task, "stderr",
                                  "distlaunch agent: metrics regex %r is invalid (%s); ignored"
                                  % (name, error)))
        self._warned: Set[str] = set()  # regexes that matched without a number, warned once each
        self._gave_number: Set[str] = set()
        self._lines = 0
        # names an explicit report() or a regex has given: autolog's values for them are dropped
        self._explicit: Set[str] = set()

    def handle(self, stream: str, line: str) -> None:
        if line.startswith(events.REPORT_PREFIX):
            self._handle_report(stream, line[len(events.REPORT_PREFIX):])
            return
        self._emit(events.log_event(self._spec.run, self._spec.task, stream, line))
        if self._regexes:
            metric = self._regex_metric(line)
            if metric is not None:
                self._emit(metric)

    def finish(self) -> None:
        """At the task's end: say which regexes never gave a number from any of its lines."""
        if not self._regexes or not self._lines:
            return
        for name, pattern, _ in self._regexes.patterns:
            if name not in self._gave_number and name not in self._warned:
                self._emit(events.log_event(
                    self._spec.run, self._spec.task, "stderr",
                    "distlaunch agent: metrics regex %s = %r matched none of this task's %d output lines "
                    "(try it with `distlaunch check PROFILE --metrics-sample LOGFILE`)"
                    % (name, pattern, self._lines)))

    def _handle_report(self, stream: str, payload: str) -> None:
        spec = self._spec
        try:
            obj = json.loads(payload)
            if not isinstance(obj, dict):
                raise ValueError("not a JSON object")
            kind = obj.get("kind")
            if kind == "metric":
                values = obj.get("values") or {}
                if not isinstance(values, dict):
                    raise ValueError("metric values is not an object")
                step = obj.get("step")
                loss = obj.get("loss")
                if loss is None and events.nonfinite_label(obj.get("nonfinite_loss")):
                    loss = float(obj["nonfinite_loss"])  # report.py's NaN / Inf: JSON has none
                if obj.get("source") == "autolog":
                    explicit = self._explicit
                    step = None if "step" in explicit else step
                    loss = None if "loss" in explicit else loss
                    values = {k: v for k, v in values.items() if k not in explicit}
                    if step is None and loss is None and not values:
                        return
                else:
                    self._note_explicit(step, loss, values)
                event: events.Event = events.metric_event(spec.run, spec.task,
                                                          step=int(step) if step is not None else None,
                                                          loss=loss, values=values)
            elif kind == "placement":
                variables = obj.get("variables")
                if not isinstance(variables, list):
                    raise ValueError("placement variables is not a list")
                if obj.get("source") == "autolog":
                    if "placement" in self._explicit:
                        return
                else:
                    self._explicit.add("placement")
                event = events.placement_event(spec.run, spec.task, variables)
            elif kind == "checkpoint":
                event = _checkpoint_from_report(spec.run, spec.task, spec.host, spec.workdir, obj)
                # a script that announces the checkpoints of a directory itself is believed there:
                # autolog's line for the same save (it comes first, once per save) is dropped from
                # the second save on; autolog's lines of other directories go on
                mine = "checkpoint:" + str(getattr(event, "directory", ""))
                if obj.get("source") == "autolog":
                    if mine in self._explicit:
                        return
                else:
                    self._explicit.add(mine)
            else:
                raise ValueError("unknown kind %r" % (kind,))
        except (ValueError, TypeError) as exc:
            with self._lock:
                self._malformed += 1
                count = self._malformed
            if count % MALFORMED_REPORT_EVERY == 1:
                self._emit(events.log_event(
                    spec.run, spec.task, stream,
                    "distlaunch agent: malformed %sline ignored (%d so far): %s"
                    % (events.REPORT_PREFIX, count, exc)))
            return
        self._emit(event)

    def _note_explicit(self, step: Any, loss: Any, values: Dict[str, Any]) -> None:
        if step is not None:
            self._explicit.add("step")
        if loss is not None:
            self._explicit.add("loss")
        self._explicit.update(values)

    def _regex_metric(self, line: str) -> Optional[events.Event]:
        result = self._regexes.apply(line)
        with self._lock:
            self._lines += 1
            self._gave_number.update(result.matched)
            self._explicit.update(result.matched)
            new_misses = [m for m in result.misses if m.name not in self._warned]
            self._warned.update(m.name for m in new_misses)
        for miss in new_misses:
            self._emit(events.log_event(self._spec.run, self._spec.task, "stderr",
                                        "distlaunch agent: " + miss.message()))
        if not result.any_value:
            return None
        values = {k: v for k, v in result.values.items() if math.isfinite(v)}
        # a NaN or Inf loss goes on (as nonfinite_loss): the launcher raises nan_loss on it
        return events.metric_event(self._spec.run, self._spec.task, step=result.step, loss=result.loss,
                                   values=values)


def _decode_line(raw: bytes) -> str:
    text = raw.decode("utf-8", errors="replace").rstrip("\r")
    if "\r" in text:  # progress bars redraw with \r: keep what a terminal would show last
        parts = [p for p in text.split("\r") if p]
        text = parts[-1] if parts else ""
    return text


def read_lines(fd: int, stream: str, handle: Callable[[str, str], None]) -> None:
    """Read a pipe line by line until EOF; a line over MAX_LINE_BYTES is cut and the rest dropped.

    Raw ``os.read`` on a file descriptor this thread owns, not a buffered file object: a daemon
    thread blocked inside a buffered reader at exit aborts the interpreter, and a pipe held open
    by an escaped grandchild may never reach EOF.
    """
    pending = b""
    dropping = False
    try:
        while True:
            data = os.read(fd, 65536)
            if not data:
                break
            parts = (pending + data).split(b"\n")
            pending = parts.pop()
            for part in parts:
                if dropping:
                    dropping = False
                    continue
                _handled(handle, stream, _decode_line(part))
            if len(pending) > MAX_LINE_BYTES:
                if not dropping:
                    _handled(handle, stream, _decode_line(pending[:MAX_LINE_BYTES]) + " [line truncated]")
                dropping = True
                pending = b""
        if pending and not dropping:
            _handled(handle, stream, _decode_line(pending))
    except OSError:  # the pipe itself failed: nothing more can be read from it
        pass
    finally:
        with contextlib.suppress(OSError):
            os.close(fd)




def _handled(handle: Callable[[str, str], None], stream: str, line: str) -> None:
    """Whatever handling a line meets (a full disk under the event file or agent.log, a bug),
    the pipe is read on: a reader that stopped would leave the task blocked on a full pipe."""
    global _unhandled
    try:
        handle(stream, line)
    except Exception as exc:
        _unhandled += 1
        if _unhandled <= 10:  # a bug would say it on every line
            warn("agent: a line of %s output could not be handled: %r" % (stream, exc))


#: lines whose handling failed, in this agent (the first few are told in agent.log)
_unhandled = 0


def tail_lines(events_path: str) -> List[str]:
    """The complete lines of the last 256 KiB of an event file (none if it cannot be read)."""
    try:
        with open(events_path, "rb") as f:
            f.seek(0, os.SEEK_END)
            f.seek(max(0, f.tell() - 256 * 1024))
            data = f.read()
    except OSError:
        return []
    return data[: data.rfind(b"\n") + 1].decode("utf-8", "replace").splitlines()


def last_seq(events_path: str) -> int:
    """The ``seq`` of the file's last event, -1 for a new file (or one written without numbers)."""
    for line in reversed(tail_lines(events_path)):
        try:
            seq = json.loads(line).get("seq")
        except ValueError:
            continue
        return seq if isinstance(seq, int) else -1
    return -1


def last_state(events_path: str) -> Optional[str]:
    tail = tail_lines(events_path)
    for line in reversed(tail):
        if '"kind":"state"' not in line:
            continue
        try:
            return str(json.loads(line).get("state"))
        except ValueError:
            continue
    return None



def _checkpoint_from_report(run: str, task: str, host: str, workdir: str, obj: Dict[str, Any]) -> events.Event:
    """The ``checkpoint`` event of a task's report line (autolog's, or a script's own): a relative
    directory taken from the task's working directory, its numbers checked."""
    directory = obj.get("directory")
    if not isinstance(directory, str) or not directory:
        raise ValueError("checkpoint directory is not a path")
    files = obj.get("files") or []
    if not isinstance(files, list) or not all(isinstance(f, str) for f in files):
        raise ValueError("checkpoint files is not a list of names")

    def whole(name: str) -> Optional[int]:
        value = obj.get(name)
        if value is None:
            return None
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise ValueError("checkpoint %s is not a number" % name)
        return int(value)

    seconds = obj.get("seconds")
    if seconds is not None and (isinstance(seconds, bool) or not isinstance(seconds, (int, float))):
        raise ValueError("checkpoint seconds is not a number")
    where = os.path.normpath(os.path.join(workdir or "/", os.path.expanduser(directory)))
    event = events.checkpoint_event(run, task, where,
                                    step=whole("step"), epoch=whole("epoch"), files=files,
                                    nbytes=whole("bytes"), seconds=None if seconds is None else float(seconds),
                                    api=str(obj.get("api") or ""), host=host)
    problem = event.problem()
    if problem is not None:
        raise ValueError(problem)
    return event
