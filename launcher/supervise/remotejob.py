"""A client's view of a job whose supervisor runs in another process: an EventSource and a
JobControl over the supervisor's control socket (controlclient.py), so the dashboard, the
`--no-tui` lines and `--json` read and act on it exactly as they did in-process.

One connection follows the events (the follow stream of launcher/protocol/controllines.py: hello,
history, live, the live events, end); each action is a request of its own, as `distlaunch
restart` sends it.
"""

from __future__ import annotations

import contextlib
import socket
import threading
from collections.abc import Iterator

from launcher.agent.stackmodel import UNKNOWN, TaskStacks
from launcher.errors import HostError
from launcher.events import Event, EventDecodeError
from launcher.protocol.controllines import Answer, Dropped, End, Hello, Launched, Live, Request, decode_follow
from launcher.supervise import controlclient

#: the longest line read from the follow socket (an event line is far shorter)
MAX_LINE = 8 << 20
#: seconds a stacks request may take beyond its own timeout
STACKS_MARGIN_S = 15.0


class RemoteJob:
    """Follows one run's supervisor. ``events()`` yields the history first, then live events,
    and ends when the job ended (``end`` then holds the supervisor's ``End``), when the
    supervisor let this client go (``note`` says why), when it went away (``end`` stays None)
    or on ``close()``."""

    def __init__(self, run_id: str, sock: socket.socket) -> None:
        self.run_id = run_id
        self._sock = sock
        self._reader = sock.makefile("rb")
        self.hello = Hello(run_id, None, False)
        self.end: End | None = None
        self.note: str | None = None  # why the supervisor let this client go, if it did
        self.launched = threading.Event()
        self.live = threading.Event()  # the history has been read
        self._closed = False

    @classmethod
    def follow(cls, run_id: str, timeout: float = 5.0, history: bool = True) -> RemoteJob | None:
        """Connect and read the hello; None when no supervisor of ours listens. ``history``: the
        events before the connection too (a client that only waits for the end needs none)."""
        sock = controlclient.connect(run_id, timeout)
        if sock is None:
            return None
        try:
            sock.sendall(Request("follow", history=history).encode())
            job = cls(run_id, sock)
            hello = decode_follow(job._reader.readline(MAX_LINE).decode("utf-8", "replace"))
        except OSError:
            sock.close()
            return None
        if not isinstance(hello, Hello):  # not a supervisor of ours, or one that is ending
            sock.close()
            return None
        job.hello = hello
        if hello.launched:
            job.launched.set()
        sock.settimeout(None)
        return job

    @property
    def supervisor_pid(self) -> int | None:
        return self.hello.supervisor_pid

    # -- EventSource ---------------------------------------------------------------------------

    def events(self) -> Iterator[Event]:
        while not self._closed:
            try:
                raw = self._reader.readline(MAX_LINE)
            except (OSError, ValueError):
                break
            if not raw:
                break
            line = decode_follow(raw.decode("utf-8", "replace"))
            if isinstance(line, str):
                try:
                    yield Event.from_json(line)
                except EventDecodeError:
                    continue
            elif isinstance(line, Launched):
                self.launched.set()
            elif isinstance(line, Live):
                self.live.set()
            elif isinstance(line, End):
                self.end = line
                break
            elif isinstance(line, Dropped):
                self.note = line.reason
                break
            # anything else (a second hello, a marker of a newer supervisor, a broken line): skipped
        self.launched.set()  # nobody waits for a launch of a job that is over (or unreachable)
        self.live.set()

    @property
    def closed(self) -> bool:
        return self._closed

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        with contextlib.suppress(OSError):
            self._sock.shutdown(socket.SHUT_RDWR)
        self._sock.close()

    # -- JobControl ----------------------------------------------------------------------------

    def _ask(self, request: Request) -> Answer:
        answer = controlclient.ask(self.run_id, request)
        if answer is None:
            raise HostError(f"the supervisor of {self.run_id} does not answer")
        if not answer.ok:
            raise HostError(answer.error or "refused")
        return answer

    def restart_task(self, task_id: str) -> None:
        self._ask(Request("restart", task=task_id))

    def stop_task(self, task_id: str) -> None:
        self._ask(Request("stop", task=task_id))

    def teardown(self, reason: str = "torn down from the dashboard", origin: str = "") -> None:
        self._ask(Request("teardown", reason=reason, origin=origin))

    def capture_stacks(self, tasks: list[str] | None = None, native: bool = False,
                       timeout: float = 10.0) -> list[TaskStacks]:
        request = Request("stacks", tasks=tuple(tasks or ()), native=native, timeout_s=timeout)
        answer = controlclient.ask(self.run_id, request, timeout=timeout + STACKS_MARGIN_S)
        if answer is None or not answer.ok:
            why = "the supervisor does not answer" if answer is None else answer.error or "refused"
            return [TaskStacks(task, "", None, UNKNOWN, note=why) for task in tasks or []]
        return [TaskStacks.from_json(item) for item in answer.stacks or []]
