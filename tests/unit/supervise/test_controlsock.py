from __future__ import annotations

import contextlib
import json
import os
import secrets
import socket

import pytest

from launcher.supervise import controlsock

NOBODY = 65534


class RecordingControl:
    def __init__(self) -> None:
        self.calls: list[tuple[str, str | None]] = []

    def restart_task(self, task_id: str) -> None:
        self.calls.append(("restart", task_id))

    def stop_task(self, task_id: str) -> None:
        self.calls.append(("stop", task_id))

    def teardown(self, reason: str = "", origin: str = "") -> None:
        self.calls.append(("teardown", reason + (f" ({origin})" if origin else "")))


def test_requests_reach_the_launcher_and_unknown_ones_are_refused() -> None:
    run_id = f"t-{secrets.token_hex(4)}"
    control = RecordingControl()
    server = controlsock.ControlServer(run_id, control)  # type: ignore[arg-type]
    try:
        assert controlsock.send(run_id, "restart", "worker:1") == {"ok": True}
        assert controlsock.send(run_id, "teardown", reason="stopped by `distlaunch down`") == {"ok": True}
        assert controlsock.send(run_id, "teardown", reason="stopped by SIGTERM", origin="SIGTERM") == {"ok": True}
        answer = controlsock.send(run_id, "explode")
        assert answer is not None and answer["ok"] is False
    finally:
        server.close()
    assert control.calls == [("restart", "worker:1"), ("teardown", "stopped by `distlaunch down`"),
                             ("teardown", "stopped by SIGTERM (SIGTERM)")]
    assert controlsock.send(run_id, "restart", "worker:1") is None  # nobody listens any more


def _send_as(uid: int, run_id: str, action: str) -> dict[str, object] | None:
    """Connect from a forked child that became ``uid``: a real peer of another user."""
    read_end, write_end = os.pipe()
    pid = os.fork()
    if pid == 0:  # child: only syscalls and the client, then leave without cleanup handlers
        try:
            os.close(read_end)
            os.setgid(uid)
            os.setuid(uid)
            # a raw client: distlaunch's own would not talk to a listener of another uid at all
            with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as sock:
                sock.settimeout(5)
                sock.connect(f"\0distlaunch/{run_id}")
                sock.sendall((json.dumps({"action": action, "reason": "not yours"}) + "\n").encode())
                os.write(write_end, sock.makefile("rb").readline())
        finally:
            os._exit(0)
    os.close(write_end)
    with os.fdopen(read_end, "rb") as fh:
        data = fh.read()
    os.waitpid(pid, 0)
    answer: dict[str, object] | None = json.loads(data)
    return answer


@pytest.mark.skipif(os.geteuid() != 0, reason="needs root to connect as another user")
def test_a_connection_from_another_user_is_refused_and_changes_nothing() -> None:
    run_id = f"t-{secrets.token_hex(4)}"
    control = RecordingControl()
    server = controlsock.ControlServer(run_id, control)  # type: ignore[arg-type]
    try:
        answer = _send_as(NOBODY, run_id, "teardown")
        assert answer is not None and answer["ok"] is False and f"uid {NOBODY}" in str(answer["error"])
        assert controlsock.send(run_id, "restart", "worker:0") == {"ok": True}  # the owner still gets in
    finally:
        server.close()
    assert control.calls == [("restart", "worker:0")]


def test_idle_connections_do_not_keep_a_request_waiting() -> None:
    """Each connection is served on its own: six that never send a line (another user's, say)
    used to make `distlaunch restart` say that no launcher listens."""
    run_id = f"t-{secrets.token_hex(4)}"
    control = RecordingControl()
    server = controlsock.ControlServer(run_id, control)  # type: ignore[arg-type]
    idle = [controlsock.connect(run_id) for _ in range(6)]
    try:
        assert all(conn is not None for conn in idle)
        assert controlsock.send(run_id, "restart", "worker:0", timeout=2.0) == {"ok": True}
    finally:
        for conn in idle:
            if conn is not None:
                conn.close()
        server.close()
    assert control.calls == [("restart", "worker:0")]


@pytest.mark.skipif(os.geteuid() != 0, reason="needs root to listen as another user")
def test_a_socket_name_another_user_holds_is_not_trusted() -> None:
    """Abstract names are anyone's once freed: a client must not send its request (a teardown,
    a stacks request) to a listener of another uid."""
    run_id = f"t-{secrets.token_hex(4)}"
    ready_r, ready_w = os.pipe()
    pid = os.fork()
    if pid == 0:
        try:
            os.close(ready_r)
            os.setgid(NOBODY)
            os.setuid(NOBODY)
            with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as sock:
                sock.bind(f"\0distlaunch/{run_id}")
                sock.listen(4)
                os.write(ready_w, b"1")
                sock.settimeout(10)
                with contextlib.suppress(OSError):
                    conn, _ = sock.accept()
                    conn.settimeout(2)
                    os.write(ready_w, b"got:" + conn.recv(100))
        finally:
            os._exit(0)
    os.close(ready_w)
    with os.fdopen(ready_r, "rb") as fh:
        assert fh.read(1) == b"1"
        try:
            assert controlsock.send(run_id, "teardown", reason="not for you") is None
        finally:
            os.kill(pid, 9)
            os.waitpid(pid, 0)
        assert b"not for you" not in fh.read()
