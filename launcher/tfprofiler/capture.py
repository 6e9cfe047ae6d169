"""One TensorFlow profiler capture of several tasks at the same moment.

Each task's profiler server was started by autolog on the port the plan gave it
(``DISTLAUNCH_PROFILER_PORT``, recorded as ``profiler_port`` in state.json). One call of
TensorFlow's profiler client with every task's address asks them all at once. Each *server*
writes its ``<logdir>/plugins/profile/<timestamp>/<address>_<port>.xplane.pb`` on its own host
(the layout ``tensorboard --logdir <logdir>`` opens); the files of tasks on other hosts are then
copied here (launcher/tfprofiler/fetch.py).

A port that does not speak the profiler must cost no more than the capture and a few seconds, and
say which task it was in one line (issue 49): each port is first connected to, and must greet as a
gRPC server does (nothing listening there, no route, or something else answering: said at once);
the client call itself runs in a process of its own (launcher/tfprofiler/tracer.py), importing
TensorFlow meanwhile, that is killed when its answer is late; TensorFlow's logs go to the
capture's ``profiler-client.log``, never to the user's terminal.
"""

from __future__ import annotations

import contextlib
import functools
import json
import math
import os
import re
import select
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from launcher.agent import netns
from launcher.errors import UserError
from launcher.plan import host_port
from launcher.tfprofiler.place import open_log

#: seconds a connection to a profiler port may take before the task is said unreachable
PROBE_TIMEOUT_S = 3.0
#: seconds the client may take beyond the capture's length (the servers write their files, answer)
TRACE_GRACE_S = 5.0
#: seconds files may take to appear after the client returned (servers that write after answering)
FILES_WAIT_S = 5.0
#: and after a late client was killed (the servers that answered may yet write)
LATE_FILES_WAIT_S = 2.0
#: seconds a task's profiler server may take to start once asked (autolog looks twice a second)
SERVER_START_S = 5.0
#: seconds TensorFlow may take to import in the client's process
IMPORT_TIMEOUT_S = 120.0
#: the client's log, in the capture folder
CLIENT_LOG = "profiler-client.log"
TRACER = str(Path(__file__).with_name("tracer.py"))
HINT = ("a task that has not imported TensorFlow yet, runs with autolog = false or has ended has no profiler "
        "server, and one on another host must be reachable from this machine at its TF_CONFIG address")
#: an HTTP/2 client's first bytes (RFC 9113 3.4) and an empty SETTINGS frame: a gRPC server answers
#: them with its own SETTINGS frame (type 4, stream 0)
_H2_PREFACE = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n" + bytes([0, 0, 0, 4, 0, 0, 0, 0, 0])
_H2_SETTINGS = 4
_MAX_ANSWER = 1 << 16
_LOG_TAIL = 1 << 20
#: TensorFlow's client logs, per server that gave no capture: "... <host:port> returned <status>"
_RETURNED = re.compile(r"\] (\S+) returned (.+)$")
#: and of each server that answered with an empty trace
_EMPTY = re.compile(r"No trace event is collected from (\S+)$")


@dataclass(frozen=True)
class Target:
    task: str
    host: str
    address: str
    port: int

    @property
    def service(self) -> str:
        return "grpc://" + self.endpoint

    @property
    def endpoint(self) -> str:
        return host_port(self.address, self.port)

    @property
    def file_name(self) -> str:
        """What TensorFlow's profiler server names its capture: the address as asked, and the port."""
        return f"{self.address}_{self.port}.xplane.pb"


@dataclass
class Outcome:
    """How the client call ended: ``done`` (it returned), ``failed`` (it raised), ``timeout`` (it was
    killed), ``died`` (it ended without an answer), ``unreached`` (no port could be connected to);
    and, per task, why it may have no capture (used for the tasks whose file does not appear)."""

    state: str
    reasons: dict[str, str] = field(default_factory=dict)
    #: the tasks the client asked (those whose port could be connected to)
    asked: list[str] = field(default_factory=list)

    @property
    def answered(self) -> bool:
        return self.state == "done"

    @property
    def files_wait_s(self) -> float:
        """How long files may still appear: a late client was killed, its servers may yet write."""
        return {"done": FILES_WAIT_S, "timeout": LATE_FILES_WAIT_S}.get(self.state, 0.0)


def _probe_one(target: Target, found: dict[str, str]) -> None:
    deadline = time.monotonic() + PROBE_TIMEOUT_S
    try:
        with socket.create_connection((target.address, target.port), timeout=PROBE_TIMEOUT_S) as conn:
            found[target.task] = _greeting(conn, deadline)
    except ConnectionRefusedError:
        found[target.task] = f"nothing listens there (connection refused); {HINT}"
    except TimeoutError:
        found[target.task] = f"no connection within {PROBE_TIMEOUT_S:g} s; {HINT}"
    except socket.gaierror as exc:
        found[target.task] = f"its address does not resolve on this machine ({exc.strerror}); {HINT}"
    except OSError as exc:
        found[target.task] = f"cannot connect ({exc.strerror or exc}); {HINT}"


def _greeting(conn: socket.socket, deadline: float) -> str:
    """"" when what answers on ``conn`` greets as a gRPC server does (an HTTP/2 SETTINGS frame, at
    once), else why it is no profiler server."""
    conn.sendall(_H2_PREFACE)
    head = b""
    try:
        while len(head) < 9:
            conn.settimeout(max(0.01, deadline - time.monotonic()))
            chunk = conn.recv(9 - len(head))
            if not chunk:
                return "it closes the connection at once: not a TensorFlow profiler server"
            head += chunk
    except TimeoutError:
        return (f"it accepts connections but says nothing within {PROBE_TIMEOUT_S:g} s: not a TensorFlow profiler "
                "server (one greets at once)")
    except OSError as exc:
        return f"it drops the connection ({exc.strerror or exc}): not a TensorFlow profiler server"
    if head[3] != _H2_SETTINGS or head[5:9] != b"\0\0\0\0":
        return f"what answers there is not a TensorFlow profiler server (it sent {head!r}...)"
    return ""


def probe(targets: list[Target]) -> dict[str, str]:
    """Why each target has no capture whose port cannot be connected to, or does not greet as a
    gRPC server (all at once, within ``PROBE_TIMEOUT_S`` and a second)."""
    found: dict[str, str] = {}
    threads = [threading.Thread(target=_probe_one, args=(t, found), daemon=True) for t in targets]
    for thread in threads:
        thread.start()
    deadline = time.monotonic() + PROBE_TIMEOUT_S + 1.0
    for thread in threads:
        thread.join(max(0.0, deadline - time.monotonic()))
    return {t.task: found.get(t.task, f"no connection within {PROBE_TIMEOUT_S:g} s; {HINT}")
            for t in targets if found.get(t.task) != ""}


def probe_until_up(targets: list[Target], within_s: float = SERVER_START_S) -> dict[str, str]:
    """``probe``, again while some port has nothing listening yet, for up to ``within_s``: a
    server starts only once the capture asked for it (autolog)."""
    deadline = time.monotonic() + within_s
    while True:
        reasons = probe(targets)
        waiting = [t for t in targets if reasons.get(t.task, "").startswith("nothing listens there")]
        if not waiting or time.monotonic() >= deadline:
            return reasons
        time.sleep(0.25)


def trace(targets: list[Target], folder: Path, seconds: float, start_s: float = 0.0,
          inside: int | None = None) -> Outcome:
    """Capture every target for ``seconds``; each server writes its file under ``folder`` on its host.
    Bounded by the capture's length and a few seconds once TensorFlow is imported; ``start_s``:
    how long servers just asked to start may take to listen. ``inside``: the pid of a member of
    the job's private network (its host agent): the ports are reached from in there."""
    limit = seconds + TRACE_GRACE_S
    log = open_log(folder, CLIENT_LOG)
    try:
        start = os.fstat(log).st_size
        client = _Client(folder, seconds, limit, log, inside)  # TensorFlow imports there while ports are checked
        try:
            if inside is None:
                reasons = probe_until_up(targets, start_s)
            else:
                reasons = dict(netns.run_in(inside, lambda: probe_until_up(targets, start_s)))
            live = [t for t in targets if t.task not in reasons]
            if not live:
                return Outcome("unreached", reasons, [])
            state, detail = client.trace(live)
        finally:
            client.end()
        said = _log_reasons(log, start)
    finally:
        os.close(log)
    log_path = folder / CLIENT_LOG
    for target in live:
        if target.endpoint in said:
            reasons[target.task] = said[target.endpoint]
        elif state == "failed":
            reasons[target.task] = f"TensorFlow's profiler client: {detail.rstrip('.')}; {HINT}"
        elif state == "timeout":
            reasons[target.task] = f"no answer within {limit:g} s for a {seconds:g} s capture" + (
                ": what listens there greets as a gRPC server but does not answer the profiler's request"
                if len(live) == 1 else " (TensorFlow's profiler client was still waiting for it or another task)")
        elif state == "died":
            reasons[target.task] = f"TensorFlow's profiler client ended without an answer ({detail}; see {log_path})"
    return Outcome(state, reasons, [t.task for t in live])


class _Client:
    """TensorFlow's profiler client (tracer.py) in its own process group, started at once."""

    def __init__(self, folder: Path, seconds: float, limit: float, log: int, inside: int | None = None) -> None:
        self.limit = limit
        alarm = math.ceil(IMPORT_TIMEOUT_S + PROBE_TIMEOUT_S + limit + 10)
        command = [sys.executable, "-P", TRACER, str(folder), str(max(1, int(seconds * 1000))), str(alarm)]
        env = {**os.environ, "TF_CPP_MIN_LOG_LEVEL": "0"}  # all of TensorFlow's words, in the log
        join = None if inside is None else functools.partial(netns.join, inside)
        self.proc = subprocess.Popen(command, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=log,
                                     start_new_session=True, env=env, close_fds=True, preexec_fn=join)
        assert self.proc.stdout is not None
        self.answers = _Answers(self.proc.stdout.fileno())

    def trace(self, live: list[Target]) -> tuple[str, str]:
        """Capture ``live``: the final state and its detail."""
        assert self.proc.stdin is not None
        try:
            first = self.answers.next(IMPORT_TIMEOUT_S)
            if first is None:
                return "died", f"TensorFlow did not import within {IMPORT_TIMEOUT_S:g} s"
            if first.get("state") == "noimport":
                raise UserError(f"distlaunch profile needs TensorFlow on this machine ({first.get('detail')}); "
                                "install it here (pip install tensorflow) to capture")
            if first.get("state") != "ready":
                return "died", f"it said {first.get('state')!r}"
            with contextlib.suppress(BrokenPipeError):
                self.proc.stdin.write((",".join(t.endpoint for t in live) + "\n").encode())
                self.proc.stdin.flush()
            answer = self.answers.next(self.limit)
        except EOFError:
            return "died", _how_it_ended(self.proc)
        if answer is None:
            return "timeout", ""
        state = str(answer.get("state"))
        return (state, str(answer.get("detail") or "")) if state in ("done", "failed") else ("died", state)

    def end(self) -> None:
        """The client's process group gone (killed if still there), and reaped: nothing left running."""
        if self.proc.poll() is None:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(self.proc.pid, signal.SIGKILL)
        self.proc.wait()
        for pipe in (self.proc.stdin, self.proc.stdout):
            if pipe is not None:
                with contextlib.suppress(OSError):
                    pipe.close()


def _how_it_ended(proc: subprocess.Popen[bytes]) -> str:
    try:
        code = proc.wait(timeout=5.0)
    except subprocess.TimeoutExpired:
        return "it stopped answering"
    if code < 0:
        with contextlib.suppress(ValueError):
            return f"killed by {signal.Signals(-code).name}"
        return f"killed by signal {-code}"
    return f"exit status {code}"


class _Answers:
    """The client's JSON lines, each within a deadline."""

    def __init__(self, fd: int) -> None:
        self.fd = fd
        self.buffer = b""

    def next(self, within_s: float) -> dict[str, Any] | None:
        """The next answer; None when none came within ``within_s``; EOFError when the client ended
        (or wrote something that is not an answer)."""
        deadline = time.monotonic() + within_s
        while b"\n" not in self.buffer:
            left = deadline - time.monotonic()
            if left <= 0 or not select.select([self.fd], [], [], left)[0]:
                return None
            chunk = os.read(self.fd, 4096)
            if not chunk or len(self.buffer) > _MAX_ANSWER:
                raise EOFError
            self.buffer += chunk
        line, self.buffer = self.buffer.split(b"\n", 1)
        try:
            answer = json.loads(line)
        except ValueError:
            raise EOFError from None
        if not isinstance(answer, dict):
            raise EOFError
        return answer


def _log_reasons(log: int, start: int) -> dict[str, str]:
    """What TensorFlow's client logged (since ``start``) of each server that gave no capture."""
    end = os.fstat(log).st_size
    begin = max(start, end - _LOG_TAIL)
    text = os.pread(log, end - begin, begin).decode("utf-8", "replace")
    said: dict[str, str] = {}
    for line in text.splitlines():
        found = _RETURNED.search(line)
        if found:
            said[found.group(1)] = (f"what answers there is not a TensorFlow profiler server, or it refused the "
                                    f"capture (TensorFlow: {found.group(2).strip()[:300]})")
            continue
        found = _EMPTY.search(line)
        if found:
            said.setdefault(found.group(1), "it answered with no trace: a gRPC server that is not a task's profiler "
                                            "server, or a task that ran nothing in those seconds")
    return said


@contextlib.contextmanager
def output_to_log(folder: Path) -> Iterator[None]:
    """This process's stdout and stderr (descriptors 1 and 2) to the capture's log meanwhile: what
    TensorFlow's C++ code prints as it loads and converts never reaches the user's terminal."""
    log = open_log(folder, CLIENT_LOG)
    sys.stdout.flush()
    sys.stderr.flush()
    saved = os.dup(1), os.dup(2)
    try:
        os.dup2(log, 1)
        os.dup2(log, 2)
        yield
    finally:
        sys.stdout.flush()
        sys.stderr.flush()
        os.dup2(saved[0], 1)
        os.dup2(saved[1], 2)
        for fd in (*saved, log):
            os.close(fd)


def local_files(logdir: Path) -> list[Path]:
    return sorted(logdir.glob("plugins/profile/*/*.xplane.pb"))


def match(targets: list[Target], files: list[Path]) -> dict[str, Path]:
    """Each target's file, by the exact name its server gives it (``<address>_<port>.xplane.pb``)."""
    by_name: dict[str, Path] = {}
    for path in files:
        by_name.setdefault(path.name, path)
    return {t.task: by_name[t.file_name] for t in targets if t.file_name in by_name}
