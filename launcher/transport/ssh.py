"""SshHost: a host reached over one SSH connection (Fabric ``Connection`` on paramiko)."""

from __future__ import annotations

import contextlib
import logging
import os
import socket
import threading
import time
from collections.abc import Callable

import fabric
import paramiko

from launcher.errors import HostError
from launcher.model import HostConfig
from launcher.transport import known_hosts, shellcmds, sshauth, sshconfig
from launcher.transport.base import (
    CommandResult,
    CommandTimeout,
    LineStream,
    ReaderLineStream,
    head,
)
from launcher.transport.sshexplain import explain_failure

# paramiko logs connection trouble itself; without a handler Python would print it to stderr,
# over the dashboard. Errors reach the user as HostError instead.
logging.getLogger("paramiko").addHandler(logging.NullHandler())

#: The keepalive where ssh_config sets no ServerAliveInterval, as the openssh transport's: one every
#: 5 s (idle links through NAT stay open), and a link silent for 3 in a row is closed, so a cut link
#: fails a copy or a command under way within ~15 s, not at its own timeout (600 s for a checkpoint)
KEEPALIVE_SECONDS = 5
KEEPALIVE_COUNT = 3
_CHUNK = 65536


def _tcp_connect(hostname: str, port: int, timeout: float) -> socket.socket:
    """The TCP connection an SSH session runs on, with Nagle's algorithm off from the first packet.

    SSH sends its requests as several small writes (a channel request, then stdin, then EOF):
    with Nagle on, each write after the first waits for the ACK of the one before, which the
    peer delays by up to 40 ms (delayed ACK). That made every exec round trip cost ~45 ms on
    loopback, and the handshake ~70 ms; without it they take 5-15 and ~30 ms."""
    sock = socket.create_connection((hostname, port), timeout=timeout)
    with contextlib.suppress(OSError):
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    return sock


class _SshLineStream(ReaderLineStream):
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

    def send(self, data: bytes, timeout: float | None = None) -> bool:
        channel = self._channel
        if self._closing.is_set() or channel.closed:
            return False
        if timeout is None:
            if not channel.send_ready():
                return False
            try:
                channel.sendall(data)  # whole: a request line cut short would be read as another line
                return True
            except (OSError, EOFError, paramiko.SSHException):
                return False
        # channel.send waits for the peer's window up to the channel's timeout (the reader's 0.5 s)
        # and sends what fits: retried here up to ``timeout`` without progress, so a server with a
        # small window (Dropbear: 24 KiB) or a host slow to start reading still gets all of it
        sent = 0
        deadline = time.monotonic() + timeout
        try:
            while sent < len(data):
                try:
                    n = channel.send(data[sent:sent + _CHUNK])
                except TimeoutError:
                    if time.monotonic() >= deadline:
                        raise
                    continue
                if n <= 0:
                    raise EOFError("channel closed")
                sent += n
                deadline = time.monotonic() + timeout
            return True
        except (OSError, EOFError, paramiko.SSHException):
            if sent:
                self.close()
            return False

    def end(self, timeout: float = 2.0) -> None:
        # closing a channel does not wait for the remote command: EOF first, then its exit status
        if not self._closing.is_set() and threading.current_thread() is not self._reader:
            with contextlib.suppress(OSError, EOFError, paramiko.SSHException):
                self._channel.shutdown_write()
                self._channel.status_event.wait(timeout)
        self.close()

    def close(self) -> None:
        if self._closing.is_set():
            return
        self._closing.set()
        self._channel.close()
        if threading.current_thread() is not self._reader:
            self._reader.join(5.0)


class SshHost(shellcmds.ShellHost):
    """A host reached over one SSH connection (Fabric ``Connection`` on paramiko).

    Short commands and at most one long stream share the connection, each on its own
    channel; sshd's ``MaxSessions`` (default 10) caps the channels open at once, which this usage
    stays far below. Host keys come only from the profile's known_hosts (see known_hosts.py).
    """

    def __init__(self, config: HostConfig, on_notice: Callable[[str], None] | None = None) -> None:
        super().__init__(config, on_notice)
        self._connection: fabric.Connection | None = None
        self._jumps: list[fabric.Connection] = []
        self._watches: list[sshauth.KeepaliveWatch] = []
        self._channel_lock = threading.Lock()

    @property
    def label(self) -> str:
        return f"host {self.name} ({self.address}:{self.port})"

    # ---- connection

    def connect(self) -> None:
        if self.connected:
            return
        self.close()
        route = self.resolve()
        gateway: fabric.Connection | None = None
        try:
            for hop in route.jumps:
                gateway = self._open(hop, route, gateway, f"{self.label}: jump host {hop.alias} "
                                     f"({hop.hostname}:{hop.port})")
                self._jumps.append(gateway)
            self._connection = self._open(route.target, route, gateway, self.label)
        except BaseException:
            self.close()
            raise

    def _open(self, endpoint: sshconfig.Endpoint, route: sshconfig.Route,
              gateway: fabric.Connection | None, label: str) -> fabric.Connection:
        """Authenticate to one server (through ``gateway``'s direct-tcpip channel when given)."""
        if endpoint is route.target:
            self.check_identity_file()
        keys = [os.path.expanduser(path) for path in endpoint.identity_files]
        keys = [path for path in keys if os.path.isfile(path)]  # as ssh, skip config keys not there
        timeout = route.connect_timeout
        agent = endpoint.identity_agent
        use_agent = not endpoint.identities_only and agent != "none" and bool(
            agent or os.environ.get("SSH_AUTH_SOCK"))
        connect_kwargs: dict[str, object] = {
            "timeout": timeout, "banner_timeout": timeout, "auth_timeout": timeout,
            "compress": route.compression}
        if keys or endpoint.identities_only:
            # the configured keys first; the agent after them, since it may hold the decrypted key
            connect_kwargs.update(key_filename=keys, look_for_keys=False, allow_agent=use_agent)
        elif agent == "none":
            connect_kwargs.update(allow_agent=False)
        # an empty SSHConfig: sshconfig.resolve already applied ~/.ssh/config as OpenSSH does
        config = fabric.Config(ssh_config=paramiko.SSHConfig())
        connection = fabric.Connection(endpoint.hostname, user=endpoint.user, port=endpoint.port,
                                       config=config, connect_kwargs=connect_kwargs, gateway=gateway)
        known_hosts.install_policy(connection.client, os.path.expanduser(route.known_hosts),
                                   route.host_key_policy, self._key_added,
                                   extra=[os.path.expanduser(path) for path in route.extra_known_hosts],
                                   alias=route.host_key_alias if endpoint is route.target else None,
                                   name=known_hosts.host_key_name(endpoint.hostname, endpoint.port))
        if agent and agent != "none" and use_agent:
            connection.client._agent = sshauth.SocketAgent(agent)
        sock: socket.socket | paramiko.ProxyCommand | None = None
        try:
            if (certified := sshauth.certified_key(endpoint)) is not None:
                connection.connect_kwargs["pkey"] = certified
            if gateway is None and endpoint is route.target and route.proxy_command:
                sock = sshauth.proxy_command(route.proxy_command)
                connection.connect_kwargs["sock"] = sock
            elif gateway is None:
                sock = _tcp_connect(endpoint.hostname, endpoint.port, timeout)
                connection.connect_kwargs["sock"] = sock
            connection.open()
        except BaseException as exc:
            connection.client.close()
            if sock is not None:
                sock.close()
            if isinstance(exc, Exception):
                why = explain_failure(exc, endpoint, route, label, self.name, self.settings.ssh_config)
                raise HostError(why) from exc
            raise
        assert connection.transport is not None
        # ServerAliveInterval as set, else the launcher's: a link that stops answering is cut
        interval, count = ((endpoint.keepalive_seconds, endpoint.keepalive_count) if endpoint.keepalive_seconds
                           else (KEEPALIVE_SECONDS, KEEPALIVE_COUNT))
        if sshauth.KeepaliveWatch.supported(connection.transport):
            self._watches = [w for w in self._watches if w.alive]
            self._watches.append(sshauth.KeepaliveWatch(connection.transport, interval, count))
        else:
            connection.transport.set_keepalive(interval)
        return connection

    def _key_added(self, key_name: str, key: paramiko.PKey) -> None:
        notice = (f"{self.label}: added new host key {key.get_name()} {known_hosts.fingerprint(key)} "
                  f"for {key_name} to {self.route.known_hosts if self.route else self.settings.known_hosts} "
                  f"(host_key_policy = \"accept-new\")")
        self.notice(notice)

    def close(self) -> None:
        connection, self._connection = self._connection, None
        jumps, self._jumps = self._jumps, []
        for watch in self._watches:
            watch.stop()
        self._watches.clear()
        for link in [connection, *reversed(jumps)]:
            if link is not None:
                with contextlib.suppress(Exception):
                    link.client.close()

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
            channel.exec_command(shellcmds.sh(command))
            if stdin:
                channel.sendall(memoryview(stdin))  # paramiko slices what is left: a copy of bytes each time
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
                f"{self.label}: connection lost while running `{head(command)}` ({exc})") from exc
        finally:
            channel.close()
        # -1: the command was killed by a signal (sshd then sends exit-signal, not exit-status)
        return CommandResult(status if status >= 0 else 255, out.decode("utf-8", errors="replace"),
                             err.decode("utf-8", errors="replace"))

    def _timed_out(self, command: str, timeout: float) -> CommandTimeout:
        return CommandTimeout(f"{self.label}: `{head(command)}` did not finish within {timeout:g}s")

    def stream_lines(self, command: str, on_line: Callable[[str], None],
                     on_close: Callable[[int | None], None] | None = None) -> LineStream:
        channel = self._open_channel()
        try:
            channel.exec_command(shellcmds.sh(command))
        except (paramiko.SSHException, OSError, EOFError) as exc:
            channel.close()
            raise HostError(f"{self.label}: cannot start `{head(command)}` ({exc})") from exc
        return _SshLineStream(channel, on_line, on_close)
