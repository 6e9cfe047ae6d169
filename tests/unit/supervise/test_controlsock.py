from __future__ import annotations

import contextlib
import json
import os
import secrets
import socket
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from launcher.errors import UserError
from launcher.protocol.controllines import Answer, Request
from launcher.supervise import controlclient, controlsock

NOBODY = 65534
OK = Answer(True)


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
        assert controlclient.ask(run_id, Request("restart", task="worker:1")) == OK
        assert controlclient.ask(run_id, Request("teardown", reason="stopped by `distlaunch down`")) == OK
        assert controlclient.ask(run_id, Request("teardown", reason="stopped by SIGTERM", origin="SIGTERM")) == OK
        answer = controlclient.ask(run_id, Request("explode"))
        assert answer is not None and answer.ok is False
    finally:
        server.close()
    assert control.calls == [("restart", "worker:1"), ("teardown", "stopped by `distlaunch down`"),
                             ("teardown", "stopped by SIGTERM (SIGTERM)")]
    assert controlclient.ask(run_id, Request("restart", task="worker:1")) is None  # nobody listens any more


@contextlib.contextmanager
def _opened(path: Path, mode: int) -> Iterator[None]:
    """``path`` at ``mode`` and every folder above it passable by every user, for a moment."""
    changed = []
    for item, want in [(path, None), *((folder, 0o011) for folder in path.parents)]:
        was = os.stat(item).st_mode & 0o7777
        new = mode if want is None else was | want
        if new != was:
            changed.append((item, was))
            os.chmod(item, new)
    try:
        yield
    finally:
        for item, was in changed:
            os.chmod(item, was)


@contextlib.contextmanager
def _reachable_by_all(run_id: str) -> Iterator[None]:
    """Open the private socket dir (and the socket) to every user for a moment: what the server
    itself does with another user's connection can then be tested (the dir alone keeps them out)."""
    with _opened(controlclient.socket_path(run_id), 0o666):
        yield


def _as_user(uid: int, body: object) -> bytes:
    """Run ``body(write)`` in a forked child that became ``uid``; what it wrote."""
    read_end, write_end = os.pipe()
    pid = os.fork()
    if pid == 0:
        try:
            os.close(read_end)
            os.setgid(uid)
            os.setuid(uid)
            body(lambda data: os.write(write_end, data))  # type: ignore[operator]
        except BaseException as exc:  # the parent reads why
            os.write(write_end, f"error: {type(exc).__name__}: {exc}".encode())
        finally:
            os._exit(0)
    os.close(write_end)
    with os.fdopen(read_end, "rb") as fh:
        data = fh.read()
    os.waitpid(pid, 0)
    return data


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
                sock.connect(str(controlclient.socket_path(run_id)))
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
        with _reachable_by_all(run_id):
            answer = _send_as(NOBODY, run_id, "teardown")
        assert answer is not None and answer["ok"] is False and f"uid {NOBODY}" in str(answer["error"])
        assert controlclient.ask(run_id, Request("restart", task="worker:0")) == OK  # the owner still gets in
    finally:
        server.close()
    assert control.calls == [("restart", "worker:0")]


def test_idle_connections_do_not_keep_a_request_waiting() -> None:
    """Each connection is served on its own: six that never send a line (another user's, say)
    used to make `distlaunch restart` say that no launcher listens."""
    run_id = f"t-{secrets.token_hex(4)}"
    control = RecordingControl()
    server = controlsock.ControlServer(run_id, control)  # type: ignore[arg-type]
    idle = [controlclient.connect(run_id) for _ in range(6)]
    try:
        assert all(conn is not None for conn in idle)
        assert controlclient.ask(run_id, Request("restart", task="worker:0"), timeout=2.0) == OK
    finally:
        for conn in idle:
            if conn is not None:
                conn.close()
        server.close()
    assert control.calls == [("restart", "worker:0")]


@pytest.mark.skipif(os.geteuid() != 0, reason="needs root to act as another user")
def test_another_user_cannot_even_reach_the_socket() -> None:
    """The socket is a file in a 0700 directory of the owner's: another user's connect fails in
    the kernel, before the supervisor sees anything."""
    run_id = f"t-{secrets.token_hex(4)}"
    server = controlsock.ControlServer(run_id, RecordingControl())  # type: ignore[arg-type]
    path = str(controlclient.socket_path(run_id))

    def connect(write: object) -> None:
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as sock:
            try:
                sock.connect(path)
            except PermissionError:
                write(b"denied")  # type: ignore[operator]
            else:
                write(b"connected")  # type: ignore[operator]

    try:
        assert _as_user(NOBODY, connect) == b"denied"
        assert os.stat(controlclient.socket_path(run_id).parent).st_mode & 0o777 == 0o700
    finally:
        server.close()
    assert not os.path.exists(path)  # the name goes with the server


def _listening_as_other_user(address: str) -> tuple[int, int]:
    """A forked child that became uid NOBODY listens at ``address``: its pid, and a pipe on which
    it writes "1" once listening, then "got:" and what a connection sent it, if one came."""
    ready_r, ready_w = os.pipe()
    pid = os.fork()
    if pid == 0:
        try:
            os.close(ready_r)
            os.setgid(NOBODY)
            os.setuid(NOBODY)
            with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as sock:
                sock.bind(address)
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
    return pid, ready_r


@pytest.mark.skipif(os.geteuid() != 0, reason="needs root to listen as another user")
def test_the_abstract_name_another_user_holds_takes_nothing_from_the_owner() -> None:
    """Run ids are visible to every user: the abstract name distlaunch once used, bound first by
    another user, made the supervisor run without a socket and its clients hang."""
    run_id = f"t-{secrets.token_hex(4)}"
    pid, ready_r = _listening_as_other_user(f"\0distlaunch/{run_id}")
    control = RecordingControl()
    with os.fdopen(ready_r, "rb") as fh:
        assert fh.read(1) == b"1"
        try:
            server = controlsock.ControlServer(run_id, control)  # type: ignore[arg-type]
            try:
                assert controlclient.ask(run_id, Request("teardown", reason="for the owner")) == OK
            finally:
                server.close()
        finally:
            os.kill(pid, 9)
            os.waitpid(pid, 0)
        assert b"for the owner" not in fh.read()
    assert control.calls == [("teardown", "for the owner")]


@pytest.mark.skipif(os.geteuid() != 0, reason="needs root to listen as another user")
def test_a_socket_another_user_holds_is_not_trusted() -> None:
    """Should a listener of another uid ever sit at the run's path, a client must not send it its
    request (a teardown, a stacks request)."""
    run_id = f"t-{secrets.token_hex(4)}"
    path = controlclient.socket_path(run_id)
    controlsock.listen(run_id).close()  # makes the private dir
    opened = _opened(path.parent, 0o777)  # for a moment, so that the other uid can bind there
    opened.__enter__()
    pid, ready_r = _listening_as_other_user(str(path))
    with os.fdopen(ready_r, "rb") as fh:
        assert fh.read(1) == b"1"
        opened.__exit__(None, None, None)
        try:
            assert controlclient.ask(run_id, Request("teardown", reason="not for you")) is None
        finally:
            os.kill(pid, 9)
            os.waitpid(pid, 0)
        assert b"not for you" not in fh.read()
    os.unlink(path)


def test_a_control_dir_another_user_owns_is_refused_in_one_line(tmp_path: Path,
                                                                monkeypatch: pytest.MonkeyPatch) -> None:
    """Where the socket goes under a shared /tmp, a folder planted there first is refused with the
    fix, never used (it would receive the owner's socket) and never a hang."""
    shared = tmp_path / "shared"
    shared.mkdir(mode=0o1777)
    os.chmod(shared, 0o1777)
    monkeypatch.setenv("DISTLAUNCH_HOME", str(tmp_path / ("d" * 120)))  # too deep for a socket path
    monkeypatch.delenv("XDG_RUNTIME_DIR", raising=False)
    monkeypatch.setenv("TMPDIR", str(shared))
    import tempfile
    monkeypatch.setattr(tempfile, "tempdir", None)
    planted = shared / f"distlaunch-{os.getuid()}"
    planted.mkdir(mode=0o777)
    os.chmod(planted, 0o777)
    run_id = f"t-{secrets.token_hex(4)}"
    assert controlclient.socket_path(run_id).parent == planted
    with pytest.raises(UserError) as refused:
        controlsock.listen(run_id)
    assert str(planted) in str(refused.value) and "\n" not in str(refused.value)
    assert not (planted / f"{run_id}.sock").exists()


def test_a_request_must_arrive_whole_within_its_deadline(monkeypatch: pytest.MonkeyPatch) -> None:
    """The deadline is per request, not per read: connections dripping a byte now and then were
    kept (a thread each) for as long as they kept dripping."""
    monkeypatch.setattr(controlsock, "REQUEST_DEADLINE_S", 1.0)
    run_id = f"t-{secrets.token_hex(4)}"
    server = controlsock.ControlServer(run_id, RecordingControl())  # type: ignore[arg-type]
    before = threading.active_count()
    slow = [controlclient.connect(run_id) for _ in range(8)]
    try:
        assert all(conn is not None for conn in slow)
        ended: set[int] = set()
        deadline = time.monotonic() + 6.0
        while len(ended) < len(slow) and time.monotonic() < deadline:
            for i, conn in enumerate(slow):
                if i in ended or conn is None:
                    continue
                try:
                    conn.sendall(b"{")
                    conn.settimeout(0.01)
                    if conn.recv(4096) == b"":
                        ended.add(i)
                except (BlockingIOError, TimeoutError):
                    pass
                except OSError:
                    ended.add(i)
            time.sleep(0.25)  # the client's own drip rate, well under the deadline
        assert len(ended) == len(slow), "slow connections were kept past the request deadline"
        assert threading.active_count() <= before + 2
    finally:
        for conn in slow:
            if conn is not None:
                conn.close()
        server.close()


@pytest.mark.skipif(os.geteuid() != 0, reason="needs root to connect as another user")
def test_another_users_connections_cost_no_thread_each() -> None:
    """50 connections of another user that drip their request: judged by their credentials
    first, they are answered by one thread in turn, and the owner still gets in at once."""
    run_id = f"t-{secrets.token_hex(4)}"
    control = RecordingControl()
    server = controlsock.ControlServer(run_id, control)  # type: ignore[arg-type]
    before = threading.active_count()
    path = str(controlclient.socket_path(run_id))
    go_r, go_w = os.pipe()

    def flood(write: object) -> None:
        socks = []
        for _ in range(50):
            sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            sock.connect(path)
            sock.send(b"{")
            socks.append(sock)
        write(b"connected")  # type: ignore[operator]
        os.read(go_r, 1)  # hold them open until the parent has counted

    try:
        with _reachable_by_all(run_id):
            child = threading.Thread(target=lambda: flood_result.append(_as_user(NOBODY, flood)))
            flood_result: list[bytes] = []
            child.start()
            deadline = time.monotonic() + 10
            peak = threading.active_count()
            while time.monotonic() < deadline and not flood_result and child.is_alive():
                peak = max(peak, threading.active_count())
                if os.path.exists(path):
                    assert controlclient.ask(run_id, Request("restart", task="worker:0"), timeout=5.0) == OK
                    break
            time.sleep(0.5)
            peak = max(peak, threading.active_count())
            os.write(go_w, b"x")
            child.join(30)
        assert peak <= before + 3, f"{peak - before} threads for another user's connections"
        assert control.calls == [("restart", "worker:0")]
    finally:
        os.close(go_w)
        os.close(go_r)
        server.close()


def test_the_accept_loop_survives_a_thread_that_cannot_start(monkeypatch: pytest.MonkeyPatch) -> None:
    run_id = f"t-{secrets.token_hex(4)}"
    control = RecordingControl()
    server = controlsock.ControlServer(run_id, control)  # type: ignore[arg-type]
    failures: list[str] = []

    class Failing(threading.Thread):
        def start(self) -> None:
            if not failures:
                failures.append(self.name)
                raise RuntimeError("can't start new thread")
            super().start()

    monkeypatch.setattr(controlsock.threading, "Thread", Failing)
    try:
        assert controlclient.ask(run_id, Request("restart", task="worker:0"), timeout=2.0) is None
        assert failures == ["control-conn"]
        assert controlclient.ask(run_id, Request("restart", task="worker:1"), timeout=5.0) == OK
    finally:
        server.close()
    assert control.calls == [("restart", "worker:1")]


def test_a_dead_supervisors_socket_is_removed_and_a_live_one_kept() -> None:
    """A supervisor killed outright cannot remove its socket: the next supervisor of the run takes
    the name over, and prune removes it; a live supervisor's socket is never removed."""
    run_id = f"t-{secrets.token_hex(4)}"
    dead = controlsock.listen(run_id)
    dead.sock.close()  # as kill -9 leaves it: the file stays, nobody listens
    path = controlclient.socket_path(run_id)
    assert path.is_socket()
    server = controlsock.ControlServer(run_id, RecordingControl())  # type: ignore[arg-type]
    try:
        controlclient.remove_stale(run_id)
        assert path.is_socket()
        assert controlclient.ask(run_id, Request("restart", task="worker:0")) == OK
    finally:
        server.close()
    controlsock.listen(run_id).sock.close()  # killed outright again: the name stays
    assert path.is_socket()
    controlclient.remove_stale(run_id)
    assert not path.exists()
