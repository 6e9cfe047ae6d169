"""The supervisor's end of a run's control socket (a client's end is controlclient.py; the lines
both speak are launcher/protocol/controllines.py): the dashboard, `--no-tui` and `attach` follow its
events here, and `distlaunch restart`, `stop`, `down` and `stacks` ask it to act.

The supervisor listens on a unix socket named after the run id, a file in a 0700 directory of
the user's (``controlclient.socket_path``): under the state dir, or, where that path is too long
for a socket, in the user's private runtime dir. No other user can create, take or reach that
name; an abstract name would not do, since every local user sees those in /proc/net/unix and may
bind a freed one first. A request is one JSON line, the answer one JSON line.

Each connection's peer credentials (SO_PEERCRED, set by the kernel) are still checked before
anything is spent on it: only the launcher's own user may act on the run. A request must arrive
whole within REQUEST_DEADLINE_S, however slowly its bytes drip in.
"""

from __future__ import annotations

import contextlib
import os
import queue
import select
import socket
import stat
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Protocol

from launcher.agent.stackmodel import TaskStacks
from launcher.errors import UserError
from launcher.paths import private_state_dir, state_home
from launcher.privatedir import ensure_private_dir, open_trusted
from launcher.protocol import controllines
from launcher.protocol.controllines import MAX_SOCKET_PATH, Answer, Dropped, End, Hello, Live, Request
from launcher.rundir import EVENTS_FILE
from launcher.supervise.controlclient import peer_uid, socket_path
from launcher.supervise.core import LineFeed
from launcher.supervise.stackcapture import CaptureOwner, record

#: a request is one short JSON line; anything longer is not read
MAX_REQUEST = 64 * 1024
#: how long a connection may take to send its request: an idle one must not hold anything up
REQUEST_DEADLINE_S = 5.0
#: how long one send to a follower may wait (a client that stopped reading is let go)
SEND_TIMEOUT_S = float(os.environ.get("DISTLAUNCH_CLIENT_SEND_TIMEOUT") or 30.0)
#: connections whose request is still being read, at most: each holds a thread for its deadline
MAX_PENDING_REQUESTS = 32


class ControlListener:
    """The run's bound, listening socket and its file: ``close`` removes the file (if it is still
    the one bound here), so an ended supervisor leaves no name behind."""

    def __init__(self, sock: socket.socket, path: Path) -> None:
        self.sock = sock
        self.path = path
        self._bound = _inode(os.fspath(path))

    def close(self) -> None:
        with contextlib.suppress(OSError):
            self.sock.shutdown(socket.SHUT_RDWR)
        self.sock.close()
        if self._bound is not None and _inode(os.fspath(self.path)) == self._bound:
            with contextlib.suppress(OSError):
                os.unlink(self.path)
        self._bound = None


def listen(run_id: str) -> ControlListener:
    """Take the run's socket name for the supervisor (which holds the run's supervisor lock, so
    a socket left there is a dead supervisor's of this run): a listening socket, or one line
    saying why the supervisor cannot listen (UserError): it must not supervise blind."""
    path = socket_path(run_id)
    if len(os.fsencode(path)) > MAX_SOCKET_PATH:
        raise UserError(f"cannot listen for this run's clients: {path} is longer than a unix socket path may be "
                        f"({MAX_SOCKET_PATH} bytes); set DISTLAUNCH_HOME or TMPDIR to a shorter directory of yours")
    hint = ""
    if path.parent != state_home() / "control":
        variable = "TMPDIR" if path.parent.parent == Path(tempfile.gettempdir()) else "XDG_RUNTIME_DIR"
        hint = (f"; or set {variable} to a folder of yours (the run's control socket goes there, the state "
                "dir being too deep for a socket path)")
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        if path.parent == Path(controllines.control_dirs(os.fspath(state_home()))[0]):  # under the state dir
            private_state_dir()
        ensure_private_dir(path.parent, hint)
        with contextlib.suppress(FileNotFoundError):
            if stat.S_ISSOCK(os.lstat(path).st_mode):
                os.unlink(path)
        sock.bind(os.fspath(path))
        os.chmod(path, 0o600)
        sock.listen(64)
        return ControlListener(sock, path)
    except UserError:
        sock.close()
        raise
    except OSError as exc:
        sock.close()
        raise UserError(f"cannot listen for this run's clients on {path} ({exc.strerror or exc}); no dashboard, "
                        "`attach`, `down` or `restart` could reach the job, so it was not supervised: remove "
                        "what is in the way and run it again") from None


class Controlled(CaptureOwner, Protocol):
    """What the control server uses of the supervisor (supervisor.py): the follow stream's cut,
    the operator's actions and stacks; named here, so serving needs nothing else of it."""

    @property
    def outcome(self) -> str | None: ...
    def follow_from_now(self, timeout: float = ...) -> tuple[LineFeed, int, bool] | None: ...
    def unfollow(self, feed: LineFeed) -> None: ...
    def loop_ended(self) -> bool: ...
    def wait(self, timeout: float | None = None) -> str | None: ...
    def restart_task(self, task_id: str) -> None: ...
    def stop_task(self, task_id: str) -> None: ...
    def teardown(self, reason: str = ..., origin: str = ...) -> None: ...
    def drain(self, host: str, reason: str, timeout: float = ...) -> str | None: ...
    def resize(self, role: str, count: int, timeout: float = ...) -> str | None: ...
    def add_host(self, spec: str, timeout: float = ...) -> str | None: ...
    def capture_stacks(self, tasks: list[str] | None = None, native: bool = False,
                       timeout: float = ...) -> list[TaskStacks]: ...


class ControlServer:
    """Serves each connection of the owner on a thread of its own: a slow or idle client never
    keeps another's requests waiting, and a request must arrive whole within its deadline. Another
    user's connection is judged by its peer credentials before any thread is spent on it: one
    thread answers all refusals in turn. ``exit_code(outcome)``: the code a
    follower of the whole job would exit with (the supervisor's stop signal, if one came).
    ``listener``: the socket ``listen`` bound (taken early, before the hosts are prepared)."""

    def __init__(self, run_id: str, control: Controlled,
                 exit_code: Callable[[str | None], int] | None = None,
                 listener: ControlListener | None = None) -> None:
        self.control = control
        self._exit_code = exit_code or controllines.job_exit_code
        self._listener = listener if listener is not None else listen(run_id)
        self._sock = self._listener.sock
        self._closed = False
        self._followers: list[threading.Thread] = []
        self._pending = threading.BoundedSemaphore(MAX_PENDING_REQUESTS)
        self._refusals = _Refusals()
        self._thread = threading.Thread(target=self._serve, name="control", daemon=True)
        self._thread.start()

    def _serve(self) -> None:
        while not self._closed:
            try:
                conn, _ = self._sock.accept()
            except OSError:
                if self._closed:
                    return
                time.sleep(0.05)  # out of descriptors, say: the owner's next connection may get through
                continue
            try:
                self._admit(conn)
            except Exception:  # a thread that could not start, say: this connection only, never the loop
                conn.close()

    def _admit(self, conn: socket.socket) -> None:
        uid = peer_uid(conn)
        if uid != os.getuid():
            self._refusals.put(conn, f"refused: uid {uid} does not own this run")
            return
        if not self._pending.acquire(blocking=False):
            self._refusals.put(conn, "busy: too many requests under way; try again")
            return
        thread = threading.Thread(target=self._connection, args=(conn,), name="control-conn", daemon=True)
        try:
            thread.start()
        except BaseException:
            self._pending.release()
            raise
        self._followers = [t for t in self._followers if t.is_alive()] + [thread]

    def _connection(self, conn: socket.socket) -> None:
        try:
            try:
                line = _read_request(conn, time.monotonic() + REQUEST_DEADLINE_S)
            finally:
                self._pending.release()
            request = controllines.decode_request(line)
            if not isinstance(request, Request):
                answer = Answer(False, f"{request.why}: {request.line[:200]!r}")
            elif request.action == "stacks":
                self._stacks(conn, request)
                return
            elif request.action == "follow":
                self._follow(conn, history=request.history)
                return
            else:
                answer = self._handle(request)
        except (OSError, ValueError, AttributeError) as exc:
            answer = Answer(False, str(exc) or type(exc).__name__)
        _reply(conn, answer)

    def _follow(self, conn: socket.socket, history: bool) -> None:
        """A client (the dashboard, --no-tui, --json, attach): ``Hello``, the history (events.jsonl
        up to the cut), ``Live``, then every event as it is published and ``Launched`` once the
        launch is over, and last ``End`` (outcome, exit code). A client that stops reading is
        dropped once its feed holds MAX_BACKLOG batches (core.LineFeed) or a send has waited
        SEND_TIMEOUT_S; one that goes away is dropped at once. Nothing of the job waits for it."""
        sup = self.control
        cut = sup.follow_from_now()
        conn.settimeout(SEND_TIMEOUT_S)
        with conn:
            if cut is None:
                with contextlib.suppress(OSError):
                    if sup.loop_ended():  # the job is over: its whole history, then its end
                        self._send_ended(conn, history)
                    else:
                        conn.sendall(Dropped("the supervisor is busy; follow it again").encode())
                return
            feed, size, launched = cut
            gone = threading.Event()
            try:
                threading.Thread(target=_watch_client, args=(conn, feed, gone), name="control-client",
                                 daemon=True).start()
                conn.sendall(Hello(sup.run_id, os.getpid(), launched).encode())
                if history:
                    _send_history(conn, sup.rundir.path / EVENTS_FILE, size)
                conn.sendall(Live().encode())
                for batch in feed.batches():
                    conn.sendall(("\n".join(batch) + "\n").encode())
            except OSError:
                return  # the client went away (or stopped reading): nothing of the job depends on it
            finally:
                sup.unfollow(feed)
            with contextlib.suppress(OSError):
                if feed.dropped:
                    conn.sendall(Dropped("this client fell behind; follow it again").encode())
                elif not gone.is_set():
                    sup.wait()
                    self._send_end(conn)

    def _send_ended(self, conn: socket.socket, history: bool) -> None:
        sup = self.control
        conn.sendall(Hello(sup.run_id, os.getpid(), False).encode())
        if history:
            _send_history(conn, sup.rundir.path / EVENTS_FILE, None)
        conn.sendall(Live().encode())
        sup.wait()
        self._send_end(conn)

    def _send_end(self, conn: socket.socket) -> None:
        outcome = self.control.outcome
        conn.sendall(End(outcome, self._exit_code(outcome)).encode())

    def _stacks(self, conn: socket.socket, request: Request) -> None:
        try:
            captured_at = time.time()
            captures = self.control.capture_stacks(list(request.tasks) or None, request.native,
                                                   request.timeout_s if request.timeout_s is not None else 10.0)
            stacks = [c.to_json() for c in captures]
            path = None
            with contextlib.suppress(OSError):
                path = record(self.control, captures, captured_at)
            answer = Answer(True, stacks=stacks, path=path)
        except Exception as exc:  # the CLI says it; the launcher goes on
            answer = Answer(False, f"{type(exc).__name__}: {exc}")
        conn.settimeout(30)
        _reply(conn, answer)

    def _handle(self, request: Request) -> Answer:
        action, task = request.action, request.task
        if action == "restart" and task is not None:
            self.control.restart_task(task)
        elif action == "stop" and task is not None:
            self.control.stop_task(task)
        elif action == "teardown":
            self.control.teardown(request.reason or "torn down on request", request.origin)
        elif action == "drain" and request.host:
            refused = self.control.drain(request.host, request.reason or "drained by the user")
            if refused is not None:
                return Answer(False, refused)
        elif action == "resize" and request.role and request.count is not None:
            refused = self.control.resize(request.role, request.count)
            if refused is not None:
                return Answer(False, refused)
        elif action == "add_host" and request.host:
            refused = self.control.add_host(request.host)
            if refused is not None:
                return Answer(False, refused)
        elif action == "detach":  # a client leaving needs nothing of the supervisor: the job stays supervised
            return Answer(True, note="the supervisor goes on without clients")
        elif action in ("restart", "stop"):
            return Answer(False, f"{action} needs a task")
        else:
            return Answer(False, f"unknown request {action!r}")
        return Answer(True)

    def close(self, drain_s: float = 3.0) -> None:
        """Stop listening, then give the connections under way (the followers' ``End`` above
        all) up to ``drain_s`` to finish: the process may exit right after."""
        self._closed = True
        self._listener.close()
        deadline = time.monotonic() + drain_s
        for thread in list(self._followers):
            thread.join(max(0.0, deadline - time.monotonic()))


def _watch_client(conn: socket.socket, feed: LineFeed, gone: threading.Event) -> None:
    """A follower sends nothing after its request: end its feed as soon as it hangs up, so
    `status` stops counting it at once, not at the next event."""
    # wait with select, not recv: the socket's timeout (SEND_TIMEOUT_S, for sends) would end a
    # recv after that long of the client's normal silence, and with it the client's feed
    with contextlib.suppress(OSError, ValueError):
        while True:
            select.select([conn], [], [])
            if not conn.recv(4096):
                break
    gone.set()
    feed.close()


def _send_history(conn: socket.socket, path: Path, size: int | None) -> None:
    """events.jsonl's first ``size`` bytes (all of it when None), whole lines only."""
    try:
        fh = open_trusted(path, "the run's events")  # never a FIFO or a link planted there
    except (FileNotFoundError, UserError):
        return
    with fh:
        left = size if size is not None else -1
        pending = b""
        while left != 0:
            chunk = fh.read(1 << 20 if left < 0 else min(left, 1 << 20))
            if not chunk:
                break
            if left > 0:
                left -= len(chunk)
            data = pending + chunk
            cut = data.rfind(b"\n") + 1
            if cut:
                conn.sendall(data[:cut])
            pending = data[cut:]


def _inode(path: str) -> tuple[int, int] | None:
    try:
        st = os.lstat(path)
    except OSError:
        return None
    return (st.st_dev, st.st_ino)


def _read_request(conn: socket.socket, deadline: float) -> bytes:
    """The request line, read whole by ``deadline`` (a monotonic time) however slowly it comes:
    a client dripping a byte every few seconds is let go at the deadline, not kept for ever."""
    data = b""
    while b"\n" not in data and len(data) < MAX_REQUEST:
        left = deadline - time.monotonic()
        if left <= 0:
            raise TimeoutError("no whole request within the deadline")
        conn.settimeout(left)
        chunk = conn.recv(min(4096, MAX_REQUEST - len(data)))
        if not chunk:
            break
        data += chunk
    return data.split(b"\n", 1)[0]


class _Refusals:
    """One thread answers every refused connection in turn, each within REFUSAL_WAIT_S: another
    user's connections cost the supervisor one thread in all, however many they open. A backlog
    past MAX_PENDING_REQUESTS is closed unanswered."""

    def __init__(self) -> None:
        self._queue: queue.Queue[tuple[socket.socket, str]] = queue.Queue(MAX_PENDING_REQUESTS)
        self._thread: threading.Thread | None = None

    def put(self, conn: socket.socket, error: str) -> None:
        try:
            self._queue.put_nowait((conn, error))
        except queue.Full:
            conn.close()
            return
        if self._thread is None:
            self._thread = threading.Thread(target=self._run, name="control-refuse", daemon=True)
            self._thread.start()

    def _run(self) -> None:
        while True:
            conn, error = self._queue.get()
            _refuse(conn, error)


#: how long a refused connection is given to send its request before it is answered
REFUSAL_WAIT_S = 0.5


def _refuse(conn: socket.socket, error: str) -> None:
    """Read what the peer sends within REFUSAL_WAIT_S (closing on unread bytes would reset the
    connection before it read why), answer only if the answer fits in the socket's buffer, close."""
    with conn:
        deadline = time.monotonic() + REFUSAL_WAIT_S
        with contextlib.suppress(OSError, ValueError):
            while (left := deadline - time.monotonic()) > 0 and select.select([conn], [], [], left)[0]:
                chunk = conn.recv(MAX_REQUEST, socket.MSG_DONTWAIT)
                if not chunk or b"\n" in chunk:
                    break
        with contextlib.suppress(OSError):
            conn.send(Answer(False, error).encode(), socket.MSG_DONTWAIT)


def _reply(conn: socket.socket, answer: Answer) -> None:
    with conn, contextlib.suppress(OSError):
        conn.sendall(answer.encode())
