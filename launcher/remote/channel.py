"""One exec per host for a launch: it prepares the host, answers the preflight, then follows.

A launch used to spend three SSH execs per host before a task could start (upload and
preflight, ``follow``, then the start), each booting a Python on the host. Now the first exec
writes the agent from its stdin, answers the preflight as its first line, and then waits: the
launcher's first line on that stdin (a ping, or the start of the job's tasks) makes it start
the host agent and follow it, so the same channel becomes the host's event stream. If the launch
stops at preflight (a busy port on another host), the launcher closes the channel and the host
is left without a host agent.

``AgentChannel`` is the launcher's side: it holds the first line for the preflight and every
later line until the supervisor attaches its handlers (``attach``), then passes them straight on.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from concurrent.futures import Future

from launcher.transport import LineStream

#: writes the agent zipapp from exactly N bytes of stdin (the rest of stdin is the follow
#: channel's), then runs an agent verb from it in this same interpreter: one Python boot per host.
#: It writes through ``agent.pyz.tmp-<its pid>``, removed if the write fails; one that a killed
#: writer left is removed by the next upload (session.py, ``stale_upload_cleanup``)
BOOTSTRAP = """\
import os, sys
size, path = int(sys.argv[1]), sys.argv[2]
data = bytearray()
while len(data) < size:
    chunk = os.read(0, min(65536, size - len(data)))
    if not chunk:
        break
    data += chunk
if len(data) < size:
    sys.stderr.write("agent upload cut short: %d of %d bytes\\n" % (len(data), size))
    sys.exit(98)
tmp = "%s.tmp-%d" % (path, os.getpid())  # this writer's own: a stale one names a dead pid
try:
    with os.fdopen(os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW, 0o600), "wb") as f:
        f.write(data)
    os.replace(tmp, path)
except OSError as exc:
    try:
        os.unlink(tmp)
    except OSError:
        pass
    sys.stderr.write("cannot write %s: %s\\n" % (path, exc))
    sys.exit(98)
if sys.path and sys.path[0] == "":
    sys.path[0] = path  # not the current directory (the home over SSH): a ~/psutil must not shadow
else:
    sys.path.insert(0, path)
from launcher.agent import main
sys.exit(main(sys.argv[3:]))
"""


class AgentChannel(LineStream):
    """A host's exec channel whose first line answers the preflight and whose later lines are
    the host agent's event stream, handed to whoever ``attach``es."""

    def __init__(self) -> None:
        self.stream: LineStream | None = None
        self._lock = threading.Lock()
        self._first: Future[str | None] = Future()
        self._held: list[str] = []
        self._on_line: Callable[[str], None] | None = None
        self._on_close: Callable[[int | None], None] | None = None
        self._closed = False
        self._exit_code: int | None = None
        self._asked: tuple[str, Future[str | None]] | None = None  # ``ask``'s prefix and its answer
        #: what the host printed before the answer (a login script's greeting): kept for errors
        self.noise: list[str] = []

    # -- fed by the stream's reader thread --------------------------------------------------------

    def feed(self, line: str) -> None:
        with self._lock:
            if not self._first.done():
                if line.startswith("{"):
                    self._first.set_result(line)
                else:  # the answer is one JSON object; a shell rc file may print before it
                    self.noise = [*self.noise[-4:], line]
                return
            if self._asked is not None and line.startswith(self._asked[0]):
                self._asked[1].set_result(line)
                self._asked = None
                return
            handler = self._on_line
            if handler is None:
                self._held.append(line)
                return
        handler(line)  # the one reader thread: lines stay in order

    def ended(self, code: int | None) -> None:
        with self._lock:
            self._closed, self._exit_code = True, code
            if not self._first.done():
                self._first.set_result(None)
            if self._asked is not None:
                self._asked[1].set_result(None)
                self._asked = None
            handler = self._on_close
        if handler is not None:
            handler(code)

    # -- the launcher's side ------------------------------------------------------------------------

    def first_line(self, timeout: float) -> str | None:
        """The preflight's answer line (the first that starts with ``{``); None if the command
        ended without one. Raises TimeoutError after ``timeout`` s."""
        return self._first.result(timeout)

    def ask(self, line: str, prefix: str, timeout: float) -> str | None:
        """Send ``line`` and wait for the answer line that starts with ``prefix`` (before ``attach``:
        the reach check); None if the command ended first. Raises TimeoutError after ``timeout`` s."""
        answer: Future[str | None] = Future()
        with self._lock:
            if self._closed:
                return None
            self._asked = (prefix, answer)
        if not self.send(line.encode() + b"\n", timeout):
            return None
        return answer.result(timeout)

    def attach(self, on_line: Callable[[str], None], on_close: Callable[[int | None], None]) -> None:
        """From now on every line goes to ``on_line`` (first those held meanwhile), and the end
        to ``on_close`` (at once if it ended already)."""
        with self._lock:
            for line in self._held:
                on_line(line)
            self._held.clear()
            self._on_line, self._on_close = on_line, on_close
            closed, code = self._closed, self._exit_code
        if closed:
            on_close(code)

    # -- LineStream ---------------------------------------------------------------------------------

    def close(self) -> None:
        if self.stream is not None:
            self.stream.close()

    def end(self, timeout: float = 2.0) -> None:
        """EOF to the verb, up to ``timeout`` s for it to exit, then close (transport LineStream.end)."""
        if self.stream is not None:
            self.stream.end(timeout)

    @property
    def alive(self) -> bool:
        return self.stream is not None and self.stream.alive

    def wait(self, timeout: float | None = None) -> int | None:
        return self.stream.wait(timeout) if self.stream is not None else None

    def stderr_tail(self) -> str:
        return self.stream.stderr_tail() if self.stream is not None else ""

    def send(self, data: bytes, timeout: float | None = None) -> bool:
        return self.stream is not None and self.stream.send(data, timeout)
