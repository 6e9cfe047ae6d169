"""LocalHost: this machine, without SSH; every command is a ``/bin/sh -c`` child process."""

from __future__ import annotations

import contextlib
import os
import select
import signal
import subprocess
import threading
from collections.abc import Callable

from launcher.agent.procs import default_signals
from launcher.errors import HostError
from launcher.model import HostConfig
from launcher.transport.base import CommandResult, CommandTimeout, Host, LineStream, ReaderLineStream, head


class LocalLineStream(ReaderLineStream):
    """A local child in its own session (terminal Ctrl-C does not reach it) with piped std streams:
    ``/bin/sh -c command``, or ``argv`` (the openssh transport's ``ssh ... HOST command``)."""

    def __init__(self, command: str, on_line: Callable[[str], None],
                 on_close: Callable[[int | None], None] | None, argv: list[str] | None = None) -> None:
        super().__init__(on_line, on_close, "local-stream")
        self._proc = subprocess.Popen(
            argv or ["/bin/sh", "-c", command], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
            stderr=subprocess.PIPE, start_new_session=True, close_fds=True)
        self._stderr_thread = threading.Thread(target=self._drain_stderr, daemon=True,
                                               name="local-stream-stderr")
        self._stderr_thread.start()
        self._reader.start()

    def _drain_stderr(self) -> None:
        assert self._proc.stderr is not None
        fd = self._proc.stderr.fileno()
        while chunk := os.read(fd, 65536):
            self._stderr.add(chunk)

    def _read(self) -> None:
        assert self._proc.stdout is not None
        fd = self._proc.stdout.fileno()
        try:
            while not self._closing.is_set():
                ready, _, _ = select.select([fd], [], [], 0.2)
                if not ready:
                    continue
                chunk = os.read(fd, 65536)
                if not chunk:
                    break
                self._splitter.feed(chunk)
            else:
                return
            self._splitter.finish()
            while not self._closing.is_set():
                try:
                    code = self._proc.wait(timeout=0.2)
                except subprocess.TimeoutExpired:
                    continue
                self._exit_code = code if code >= 0 else 128 - code
                break
        finally:
            # the end is reported with the command's stderr whole (why an ssh or a preflight ended),
            # unless a child it left behind keeps the pipe open
            self._stderr_thread.join(1.0)
            self._ended()

    def send(self, data: bytes, timeout: float | None = None) -> bool:
        """A blocking pipe: the write waits for the command to read (or to exit: EPIPE)."""
        stdin = self._proc.stdin
        if self._closing.is_set() or stdin is None:
            return False
        view = memoryview(data)
        try:
            while view:  # a signal can cut a large write short
                view = view[os.write(stdin.fileno(), view):]
            return True
        except (OSError, ValueError):  # the command exited, or close() closed the pipe
            return False

    def close(self) -> None:
        if self._closing.is_set():
            return
        self._closing.set()
        assert self._proc.stdin is not None
        with contextlib.suppress(OSError):
            self._proc.stdin.close()
        if threading.current_thread() is not self._reader:
            self._reader.join(5.0)
        try:
            self._proc.wait(timeout=2.0)
        except subprocess.TimeoutExpired:  # it ignored EOF: its session is ours to end
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self._proc.pid, signal.SIGKILL)
            self._proc.wait(timeout=5.0)
        self._stderr_thread.join(1.0)
        # a pipe still being read by a thread stays open (closing it under a blocked read is unsafe)
        for pipe, reader in ((self._proc.stdout, self._reader), (self._proc.stderr, self._stderr_thread)):
            if pipe is not None and not reader.is_alive():
                pipe.close()


def run_process(argv: list[str], timeout: float, stdin: bytes | None, timeout_message: str) -> CommandResult:
    """Run ``argv`` in a process group of its own, killed whole on timeout (CommandTimeout).

    Not invoke.run: its timeout kills only the shell, and its readers then wait for EOF from
    any child still holding the pipes (``sleep 30`` with timeout 0.5 took 30 s). It would
    also forward the launcher's own stdin (the dashboard's keys) unless told not to.
    """
    proc = subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            start_new_session=True, close_fds=True)
    try:
        out, err = proc.communicate(stdin or b"", timeout=timeout)
    except subprocess.TimeoutExpired:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
        proc.communicate()
        raise CommandTimeout(timeout_message) from None
    code = proc.returncode if proc.returncode >= 0 else 128 - proc.returncode
    return CommandResult(code, out.decode("utf-8", errors="replace"), err.decode("utf-8", errors="replace"))


class LocalHost(Host):
    """This machine, without SSH: every command is a ``/bin/sh -c`` child process."""

    def __init__(self, config: HostConfig) -> None:
        self.name = config.name
        self.address = config.address
        self.config = config
        self._open = False

    def connect(self) -> None:
        self._open = True

    def close(self) -> None:
        self._open = False

    @property
    def connected(self) -> bool:
        return self._open

    def run(self, command: str, timeout: float = 60.0, stdin: bytes | None = None) -> CommandResult:
        return run_process(["/bin/sh", "-c", command], timeout, stdin,
                           f"host {self.name}: `{head(command)}` did not finish within {timeout:g}s")

    def home(self) -> str:
        return os.path.expanduser("~")

    def start_detached(self, command: str, log_path: str, cwd: str | None = None) -> int:
        log_path = os.path.expanduser(log_path)
        os.makedirs(os.path.dirname(log_path) or ".", exist_ok=True)
        if cwd is not None and not os.path.isdir(cwd):
            raise HostError(f"host {self.name}: working directory {cwd} does not exist; fix workdir")
        with open(log_path, "ab") as log:
            proc = subprocess.Popen(["/bin/sh", "-c", command], cwd=cwd, stdin=subprocess.DEVNULL,
                                    stdout=log, stderr=subprocess.STDOUT, start_new_session=True,
                                    close_fds=True, preexec_fn=default_signals)  # not our ignored SIGINT
        # We are its parent: reap it when it ends, or it lingers as a zombie that looks alive.
        threading.Thread(target=proc.wait, daemon=True, name=f"reap-{proc.pid}").start()
        return proc.pid

    def stream_lines(self, command: str, on_line: Callable[[str], None],
                     on_close: Callable[[int | None], None] | None = None) -> LineStream:
        return LocalLineStream(command, on_line, on_close)
