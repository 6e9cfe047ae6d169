"""A client's view of a job whose supervisor runs in another process: an EventSource and a
JobControl over the supervisor's control socket (controlsock.py), so the dashboard, the
`--no-tui` lines and `--json` read and act on it exactly as they did in-process.

One connection follows the events (history, ``#live``, the live events, ``#end``); each action is
a request of its own, as `distlaunch restart` sends it.
"""

from __future__ import annotations

import contextlib
import json
import socket
import threading
from collections.abc import Iterator
from typing import Any

from launcher.agent.stackmodel import UNKNOWN, TaskStacks
from launcher.errors import HostError
from launcher.events import Event, EventDecodeError
from launcher.supervise import controlsock

#: the longest line read from the follow socket (an event line is far shorter)
MAX_LINE = 8 << 20
#: seconds a stacks request may take beyond its own timeout
STACKS_MARGIN_S = 15.0


class RemoteJob:
    """Follows one run's supervisor. ``events()`` yields the history first, then live events,
    and ends when the job ended (``end`` then holds the supervisor's ``#end``), when the
    supervisor went away (``end`` stays None) or on ``close()``."""

    def __init__(self, run_id: str, sock: socket.socket) -> None:
        self.run_id = run_id
        self._sock = sock
        self._reader = sock.makefile("rb")
        self.hello: dict[str, Any] = {}
        self.end: dict[str, Any] | None = None
        self.note: str | None = None  # why the supervisor let this client go, if it did
        self.launched = threading.Event()
        self.live = threading.Event()  # the history has been read
        self.leaving = False  # the user chose to leave the job running (the dashboard's detach)
        self._closed = False

    @classmethod
    def follow(cls, run_id: str, timeout: float = 5.0, history: bool = True) -> RemoteJob | None:
        """Connect and read the hello; None when no supervisor of ours listens. ``history``: the
        events before the connection too (a client that only waits for the end needs none)."""
        sock = controlsock.connect(run_id, timeout)
        if sock is None:
            return None
        try:
            sock.sendall((json.dumps({"action": "follow", "history": history}) + "\n").encode())
            job = cls(run_id, sock)
            first = job._reader.readline(MAX_LINE)
        except OSError:
            sock.close()
            return None
        if not first.startswith(b"#hello "):
            sock.close()
            return None
        with contextlib.suppress(ValueError):
            job.hello = json.loads(first[len(b"#hello "):])
        if job.hello.get("launched"):
            job.launched.set()
        sock.settimeout(None)
        return job

    @property
    def supervisor_pid(self) -> int | None:
        pid = self.hello.get("supervisor_pid")
        return pid if isinstance(pid, int) else None

    # -- EventSource ---------------------------------------------------------------------------

    def events(self) -> Iterator[Event]:
        while not self._closed:
            try:
                raw = self._reader.readline(MAX_LINE)
            except (OSError, ValueError):
                break
            if not raw:
                break
            if raw.startswith(b"#"):
                if self._marker(raw.decode("utf-8", "replace").rstrip("\n")):
                    break
                continue
            try:
                yield Event.from_json(raw.decode("utf-8", "replace"))
            except EventDecodeError:
                continue
        self.launched.set()  # nobody waits for a launch of a job that is over (or unreachable)
        self.live.set()

    def _marker(self, line: str) -> bool:
        """Handle a ``#`` line; True when the stream is over."""
        word, _, rest = line.partition(" ")
        if word == "#launched":
            self.launched.set()
        elif word == "#live":
            self.live.set()
        elif word == "#end":
            with contextlib.suppress(ValueError):
                self.end = json.loads(rest)
            if self.end is None:
                self.end = {}
            return True
        elif word == "#dropped":
            self.note = rest
            return True
        return False

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

    def _ask(self, action: str, **fields: Any) -> dict[str, Any]:
        answer = controlsock.send(self.run_id, action, **fields)
        if answer is None:
            raise HostError(f"the supervisor of {self.run_id} does not answer")
        if not answer.get("ok"):
            raise HostError(str(answer.get("error") or "refused"))
        return answer

    def restart_task(self, task_id: str) -> None:
        self._ask("restart", task=task_id)

    def stop_task(self, task_id: str) -> None:
        self._ask("stop", task=task_id)

    def teardown(self, reason: str = "torn down from the dashboard", origin: str = "") -> None:
        self._ask("teardown", reason=reason, origin=origin)

    def detach(self) -> None:
        """Leave the job running: it stays supervised; only this client goes."""
        self.leaving = True

    def capture_stacks(self, tasks: list[str] | None = None, native: bool = False,
                       timeout: float = 10.0) -> list[TaskStacks]:
        answer = controlsock.send(self.run_id, "stacks", timeout=timeout + STACKS_MARGIN_S,
                                  tasks=tasks or [], native=native, timeout_s=timeout)
        if answer is None or not answer.get("ok"):
            why = "the supervisor does not answer" if answer is None else str(answer.get("error"))
            return [TaskStacks(task, "", None, UNKNOWN, note=why) for task in tasks or []]
        return [TaskStacks.from_json(item) for item in answer.get("stacks") or []]
