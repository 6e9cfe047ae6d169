"""One Host interface, two implementations: LocalHost (no SSH) and SshHost (Fabric/paramiko).

Contract (see docs/ARCHITECTURE.md): every method may be called from the one worker thread the
supervisor keeps per host; ``stream_lines`` calls ``on_line`` from its own reader thread.
Commands are shell strings whose profile values are already quoted by the caller.
"""

from __future__ import annotations

import contextlib
import getpass
import logging
import os
import posixpath
import select
import shlex
import signal
import socket
import subprocess
import threading
import time
import uuid
from abc import ABC, abstractmethod
from collections.abc import Callable
from dataclasses import dataclass

import fabric
import paramiko

from launcher import known_hosts
from launcher.errors import HostError
from launcher.model import HostConfig

# paramiko logs connection trouble itself; without a handler Python would print it to stderr,
# over the dashboard. Errors reach the user as HostError instead.
logging.getLogger("paramiko").addHandler(logging.NullHandler())

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

    def send(self, data: bytes) -> bool:
        """Write a few bytes to the command's stdin (pings); False where they could not go now."""
        return False


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
        start = 0
        while start < len(data):
            newline = data.find(b"\n", start)
            end = len(data) if newline < 0 else newline
            if not self._dropping:
                room = self._max - len(self._buf)
                self._buf += data[start:start + min(end - start, room)]
                if end - start > room:
                    self._emit()
                    self._dropping = True
            if newline < 0:
                return
            if self._dropping:
                self._dropping = False
            else:
                self._emit()
            start = newline + 1

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


class _TailBuffer:
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


def _signal_name(sig: int) -> str:
    return signal.Signals(sig).name.removeprefix("SIG")


# --------------------------------------------------------------------------- local


class _ReaderLineStream(LineStream):
    """What both streams share: a reader thread feeding a LineSplitter, a tail of stderr, and
    the exit code handed to ``on_close`` (None once ``close()`` was asked for)."""

    def __init__(self, on_line: Callable[[str], None], on_close: Callable[[int | None], None] | None,
                 name: str) -> None:
        self._splitter = LineSplitter(on_line)
        self._on_close = on_close
        self._closing = threading.Event()
        self._exit_code: int | None = None
        self._stderr = _TailBuffer()
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


class _LocalLineStream(_ReaderLineStream):
    """A local child in its own session (terminal Ctrl-C does not reach it) with piped std streams."""

    def __init__(self, command: str, on_line: Callable[[str], None],
                 on_close: Callable[[int | None], None] | None) -> None:
        super().__init__(on_line, on_close, "local-stream")
        self._proc = subprocess.Popen(
            ["/bin/sh", "-c", command], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
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
            self._ended()

    def send(self, data: bytes) -> bool:
        stdin = self._proc.stdin
        if self._closing.is_set() or stdin is None:
            return False
        try:
            return os.write(stdin.fileno(), data) == len(data)
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
        """Run in a process group of its own, killed whole on timeout.

        Not invoke.run: its timeout kills only the shell, and its readers then wait for EOF from
        any child still holding the pipes (``sleep 30`` with timeout 0.5 took 30 s). It would
        also forward the launcher's own stdin (the dashboard's keys) unless told not to.
        """
        proc = subprocess.Popen(["/bin/sh", "-c", command], stdin=subprocess.PIPE,
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                start_new_session=True, close_fds=True)
        try:
            out, err = proc.communicate(stdin or b"", timeout=timeout)
        except subprocess.TimeoutExpired:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGKILL)
            proc.communicate()
            raise CommandTimeout(
                f"host {self.name}: `{_head(command)}` did not finish within {timeout:g}s") from None
        code = proc.returncode if proc.returncode >= 0 else 128 - proc.returncode
        return CommandResult(code, out.decode("utf-8", errors="replace"),
                             err.decode("utf-8", errors="replace"))

    def put_file(self, data: bytes, remote_path: str, mode: int = 0o644) -> None:
        path = os.path.expanduser(remote_path)
        os.makedirs(os.path.dirname(path) or ".", exist_ok=True)
        tmp = f"{path}.tmp-{os.getpid()}-{threading.get_ident()}"
        try:
            with open(tmp, "wb") as out:
                out.write(data)
            os.chmod(tmp, mode)
            os.replace(tmp, path)
        except BaseException:
            with contextlib.suppress(OSError):
                os.unlink(tmp)
            raise

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
                                    close_fds=True)
        # We are its parent: reap it when it ends, or it lingers as a zombie that looks alive.
        threading.Thread(target=proc.wait, daemon=True, name=f"reap-{proc.pid}").start()
        return proc.pid

    def stream_lines(self, command: str, on_line: Callable[[str], None],
                     on_close: Callable[[int | None], None] | None = None) -> LineStream:
        return _LocalLineStream(command, on_line, on_close)

    def kill_group(self, pgid: int, sig: int = signal.SIGTERM) -> None:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(pgid, sig)


def _head(command: str, limit: int = 60) -> str:
    one_line = " ".join(command.split())
    return one_line if len(one_line) <= limit else one_line[: limit - 3] + "..."


# --------------------------------------------------------------------------- ssh

#: How often paramiko sends a keepalive, so idle links through NAT stay open and dead ones are noticed.
KEEPALIVE_SECONDS = 5
_CHUNK = 65536


def _sh(command: str) -> str:
    """Run ``command`` by /bin/sh whatever the user's login shell is (fish, csh, ...)."""
    return "/bin/sh -c " + shlex.quote(command)


class _SshLineStream(_ReaderLineStream):
    """One exec channel (no pty) whose stdout is split into lines by a reader thread.

    Closing the channel makes sshd close the command's pipes: it sees EOF on stdin and SIGPIPE on
    its next write. It is not signalled (paramiko#203), so a streamed command must exit on EOF.
    """

    def __init__(self, channel: paramiko.Channel, on_line: Callable[[str], None],
                 on_close: Callable[[int | None], None] | None) -> None:
        super().__init__(on_line, on_close, "ssh-stream")
        self._channel = channel
        self._reader.start()

    def _read(self) -> None:
        channel = self._channel
        channel.settimeout(0.5)
        try:
            while True:
                while channel.recv_stderr_ready():  # unread stderr would hold the shared window
                    self._stderr.add(channel.recv_stderr(_CHUNK))
                try:
                    chunk = channel.recv(_CHUNK)
                except TimeoutError:
                    continue
                if not chunk:
                    break
                self._splitter.feed(chunk)
            self._splitter.finish()
            if not self._closing.is_set() and channel.status_event.wait(5.0):
                status = channel.recv_exit_status()
                self._exit_code = status if status >= 0 else None
        except (OSError, EOFError, paramiko.SSHException):
            pass  # a dropped connection ends the stream like EOF does
        finally:
            with contextlib.suppress(Exception):
                while channel.recv_stderr_ready():
                    self._stderr.add(channel.recv_stderr(_CHUNK))
            channel.close()
            self._ended()

    def send(self, data: bytes) -> bool:
        channel = self._channel
        if self._closing.is_set() or channel.closed or not channel.send_ready():
            return False
        try:
            return channel.send(data) == len(data)
        except (OSError, EOFError, paramiko.SSHException):
            return False

    def close(self) -> None:
        if self._closing.is_set():
            return
        self._closing.set()
        self._channel.close()
        if threading.current_thread() is not self._reader:
            self._reader.join(5.0)


class SshHost(Host):
    """A host reached over one SSH connection (Fabric ``Connection`` on paramiko).

    Short commands, SFTP and at most one long stream share the connection, each on its own
    channel; sshd's ``MaxSessions`` (default 10) caps the channels open at once, which this usage
    stays far below. Host keys come only from the profile's known_hosts (see known_hosts.py).
    """

    def __init__(self, config: HostConfig, on_notice: Callable[[str], None] | None = None) -> None:
        self.name = config.name
        self.address = config.address
        self.config = config
        self.settings = config.ssh
        self.user = self.settings.user or getpass.getuser()
        self.port = self.settings.ssh_port
        self.known_hosts_path = os.path.expanduser(self.settings.known_hosts)
        self.identity_path = (os.path.expanduser(self.settings.identity_file)
                              if self.settings.identity_file else None)
        #: one-line notices for the user (a host key added under accept-new); also sent to on_notice
        self.notices: list[str] = []
        self._on_notice = on_notice
        self._connection: fabric.Connection | None = None
        self._channel_lock = threading.Lock()
        self._sftp: paramiko.SFTPClient | None = None
        self._home: str | None = None

    @property
    def label(self) -> str:
        return f"host {self.name} ({self.address}:{self.port})"

    # ---- connection

    def connect(self) -> None:
        if self.connected:
            return
        self.close()
        if self.identity_path is not None and not os.path.isfile(self.identity_path):
            raise HostError(f"{self.label}: identity_file {self.settings.identity_file} does not exist; "
                            f"fix identity_file in [ssh] or [hosts.{self.name}]")
        timeout = self.settings.connect_timeout
        connect_kwargs: dict[str, object] = {
            "timeout": timeout, "banner_timeout": timeout, "auth_timeout": timeout}
        if self.identity_path is not None:
            # exactly the configured key, so a refusal names the key that was refused
            connect_kwargs.update(key_filename=[self.identity_path], look_for_keys=False, allow_agent=False)
        # an explicit SSHConfig keeps ~/.ssh/config from silently rewriting address, port or user
        config = fabric.Config(ssh_config=paramiko.SSHConfig())
        connection = fabric.Connection(self.address, user=self.user, port=self.port, config=config,
                                       connect_kwargs=connect_kwargs)
        known_hosts.install_policy(connection.client, self.known_hosts_path,
                                   self.settings.host_key_policy, self._key_added)
        try:
            connection.open()
        except BaseException as exc:
            connection.close()
            if isinstance(exc, Exception):
                raise HostError(self._explain(exc)) from exc
            raise
        assert connection.transport is not None
        connection.transport.set_keepalive(KEEPALIVE_SECONDS)
        self._connection = connection

    def _key_added(self, key_name: str, key: paramiko.PKey) -> None:
        notice = (f"{self.label}: added new host key {key.get_name()} {known_hosts.fingerprint(key)} "
                  f"to {self.settings.known_hosts} (host_key_policy = \"accept-new\")")
        self.notices.append(notice)
        if self._on_notice is not None:
            self._on_notice(notice)

    def _explain(self, exc: Exception) -> str:
        """One actionable line for a failed connect."""
        kh = self.settings.known_hosts
        if isinstance(exc, known_hosts.UnknownHostKey):
            offered = f"{exc.key.get_name()} {known_hosts.fingerprint(exc.key)}"
            return (f"{self.label}: unknown host key ({offered}); "
                    f"add it with `ssh-keyscan -p {self.port} {self.address} >> {kh}` "
                    f"or set host_key_policy = \"accept-new\"")
        if isinstance(exc, paramiko.BadHostKeyException):
            name = known_hosts.host_key_name(self.address, self.port)
            offered = f"{exc.key.get_name()} {known_hosts.fingerprint(exc.key)}"
            return (f"{self.label}: host key CHANGED (offers {offered}, "
                    f"{kh} has {known_hosts.fingerprint(exc.expected_key)}); "
                    f"this may be an attack; if the host was reinstalled, remove the old key with "
                    f"`ssh-keygen -R '{name}' -f {kh}`")
        if isinstance(exc, paramiko.PasswordRequiredException):
            return (f"{self.label}: identity_file {self.settings.identity_file} is passphrase-protected; "
                    f"use a key without passphrase, or unset identity_file and load the key into ssh-agent")
        if isinstance(exc, paramiko.AuthenticationException):
            if self.settings.identity_file:
                return (f"{self.label}: refused key {self.settings.identity_file} for user {self.user}; "
                        f"add {self.settings.identity_file}.pub to ~{self.user}/.ssh/authorized_keys there "
                        f"or fix user / identity_file")
            return (f"{self.label}: refused every key from ssh-agent and ~/.ssh for user {self.user}; "
                    f"set identity_file or user")
        if isinstance(exc, paramiko.ssh_exception.NoValidConnectionsError | ConnectionRefusedError):
            return (f"{self.label}: connection refused; is sshd running there and is "
                    f"ssh_port = {self.port} right?")
        if isinstance(exc, TimeoutError):
            return (f"{self.label}: no answer within {self.settings.connect_timeout:g}s (connect_timeout); "
                    f"check the address and that the host is up")
        if isinstance(exc, socket.gaierror):
            return f"{self.label}: cannot resolve address {self.address}; fix hosts.{self.name}.address"
        if isinstance(exc, OSError):
            return f"{self.label}: unreachable ({exc.strerror or exc}); check the address and the network"
        if isinstance(exc, paramiko.SSHException) and any(
                sign in str(exc) for sign in ("banner", "No existing session", "Negotiation failed")):
            # the TCP port answered but no SSH handshake finished in time (or the peer hung up)
            return (f"{self.label}: no SSH answer within {self.settings.connect_timeout:g}s "
                    f"(connect_timeout); check that ssh_port = {self.port} is an SSH server "
                    f"and the host is up")
        if isinstance(exc, paramiko.SSHException) and "No authentication methods" in str(exc):
            return f"{self.label}: no SSH key to offer for user {self.user}; set identity_file"
        return f"{self.label}: SSH failed: {exc}"

    def close(self) -> None:
        sftp, self._sftp = self._sftp, None
        connection, self._connection = self._connection, None
        if sftp is not None:
            with contextlib.suppress(Exception):
                sftp.close()
        if connection is not None:
            with contextlib.suppress(Exception):
                connection.close()

    @property
    def connected(self) -> bool:
        connection = self._connection
        return (connection is not None and connection.transport is not None
                and connection.transport.is_active())

    def _open_channel(self) -> paramiko.Channel:
        if not self.connected:
            self.connect()
        assert self._connection is not None and self._connection.transport is not None
        try:
            with self._channel_lock:
                return self._connection.transport.open_session(timeout=self.settings.connect_timeout)
        except (paramiko.SSHException, OSError, EOFError) as exc:
            raise HostError(f"{self.label}: connection lost ({exc}); check the host and retry") from exc

    # ---- commands

    def run(self, command: str, timeout: float = 60.0, stdin: bytes | None = None) -> CommandResult:
        """Run on an exec channel of our own, so the deadline covers everything and output stays bytes
        until the end (invoke's runner would mirror threads and buffers we do not need here)."""
        deadline = time.monotonic() + timeout
        channel = self._open_channel()
        out, err = bytearray(), bytearray()
        try:
            channel.settimeout(timeout)
            channel.exec_command(_sh(command))
            if stdin:
                channel.sendall(stdin)
            channel.shutdown_write()
            channel.settimeout(0.25)
            while True:
                while channel.recv_stderr_ready():
                    err += channel.recv_stderr(_CHUNK)
                if time.monotonic() > deadline:
                    raise self._timed_out(command, timeout)
                try:
                    chunk = channel.recv(_CHUNK)
                except TimeoutError:
                    continue
                if not chunk:
                    break
                out += chunk
            if not channel.status_event.wait(max(0.0, deadline - time.monotonic())):
                raise self._timed_out(command, timeout)
            while channel.recv_stderr_ready():
                err += channel.recv_stderr(_CHUNK)
            status = channel.recv_exit_status()
        except (paramiko.SSHException, OSError, EOFError) as exc:
            raise HostError(
                f"{self.label}: connection lost while running `{_head(command)}` ({exc})") from exc
        finally:
            channel.close()
        # -1: the command was killed by a signal (sshd then sends exit-signal, not exit-status)
        return CommandResult(status if status >= 0 else 255, out.decode("utf-8", errors="replace"),
                             err.decode("utf-8", errors="replace"))

    def _timed_out(self, command: str, timeout: float) -> CommandTimeout:
        return CommandTimeout(f"{self.label}: `{_head(command)}` did not finish within {timeout:g}s")

    def _check(self, command: str, what: str, timeout: float = 60.0) -> CommandResult:
        result = self.run(command, timeout=timeout)
        if not result.ok:
            detail = (result.stderr.strip().splitlines() or [f"exit code {result.exit_code}"])[-1]
            raise HostError(f"{self.label}: cannot {what}: {detail}")
        return result

    def home(self) -> str:
        if self._home is None:
            home = self._check('printf %s "$HOME"', "find the home directory").stdout.strip()
            if not home.startswith("/"):
                raise HostError(f"{self.label}: $HOME is not set for user {self.user}")
            self._home = home
        return self._home

    def _absolute(self, path: str) -> str:
        if path == "~" or path.startswith("~/"):
            return self.home() + path[1:]
        return path

    def put_file(self, data: bytes, remote_path: str, mode: int = 0o644) -> None:
        path = self._absolute(remote_path)
        parent = posixpath.dirname(path)
        if parent:
            self._check(f"mkdir -p {shlex.quote(parent)}", f"create {parent}")
        tmp = f"{path}.tmp-{uuid.uuid4().hex[:12]}"
        try:
            sftp = self._sftp_client()
            with sftp.open(tmp, "wb") as remote:
                remote.set_pipelined(True)
                remote.write(data)
            sftp.chmod(tmp, mode)
            sftp.posix_rename(tmp, path)
        except (OSError, paramiko.SSHException, EOFError) as exc:
            with contextlib.suppress(Exception):
                self.run(f"rm -f {shlex.quote(tmp)}", timeout=10.0)
            raise HostError(f"{self.label}: cannot write {path}: {exc}") from exc

    def _sftp_client(self) -> paramiko.SFTPClient:
        if self._sftp is None or self._sftp.get_channel() is None or self._sftp.get_channel().closed:
            if not self.connected:
                self.connect()
            assert self._connection is not None
            with self._channel_lock:
                self._sftp = self._connection.client.open_sftp()
        return self._sftp

    def start_detached(self, command: str, log_path: str, cwd: str | None = None) -> int:
        log = self._absolute(log_path)
        lines = []
        if cwd is not None:
            lines.append(f"cd {shlex.quote(self._absolute(cwd))} || exit 97")
        if posixpath.dirname(log):
            lines.append(f"mkdir -p {shlex.quote(posixpath.dirname(log))} || exit 98")
        lines.append(f": >>{shlex.quote(log)} || exit 98")
        # setsid -f forks a child that is leader of a new session and process group; that child
        # prints its own pid and then execs the command in place, so pid == pgid. Not a shell
        # background job: those start with SIGINT/SIGQUIT ignored, which tasks would inherit.
        lines.append(
            "exec setsid -f /bin/sh -c "
            + shlex.quote('echo $$; exec /bin/sh -c "$1" </dev/null >>"$2" 2>&1')
            + f" distlaunch-task {shlex.quote(command)} {shlex.quote(log)}")
        result = self._check("\n".join(lines), f"start `{_head(command)}`")
        try:
            return int(result.stdout.split()[0])
        except (IndexError, ValueError):
            raise HostError(f"{self.label}: cannot start `{_head(command)}`: no pid reported "
                            f"({result.stderr.strip() or result.stdout.strip()!r})") from None

    def stream_lines(self, command: str, on_line: Callable[[str], None],
                     on_close: Callable[[int | None], None] | None = None) -> LineStream:
        channel = self._open_channel()
        try:
            channel.exec_command(_sh(command))
        except (paramiko.SSHException, OSError, EOFError) as exc:
            channel.close()
            raise HostError(f"{self.label}: cannot start `{_head(command)}` ({exc})") from exc
        return _SshLineStream(channel, on_line, on_close)

    def kill_group(self, pgid: int, sig: int = signal.SIGTERM) -> None:
        result = self.run(f"kill -s {_signal_name(sig)} -- -{int(pgid)}", timeout=30.0)
        if not result.ok and "no such process" not in result.stderr.lower():
            detail = (result.stderr.strip().splitlines() or [f"exit code {result.exit_code}"])[-1]
            raise HostError(f"{self.label}: cannot signal process group {pgid}: {detail}")


def make_host(config: HostConfig, on_notice: Callable[[str], None] | None = None) -> Host:
    """The Host for a profile's host entry; ``on_notice`` receives one-line notices (new host keys)."""
    if config.transport == "local":
        return LocalHost(config)
    return SshHost(config, on_notice=on_notice)
