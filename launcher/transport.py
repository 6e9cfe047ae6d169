"""One Host interface, two implementations: LocalHost (no SSH) and SshHost (Fabric/paramiko).

Contract (see docs/ARCHITECTURE.md): every method may be called from the one worker thread the
supervisor keeps per host; ``stream_lines`` calls ``on_line`` from its own reader thread.
Commands are shell strings whose profile values are already quoted by the caller.
"""

from __future__ import annotations

import signal
from abc import ABC, abstractmethod
from collections.abc import Callable
from dataclasses import dataclass

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


class Host(ABC):
    name: str
    address: str

    @abstractmethod
    def connect(self) -> None:
        """Open the connection; raise HostError with a one-line, actionable message on failure."""

    @abstractmethod
    def close(self) -> None: ...

    @property
    @abstractmethod
    def connected(self) -> bool: ...

    @abstractmethod
    def run(self, command: str, timeout: float = 60.0, stdin: bytes | None = None) -> CommandResult:
        """Run a shell command to completion and capture its (small) output."""

    @abstractmethod
    def put_file(self, data: bytes, remote_path: str, mode: int = 0o644) -> None:
        """Write ``data`` to ``remote_path`` (parent dirs created), atomically where possible."""

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

    @abstractmethod
    def kill_group(self, pgid: int, sig: int = signal.SIGTERM) -> None:
        """Send ``sig`` to the process group ``pgid``; a group that is gone is not an error."""
