"""How `distlaunch restart` and `down` in another terminal reach a live launcher.

The launcher listens on a Linux abstract unix socket named after the run id (no file to clean
up, no path-length limit); a request is one JSON line, the answer one JSON line.

Abstract sockets have no file permissions and every local user can see their names in
/proc/net/unix, so each connection's peer credentials (SO_PEERCRED, set by the kernel) are
checked: only the launcher's own user may act on the run.
"""

from __future__ import annotations

import contextlib
import json
import os
import socket
import struct
import threading
import time
from typing import Any

from launcher.stackcapture import record
from launcher.supervisor import Supervisor

ACTIONS = ("restart", "stop", "teardown", "detach", "stacks")
#: a request is one short JSON line; anything longer is not read
MAX_REQUEST = 64 * 1024


def _address(run_id: str) -> str:
    return f"\0distlaunch/{run_id}"


def peer_uid(conn: socket.socket) -> int:
    """The uid of the process at the other end of a connected unix socket, as the kernel saw it."""
    creds = conn.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, struct.calcsize("3i"))
    _pid, uid, _gid = struct.unpack("3i", creds)
    return int(uid)


class ControlServer:
    def __init__(self, run_id: str, control: Supervisor) -> None:
        self.control = control
        self._sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self._sock.bind(_address(run_id))
        self._sock.listen(8)
        self._closed = False
        self._thread = threading.Thread(target=self._serve, name="control", daemon=True)
        self._thread.start()

    def _serve(self) -> None:
        while not self._closed:
            try:
                conn, _ = self._sock.accept()
            except OSError:
                return
            conn.settimeout(5)
            request: dict[str, Any] = {}
            try:
                uid = peer_uid(conn)
                line = conn.makefile("r").readline(MAX_REQUEST)  # read first: closing early resets the peer
                if uid != os.getuid():
                    answer = {"ok": False, "error": f"refused: uid {uid} does not own this run"}
                else:
                    request = json.loads(line)
                    if request.get("action") == "stacks":  # seconds long: on a thread, the next request goes on
                        threading.Thread(target=self._stacks, args=(conn, request), name="control-stacks",
                                         daemon=True).start()
                        continue
                    answer = self._handle(request)
            except (OSError, ValueError, AttributeError) as exc:
                answer = {"ok": False, "error": str(exc)}
            _reply(conn, answer)

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
            reason = request.get("reason")
            self.control.teardown(reason if isinstance(reason, str) and reason else "torn down on request")
        elif action == "detach":
            self.control.detach()
        else:
            return {"ok": False, "error": f"unknown request {request!r}"}
        return {"ok": True}

    def close(self) -> None:
        self._closed = True
        with contextlib.suppress(OSError):
            self._sock.shutdown(socket.SHUT_RDWR)
        self._sock.close()


def _reply(conn: socket.socket, answer: dict[str, Any]) -> None:
    with conn, contextlib.suppress(OSError):
        conn.sendall((json.dumps(answer) + "\n").encode())


def send(run_id: str, action: str, task: str | None = None, reason: str | None = None,
         timeout: float = 5.0, **extra: Any) -> dict[str, Any] | None:
    """Ask the run's launcher to act (``extra``: more fields of the request, e.g. a stacks
    request's ``tasks``, ``native``, ``timeout``); None when no launcher is listening."""
    try:
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as sock:
            sock.settimeout(timeout)
            sock.connect(_address(run_id))
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
