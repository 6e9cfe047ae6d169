"""A client of the supervisor (remotejob.RemoteJob over controlclient.py) and the follow stream the
supervisor's control server sends it (controlsock.ControlServer._follow), each on a real unix socket:
RemoteJob against a small in-test server that speaks the protocol line by line (what a supervisor of
this or the previous version sends, broken lines included), and the control server against a
stand-in for the supervisor's few follow calls, with a real LineFeed and events.jsonl."""

from __future__ import annotations

import contextlib
import secrets
import socket
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from types import SimpleNamespace

import pytest

from launcher import events as ev
from launcher.agent.stackmodel import TaskStacks
from launcher.errors import HostError
from launcher.protocol.controllines import (
    Answer,
    Dropped,
    End,
    Hello,
    Launched,
    Live,
    Request,
    decode_request,
    job_exit_code,
)
from launcher.protocol.message import Malformed
from launcher.rundir import EVENTS_FILE
from launcher.supervise import controlclient, controlsock
from launcher.supervise.core import LineFeed
from launcher.supervise.remotejob import RemoteJob

#: a script item: bytes to send, or an event to wait for first
Step = bytes | threading.Event


def _event(i: int, run: str = "r") -> ev.Event:
    event = ev.log_event(run, "worker:0", "stdout", f"line {i}", ts=1000.0 + i)
    event.data["seq"] = i
    return event


def _line(i: int) -> bytes:
    return (_event(i).to_json() + "\n").encode()


class ScriptedSupervisor:
    """Listens at the run's socket; each connection's request is read and recorded, and the
    connection answered with ``script(request)`` step by step, then closed."""

    def __init__(self, run_id: str, script: Callable[[Request | Malformed], list[Step]]) -> None:
        self.script = script
        self.requests: list[Request | Malformed] = []
        path = controlclient.socket_path(run_id)
        path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.sock.bind(str(path))
        self.sock.listen(8)
        self.path = path
        threading.Thread(target=self._serve, daemon=True).start()

    def _serve(self) -> None:
        while True:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            threading.Thread(target=self._answer, args=(conn,), daemon=True).start()

    def _answer(self, conn: socket.socket) -> None:
        with conn, contextlib.suppress(OSError):
            request = decode_request(conn.makefile("rb").readline().rstrip(b"\n"))
            self.requests.append(request)
            for step in self.script(request):
                if isinstance(step, threading.Event):
                    assert step.wait(10)
                else:
                    conn.sendall(step)

    def close(self) -> None:
        self.sock.close()
        self.path.unlink(missing_ok=True)


@pytest.fixture
def run_id() -> str:
    return f"t-{secrets.token_hex(4)}"


@contextlib.contextmanager
def scripted(run_id: str, script: Callable[[Request | Malformed], list[Step]]) -> Iterator[ScriptedSupervisor]:
    server = ScriptedSupervisor(run_id, script)
    try:
        yield server
    finally:
        server.close()


def test_a_follower_reads_history_then_live_events_and_the_end(run_id: str) -> None:
    go_live = threading.Event()

    def script(request: Request | Malformed) -> list[Step]:
        return [Hello(run_id, 4321, False).encode(), _line(0), _line(1), go_live, Live().encode(), _line(2),
                Launched().encode(), _line(3), End("Failed", 143).encode(), _line(99)]

    with scripted(run_id, script) as server:
        job = RemoteJob.follow(run_id)
        assert job is not None
        assert job.hello == Hello(run_id, 4321, False) and job.supervisor_pid == 4321
        assert server.requests == [Request("follow", history=True)]
        seen = []
        for event in job.events():
            seen.append(event.get("seq"))
            if event.get("seq") == 1:
                assert not job.live.is_set() and not job.launched.is_set()
                go_live.set()
            if event.get("seq") == 2:
                assert job.live.is_set() and not job.launched.is_set()
            if event.get("seq") == 3:
                assert job.launched.is_set()
        job.close()
    assert seen == [0, 1, 2, 3]  # nothing after the end is read
    assert job.end == End("Failed", 143) and job.note is None


def test_a_follower_without_history_asks_for_none_and_a_launched_hello_counts(run_id: str) -> None:
    with scripted(run_id, lambda r: [Hello(run_id, 1, True).encode(), Live().encode()]) as server:
        job = RemoteJob.follow(run_id, history=False)
        assert job is not None
        assert job.launched.is_set()
        assert list(job.events()) == []  # the supervisor went away: no end
        job.close()
    assert server.requests == [Request("follow", history=False)]
    assert job.end is None and job.note is None
    assert job.live.is_set() and job.launched.is_set()  # nobody waits on a stream that is over


@pytest.mark.parametrize("first", [b"", b"#dropped the supervisor is busy; follow it again\n", b'{"ok": false}\n',
                                   b"#hello not json\n", b"#live\n"])
def test_a_stream_that_does_not_start_with_a_hello_is_not_followed(run_id: str, first: bytes) -> None:
    with scripted(run_id, lambda r: [first]):
        assert RemoteJob.follow(run_id) is None


def test_no_supervisor_no_follower(run_id: str) -> None:
    assert RemoteJob.follow(run_id, timeout=1.0) is None


def test_a_dropped_follower_keeps_why_and_has_no_end(run_id: str) -> None:
    script = [Hello(run_id, 1, True).encode(), Live().encode(), _line(0),
              Dropped("this client fell behind; follow it again").encode(), _line(1)]
    with scripted(run_id, lambda r: script):
        job = RemoteJob.follow(run_id)
        assert job is not None
        assert [e.get("seq") for e in job.events()] == [0]
        job.close()
    assert job.note == "this client fell behind; follow it again" and job.end is None


def test_broken_and_unknown_lines_are_skipped_and_a_broken_end_still_ends(run_id: str) -> None:
    script = [Hello(run_id, 1, False).encode(), b'{"v": 1, "kind": "log", "ts"\n', b"#future {\"x\": 1}\n",
              _line(0), b"not json at all\n", Hello(run_id, 2, True).encode(), b"\n", _line(1),
              b"#end {cut short\n", _line(2)]
    with scripted(run_id, lambda r: script):
        job = RemoteJob.follow(run_id)
        assert job is not None
        assert [e.get("seq") for e in job.events()] == [0, 1]
        job.close()
    assert job.end == End(None, None)
    assert job_exit_code(job.end.outcome, job.end.exit_code) == 1


def test_close_ends_the_events_of_a_stream_that_goes_on(run_id: str) -> None:
    hold = threading.Event()
    with scripted(run_id, lambda r: [Hello(run_id, 1, True).encode(), _line(0), hold]):
        job = RemoteJob.follow(run_id)
        assert job is not None
        events = job.events()
        assert next(events).get("seq") == 0
        threading.Timer(0.2, job.close).start()
        assert list(events) == []
        assert job.closed
        hold.set()


def test_actions_are_requests_of_their_own_and_a_refusal_is_an_error(run_id: str) -> None:
    def script(request: Request | Malformed) -> list[Step]:
        if isinstance(request, Request) and request.action == "follow":
            return [Hello(run_id, 1, True).encode()]
        if isinstance(request, Request) and request.task == "worker:9":
            return [Answer(False, "no task worker:9").encode()]
        if isinstance(request, Request) and request.action == "stacks":
            stacks = [TaskStacks("worker:0", "local", 12, "sleeping").to_json()]
            return [Answer(True, stacks=stacks, path="/r/stacks/1.json").encode()]
        return [Answer(True).encode()]

    with scripted(run_id, script) as server:
        job = RemoteJob.follow(run_id)
        assert job is not None
        job.restart_task("worker:1")
        job.stop_task("worker:2")
        job.teardown("stopped by SIGTERM", origin="SIGTERM")
        with pytest.raises(HostError, match="no task worker:9"):
            job.restart_task("worker:9")
        captured = job.capture_stacks(["worker:0"], native=True, timeout=3.0)
        job.close()
    assert server.requests[1:] == [
        Request("restart", task="worker:1"), Request("stop", task="worker:2"),
        Request("teardown", reason="stopped by SIGTERM", origin="SIGTERM"), Request("restart", task="worker:9"),
        Request("stacks", tasks=("worker:0",), native=True, timeout_s=3.0)]
    assert [(c.task, c.pid, c.state) for c in captured] == [("worker:0", 12, "sleeping")]
    with pytest.raises(HostError, match="does not answer"):  # the supervisor is gone
        job.restart_task("worker:1")
    assert [c.note for c in job.capture_stacks(["worker:0", "ps:0"], timeout=0.5)] == \
        ["the supervisor does not answer"] * 2


# -- the control server's follow stream, read by RemoteJob ----------------------------------------


class FollowedSupervisor:
    """The supervisor's calls a follower's connection makes (``follow_from_now``, ``unfollow``,
    ``loop_ended``, ``wait``, ``outcome``), on a real LineFeed and a real events.jsonl."""

    def __init__(self, run_id: str, run_dir: Path, cut: int | None, launched: bool = False) -> None:
        self.run_id = run_id
        self.rundir = SimpleNamespace(path=run_dir)
        self.feed = LineFeed()
        self.cut = cut
        self.launched = launched
        self.outcome: str | None = None
        self.done = threading.Event()
        self.unfollowed = threading.Event()

    def follow_from_now(self) -> tuple[LineFeed, int, bool] | None:
        return None if self.cut is None else (self.feed, self.cut, self.launched)

    def loop_ended(self) -> bool:
        return self.done.is_set()

    def unfollow(self, feed: LineFeed) -> None:
        feed.close()
        self.unfollowed.set()

    def wait(self, timeout: float | None = None) -> str | None:
        self.done.wait(timeout)
        return self.outcome

    def end(self, outcome: str) -> None:
        self.outcome = outcome
        self.done.set()
        self.feed.close()


def _history(run_dir: Path, count: int) -> list[int]:
    """events.jsonl with ``count`` events; the size after each line."""
    sizes, size = [], 0
    with (run_dir / EVENTS_FILE).open("wb") as fh:
        for i in range(count):
            size += fh.write(_line(i))
            sizes.append(size)
    return sizes


def _served(run_id: str, sup: FollowedSupervisor, stopped: int | None = None) -> controlsock.ControlServer:
    return controlsock.ControlServer(run_id, sup, lambda outcome: job_exit_code(outcome, stopped))  # type: ignore[arg-type]


def test_the_server_sends_the_history_to_the_cut_then_each_event_once_and_the_end(run_id: str,
                                                                                 tmp_path: Path) -> None:
    sizes = _history(tmp_path, 3)
    sup = FollowedSupervisor(run_id, tmp_path, cut=sizes[1])  # the third was published after the cut
    server = _served(run_id, sup, stopped=143)
    try:
        job = RemoteJob.follow(run_id)
        assert job is not None
        assert job.hello.run_id == run_id and job.supervisor_pid is not None and not job.launched.is_set()
        seen = []
        for event in job.events():
            seen.append(event.get("seq"))
            if len(seen) == 2:
                sup.feed.put_lines([_event(2).to_json(), Launched().line()])
                sup.feed.put_lines([_event(3).to_json()])
            if len(seen) == 4:
                assert job.launched.wait(5)
                sup.end(ev.JOB_FAILED)
        job.close()
    finally:
        server.close()
    assert seen == [0, 1, 2, 3]
    assert job.live.is_set()
    assert job.end == End(ev.JOB_FAILED, 143)
    assert sup.unfollowed.is_set()


def test_the_server_lets_a_follower_that_hangs_up_go_at_once(run_id: str, tmp_path: Path) -> None:
    _history(tmp_path, 1)
    sup = FollowedSupervisor(run_id, tmp_path, cut=0, launched=True)
    server = _served(run_id, sup)
    try:
        job = RemoteJob.follow(run_id, history=False)
        assert job is not None and job.launched.is_set()
        job.close()
        assert sup.unfollowed.wait(5), "the feed of a client that hung up was kept"
    finally:
        server.close()


def test_the_server_drops_a_follower_that_fell_behind(run_id: str, tmp_path: Path) -> None:
    _history(tmp_path, 1)
    sup = FollowedSupervisor(run_id, tmp_path, cut=0)
    server = _served(run_id, sup)
    try:
        job = RemoteJob.follow(run_id)
        assert job is not None
        sup.feed.dropped = True  # as put_lines does past MAX_BACKLOG
        sup.feed.close()
        assert list(job.events()) == []
        job.close()
    finally:
        server.close()
    assert job.note == "this client fell behind; follow it again" and job.end is None


def test_a_follower_of_an_ended_job_gets_its_whole_history_and_end(run_id: str, tmp_path: Path) -> None:
    _history(tmp_path, 2)
    sup = FollowedSupervisor(run_id, tmp_path, cut=None)
    sup.end(ev.JOB_SUCCEEDED)
    server = _served(run_id, sup, stopped=130)
    try:
        job = RemoteJob.follow(run_id)
        assert job is not None
        assert [e.get("seq") for e in job.events()] == [0, 1]
        job.close()
    finally:
        server.close()
    assert job.end == End(ev.JOB_SUCCEEDED, 0)


def test_a_busy_supervisor_sends_no_hello_and_is_not_followed(run_id: str, tmp_path: Path) -> None:
    sup = FollowedSupervisor(run_id, tmp_path, cut=None)  # its loop did not take the cut in time
    server = _served(run_id, sup)
    try:
        started = time.monotonic()
        assert RemoteJob.follow(run_id) is None
        assert time.monotonic() - started < 5
    finally:
        server.close()
