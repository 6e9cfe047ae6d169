"""The Host interface every transport implements, and the pieces its implementations share.

Contract (see docs/ARCHITECTURE.md): every method may be called from the one worker thread the
supervisor keeps per host; ``stream_lines`` calls ``on_line`` from its own reader thread.
Commands are shell strings whose profile values are already quoted by the caller.
"""

from __future__ import annotations

import threading
from abc import ABC, abstractmethod
from collections.abc import Callable
from dataclasses import dataclass

from launcher.errors import HostError

#: longest line kept from a stream; longer ones are cut (bounded memory for runaway output)
MAX_LINE_BYTES = 1 << 20


@dataclass(frozen=True)
class CommandResult:
    exit_code: int
    stdout: str
    stderr: str

    @property
    def ok(self) -> bool:
        return self.exit_code == 0


class LineStream(ABC):
    """A long-running command whose stdout arrives line by line on a reader thread."""

    @abstractmethod
    def close(self) -> None:
        """Stop the command (close its stdin/channel) and the reader thread; idempotent."""

    @property
    @abstractmethod
    def alive(self) -> bool: ...

    @abstractmethod
    def wait(self, timeout: float | None = None) -> int | None:
        """The command's exit code once it ended, or None on timeout."""

    def stderr_tail(self) -> str:
        """The last few KiB the command wrote to stderr (to explain why a stream ended)."""
        return ""

    def end(self, timeout: float = 2.0) -> None:
        """Close the command's stdin and give it up to ``timeout`` s to exit before ``close``: for
        a command that ends on EOF and must be gone when the caller returns (a refused launch's
        preflight verbs carry the run id). Where ``close`` already waits (local), the same."""
        self.close()

    def send(self, data: bytes, timeout: float | None = None) -> bool:
        """Write to the command's stdin. Without ``timeout``: a few bytes (pings), False where they
        could not go now. With it: all of ``data`` (a request, an upload) while the command keeps
        taking some within ``timeout`` s; False otherwise, and a stream that took part of it is
        closed (the rest would be read as a line of its own)."""
        return False


class Host(ABC):
    name: str
    address: str
    #: True: detached processes are started by ``setsid -f`` inside a short ``run``; False: each
    #: needs ``start_detached`` (a Slurm step must stay open for as long as its process runs)
    detach_by_setsid: bool = True

    @abstractmethod
    def connect(self) -> None:
        """Open the connection; raise HostError with a one-line, actionable message on failure."""

    @abstractmethod
    def close(self) -> None: ...

    def end_run(self) -> None:
        """The run is over (``down``): close, and let go of what outlives a close (a shared master)."""
        self.close()

    @property
    @abstractmethod
    def connected(self) -> bool: ...

    @abstractmethod
    def run(self, command: str, timeout: float = 60.0, stdin: bytes | None = None) -> CommandResult:
        """Run a shell command to completion and capture its (small) output."""

    @abstractmethod
    def home(self) -> str:
        """The absolute home directory on the host."""

    @abstractmethod
    def start_detached(self, command: str, log_path: str, cwd: str | None = None) -> int:
        """Start ``command`` under setsid with stdin from /dev/null and stdout/stderr to
        ``log_path``; return its pid (which is also its process group id)."""

    @abstractmethod
    def stream_lines(self, command: str, on_line: Callable[[str], None],
                     on_close: Callable[[int | None], None] | None = None) -> LineStream:
        """Start ``command`` and feed each stdout line (without newline) to ``on_line``."""

class CommandTimeout(HostError):
    """A command run with ``Host.run`` did not finish within its timeout."""


class LineSplitter:
    """Turns a byte stream into lines with bounded memory.

    A line longer than ``max_line_bytes`` is delivered cut to that length and the rest of it, up
    to the next newline, is dropped; so a runaway writer costs at most ``max_line_bytes``.
    """

    def __init__(self, on_line: Callable[[str], None], max_line_bytes: int = MAX_LINE_BYTES) -> None:
        self._on_line = on_line
        self._max = max_line_bytes
        self._buf = bytearray()
        self._dropping = False  # inside the tail of a line that was already delivered cut

    def feed(self, data: bytes) -> None:
        if self._dropping:  # the tail of a line already delivered cut: skip to its end
            newline = data.find(b"\n")
            if newline < 0:
                return
            self._dropping = False
            data = data[newline + 1:]
        last = data.rfind(b"\n")
        if last < 0:
            self._keep(data)
            return
        whole = data[:last]
        if self._buf:
            whole = bytes(self._buf) + whole
            self._buf.clear()
        lines = whole.split(b"\n")
        if max(map(len, lines)) <= self._max:
            # a newline is never part of a multi-byte character: decode the lot, then split
            for line in whole.decode("utf-8", errors="replace").split("\n"):
                self._on_line(line)
        else:
            for raw in lines:
                self._on_line(raw[: self._max].decode("utf-8", errors="replace"))
        self._keep(data[last + 1:])

    def _keep(self, data: bytes) -> None:
        """Hold the start of a line; one that outgrows the limit is delivered cut now."""
        room = self._max - len(self._buf)
        if len(data) <= room:
            self._buf += data
            return
        self._buf += data[:room]
        self._emit()
        self._dropping = True

    def finish(self) -> None:
        """Deliver a last line that had no newline."""
        if self._buf and not self._dropping:
            self._emit()
        self._buf.clear()
        self._dropping = False

    def _emit(self) -> None:
        line = self._buf.decode("utf-8", errors="replace")
        self._buf.clear()
        self._on_line(line)


class TailBuffer:
    """The last ``limit`` bytes written to it (a stream's stderr, kept for error messages)."""

    def __init__(self, limit: int = 64 * 1024) -> None:
        self._limit = limit
        self._data = bytearray()
        self._lock = threading.Lock()

    def add(self, data: bytes) -> None:
        with self._lock:
            self._data += data
            if len(self._data) > self._limit:
                del self._data[: len(self._data) - self._limit]

    def text(self) -> str:
        with self._lock:
            return self._data.decode("utf-8", errors="replace")


class ReaderLineStream(LineStream):
    """What both streams share: a reader thread feeding a LineSplitter, a tail of stderr, and
    the exit code handed to ``on_close`` (None once ``close()`` was asked for)."""

    def __init__(self, on_line: Callable[[str], None], on_close: Callable[[int | None], None] | None,
                 name: str) -> None:
        self._splitter = LineSplitter(on_line)
        self._on_close = on_close
        self._closing = threading.Event()
        self._exit_code: int | None = None
        self._stderr = TailBuffer()
        self._reader = threading.Thread(target=self._read, daemon=True, name=name)

    @abstractmethod
    def _read(self) -> None:
        """Run on the reader thread until the output ends; call ``_ended()`` last."""

    def _ended(self) -> None:
        if self._on_close is not None:
            self._on_close(None if self._closing.is_set() else self._exit_code)

    @property
    def alive(self) -> bool:
        return self._reader.is_alive()

    def stderr_tail(self) -> str:
        return self._stderr.text()

    def wait(self, timeout: float | None = None) -> int | None:
        self._reader.join(timeout)
        return None if self._reader.is_alive() else self._exit_code


def head(command: str, limit: int = 60) -> str:
    one_line = " ".join(command.split())
    return one_line if len(one_line) <= limit else one_line[: limit - 3] + "..."
