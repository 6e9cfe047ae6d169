"""How clients reach a run's supervisor: the dashboard, `--no-tui` and `attach` follow its
events here, and `distlaunch restart`, `stop`, `down` and `stacks` ask it to act.

The supervisor listens on a unix socket named after the run id, a file in a 0700 directory of
the user's (``socket_path``): under the state dir, or, where that path is too long for a socket,
in the user's private runtime dir. No other user can create, take or reach that name; an abstract
name would not do, since every local user sees those in /proc/net/unix and may bind a freed one
first. A request is one JSON line, the answer one JSON line.

Each connection's peer credentials (SO_PEERCRED, set by the kernel) are still checked before
anything is spent on it: only the launcher's own user may act on the run. A request must arrive
whole within REQUEST_DEADLINE_S, however slowly its bytes drip in.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import queue
import re
import select
import socket
import stat
import struct
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from launcher import events as ev
from launcher.errors import UserError
from launcher.paths import state_home
from launcher.privatedir import ensure_private_dir
from launcher.rundir import EVENTS_FILE
from launcher.supervise.core import LineFeed
from launcher.supervise.stackcapture import record
from launcher.supervise.supervisor import Supervisor

ACTIONS = ("restart", "stop", "teardown", "detach", "stacks", "follow")
#: a request is one short JSON line; anything longer is not read
MAX_REQUEST = 64 * 1024
#: how long a connection may take to send its request: an idle one must not hold anything up
REQUEST_DEADLINE_S = 5.0
#: how long one send to a follower may wait (a client that stopped reading is let go)
SEND_TIMEOUT_S = float(os.environ.get("DISTLAUNCH_CLIENT_SEND_TIMEOUT") or 30.0)


#: the longest path a unix socket may have (sun_path, less its terminating NUL)
MAX_SOCKET_PATH = 107
#: connections whose request is still being read, at most: each holds a thread for its deadline
MAX_PENDING_REQUESTS = 32
_PLAIN_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,63}")


def _socket_name(run_id: str) -> str:
    if _PLAIN_NAME.fullmatch(run_id):
        return f"{run_id}.sock"
    return hashlib.sha256(run_id.encode()).hexdigest()[:32] + ".sock"


def _control_dirs() -> list[Path]:
    """Where a run's socket may live, best first: each a 0700 directory of the user's."""
    dirs = [state_home() / "control"]
    runtime = os.environ.get("XDG_RUNTIME_DIR")
    if runtime and os.path.isabs(runtime):
        dirs.append(Path(runtime) / "distlaunch")
    dirs.append(Path(tempfile.gettempdir()) / f"distlaunch-{os.getuid()}")
    return dirs


def socket_path(run_id: str) -> Path:
    """The run's control socket: the first of ``_control_dirs`` short enough for a socket path
    (client and supervisor share the environment, so both find the same one)."""
    name = _socket_name(run_id)
    dirs = _control_dirs()
    for directory in dirs:
        if len(os.fsencode(directory / name)) <= MAX_SOCKET_PATH:
            return directory / name
    return dirs[-1] / name  # too long everywhere: listen() says so


def remove_stale(run_id: str) -> None:
    """Remove the run's socket where no supervisor listens on it any more (one killed outright
    could not remove it); a live one's is left alone."""
    path = socket_path(run_id)
    try:
        st = os.lstat(path)
    except OSError:
        return
    if not stat.S_ISSOCK(st.st_mode) or st.st_uid != os.getuid():
        return
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as probe:
        probe.settimeout(2.0)
        try:
            probe.connect(os.fspath(path))
        except ConnectionRefusedError:
            with contextlib.suppress(OSError):
                os.unlink(path)
        except OSError:
            pass


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
    hint = "; distlaunch keeps the run's control socket there"
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        if path.parent == state_home() / "control":
            path.parent.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
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


def peer_uid(conn: socket.socket) -> int:
    """The uid of the process at the other end of a connected unix socket, as the kernel saw it."""
    creds = conn.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, struct.calcsize("3i"))
    _pid, uid, _gid = struct.unpack("3i", creds)
    return int(uid)


class ControlServer:
    """Serves each connection of the owner on a thread of its own: a slow or idle client never
    keeps another's requests waiting, and a request must arrive whole within its deadline. Another
    user's connection is judged by its peer credentials before any thread is spent on it: one
    thread answers all refusals in turn. ``exit_code(outcome)``: the code a
    follower of the whole job would exit with (the supervisor's stop signal, if one came).
    ``listener``: the socket ``listen`` bound (taken early, before the hosts are prepared)."""

    def __init__(self, run_id: str, control: Supervisor,
                 exit_code: Callable[[str | None], int] | None = None,
                 listener: ControlListener | None = None) -> None:
        self.control = control
        self._exit_code = exit_code or (lambda outcome: 0 if outcome == ev.JOB_SUCCEEDED else 1)
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
            request = json.loads(line)
            if request.get("action") == "stacks":
                self._stacks(conn, request)
                return
            if request.get("action") == "follow":
                self._follow(conn, history=request.get("history") is not False)
                return
            answer = self._handle(request)
        except (OSError, ValueError, AttributeError) as exc:
            answer = {"ok": False, "error": str(exc) or type(exc).__name__}
        _reply(conn, answer)

    def _follow(self, conn: socket.socket, history: bool) -> None:
        """A client (the dashboard, --no-tui, --json, attach): a hello line, the history (events.jsonl
        up to the cut), ``#live``, then every event as it is published and ``#launched`` once the
        launch is over, and last ``#end {outcome, exit_code}``. A client that stops reading is
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
                        conn.sendall(b"#dropped the supervisor is busy; follow it again\n")
                return
            feed, size, launched = cut
            gone = threading.Event()
            try:
                threading.Thread(target=_watch_client, args=(conn, feed, gone), name="control-client",
                                 daemon=True).start()
                hello = {"run_id": sup.run_id, "supervisor_pid": os.getpid(), "launched": launched}
                conn.sendall(f"#hello {json.dumps(hello)}\n".encode())
                if history:
                    _send_history(conn, sup.rundir.path / EVENTS_FILE, size)
                conn.sendall(b"#live\n")
                for batch in feed.batches():
                    conn.sendall(("\n".join(batch) + "\n").encode())
            except OSError:
                return  # the client went away (or stopped reading): nothing of the job depends on it
            finally:
                sup.unfollow(feed)
            with contextlib.suppress(OSError):
                if feed.dropped:
                    conn.sendall(b"#dropped this client fell behind; follow it again\n")
                elif not gone.is_set():
                    sup.wait()
                    self._send_end(conn)

    def _send_ended(self, conn: socket.socket, history: bool) -> None:
        sup = self.control
        hello = {"run_id": sup.run_id, "supervisor_pid": os.getpid(), "launched": False}
        conn.sendall(f"#hello {json.dumps(hello)}\n".encode())
        if history:
            _send_history(conn, sup.rundir.path / EVENTS_FILE, None)
        conn.sendall(b"#live\n")
        sup.wait()
        self._send_end(conn)

    def _send_end(self, conn: socket.socket) -> None:
        outcome = self.control.outcome
        conn.sendall(f"#end {json.dumps({'outcome': outcome, 'exit_code': self._exit_code(outcome)})}\n".encode())

    def _stacks(self, conn: socket.socket, request: dict[str, Any]) -> None:
        tasks, timeout = request.get("tasks"), request.get("timeout_s")
        try:
            captured_at = time.time()
            captures = self.control.capture_stacks([str(t) for t in tasks] if isinstance(tasks, list) and tasks
                                                   else None, bool(request.get("native")),
                                                   float(timeout) if isinstance(timeout, int | float) else 10.0)
            answer = {"ok": True, "stacks": [c.to_json() for c in captures]}
            with contextlib.suppress(OSError):
                answer["path"] = record(self.control, captures, captured_at)
        except Exception as exc:  # the CLI says it; the launcher goes on
            answer = {"ok": False, "error": f"{type(exc).__name__}: {exc}"}
        conn.settimeout(30)
        _reply(conn, answer)

    def _handle(self, request: dict[str, Any]) -> dict[str, Any]:
        action, task = request.get("action"), request.get("task")
        if action == "restart" and isinstance(task, str):
            self.control.restart_task(task)
        elif action == "stop" and isinstance(task, str):
            self.control.stop_task(task)
        elif action == "teardown":
            reason, origin = request.get("reason"), request.get("origin")
            self.control.teardown(reason if isinstance(reason, str) and reason else "torn down on request",
                                  origin if isinstance(origin, str) else "")
        elif action == "detach":  # a client leaving needs nothing of the supervisor: the job stays supervised
            return {"ok": True, "note": "the supervisor goes on without clients"}
        else:
            return {"ok": False, "error": f"unknown request {request!r}"}
        return {"ok": True}

    def close(self, drain_s: float = 3.0) -> None:
        """Stop listening, then give the connections under way (the followers' ``#end`` above
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
        fh = path.open("rb")
    except FileNotFoundError:
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
            conn.send((json.dumps({"ok": False, "error": error}) + "\n").encode(), socket.MSG_DONTWAIT)


def _reply(conn: socket.socket, answer: dict[str, Any]) -> None:
    with conn, contextlib.suppress(OSError):
        conn.sendall((json.dumps(answer) + "\n").encode())


def connect(run_id: str, timeout: float = 5.0) -> socket.socket | None:
    """A connection to the run's supervisor; None when none listens, or when the socket is held
    by a process of another user (it cannot be, in a private directory; checked all the same)."""
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        sock.settimeout(timeout)
        sock.connect(os.fspath(socket_path(run_id)))
        if peer_uid(sock) != os.getuid():
            sock.close()
            return None
    except OSError:
        sock.close()
        return None
    return sock


def send(run_id: str, action: str, task: str | None = None, reason: str | None = None,
         timeout: float = 5.0, **extra: Any) -> dict[str, Any] | None:
    """Ask the run's supervisor to act (``extra``: more fields of the request, e.g. a stacks
    request's ``tasks``, ``native``, ``timeout``); None when no supervisor is listening."""
    conn = connect(run_id, timeout)
    if conn is None:
        return None
    try:
        with conn as sock:
            request = {"action": action, "task": task, "reason": reason, **extra}
            sock.sendall((json.dumps(request) + "\n").encode())
            line = sock.makefile("r").readline()
    except (ConnectionRefusedError, FileNotFoundError):
        return None
    except OSError:
        return None
    try:
        answer: dict[str, Any] = json.loads(line)
    except ValueError:
        return None
    return answer
