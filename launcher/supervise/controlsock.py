"""How clients reach a run's supervisor: the dashboard, `--no-tui` and `attach` follow its
events here, and `distlaunch restart`, `stop`, `down` and `stacks` ask it to act.

The supervisor listens on a Linux abstract unix socket named after the run id (no file to clean
up, no path-length limit); a request is one JSON line, the answer one JSON line.

Abstract sockets have no file permissions and every local user can see their names in
/proc/net/unix, so each connection's peer credentials (SO_PEERCRED, set by the kernel) are
checked: only the launcher's own user may act on the run.
"""

from __future__ import annotations

import contextlib
import json
import os
import select
import socket
import struct
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from launcher import events as ev
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


def _address(run_id: str) -> str:
    return f"\0distlaunch/{run_id}"


def peer_uid(conn: socket.socket) -> int:
    """The uid of the process at the other end of a connected unix socket, as the kernel saw it."""
    creds = conn.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, struct.calcsize("3i"))
    _pid, uid, _gid = struct.unpack("3i", creds)
    return int(uid)


class ControlServer:
    """Serves each connection on a thread of its own: a slow or idle client (another user's too)
    never keeps the owner's requests waiting. ``exit_code(outcome)``: the code a follower of the
    whole job would exit with (the supervisor's stop signal, if one came)."""

    def __init__(self, run_id: str, control: Supervisor,
                 exit_code: Callable[[str | None], int] | None = None) -> None:
        self.control = control
        self._exit_code = exit_code or (lambda outcome: 0 if outcome == ev.JOB_SUCCEEDED else 1)
        self._sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self._sock.bind(_address(run_id))
        self._sock.listen(64)
        self._closed = False
        self._followers: list[threading.Thread] = []
        self._thread = threading.Thread(target=self._serve, name="control", daemon=True)
        self._thread.start()

    def _serve(self) -> None:
        while not self._closed:
            try:
                conn, _ = self._sock.accept()
            except OSError:
                return
            thread = threading.Thread(target=self._connection, args=(conn,), name="control-conn", daemon=True)
            self._followers = [t for t in self._followers if t.is_alive()] + [thread]
            thread.start()

    def _connection(self, conn: socket.socket) -> None:
        conn.settimeout(REQUEST_DEADLINE_S)
        try:
            uid = peer_uid(conn)
            line = conn.makefile("r").readline(MAX_REQUEST)  # read first: closing early resets the peer
            if uid != os.getuid():
                answer: dict[str, Any] = {"ok": False, "error": f"refused: uid {uid} does not own this run"}
            else:
                request = json.loads(line)
                if request.get("action") == "stacks":
                    self._stacks(conn, request)
                    return
                if request.get("action") == "follow":
                    self._follow(conn, history=request.get("history") is not False)
                    return
                answer = self._handle(request)
        except (OSError, ValueError, AttributeError) as exc:
            answer = {"ok": False, "error": str(exc)}
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
        with contextlib.suppress(OSError):
            self._sock.shutdown(socket.SHUT_RDWR)
        self._sock.close()
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


def _reply(conn: socket.socket, answer: dict[str, Any]) -> None:
    with conn, contextlib.suppress(OSError):
        conn.sendall((json.dumps(answer) + "\n").encode())


def connect(run_id: str, timeout: float = 5.0) -> socket.socket | None:
    """A connection to the run's supervisor; None when none listens, or when the socket's name
    is held by a process of another user (abstract names are anyone's to bind once freed)."""
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        sock.settimeout(timeout)
        sock.connect(_address(run_id))
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
