"""What the built-in client needs to honour ssh_config beyond HostName/User/Port: CertificateFile,
IdentityAgent, ProxyCommand and ServerAliveCountMax (see sshoptions.py for what is refused)."""

from __future__ import annotations

import contextlib
import os
import shlex
import socket
import threading

import paramiko

from launcher.transport.sshconfig import Endpoint


class SocketAgent(paramiko.agent.AgentSSH):
    """The ssh-agent at an IdentityAgent path (paramiko's Agent reads only $SSH_AUTH_SOCK)."""

    def __init__(self, path: str) -> None:
        super().__init__()
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            sock.connect(path)
        except OSError:
            sock.close()
            return  # as ssh: an agent that is not there offers no keys
        self._connect(sock)

    def close(self) -> None:
        self._close()


def certified_key(endpoint: Endpoint) -> paramiko.PKey | None:
    """The first identity key that one of ``endpoint``'s CertificateFiles certifies, the
    certificate loaded into it; None where no pair matches (the plain keys are tried then)."""
    certs = [os.path.expanduser(path) for path in endpoint.certificate_files]
    certs = [path for path in certs if os.path.isfile(path)]
    if not certs:
        return None
    for key_path in (os.path.expanduser(path) for path in endpoint.identity_files):
        if not os.path.isfile(key_path):
            continue
        key = paramiko.PKey.from_path(key_path)  # a passphrase-protected key raises, explained by the caller
        for cert in certs:
            with contextlib.suppress(ValueError):  # this certificate is for another key
                key.load_certificate(cert)
                return key
    return None


def _received(transport: paramiko.Transport) -> int | None:
    """The packets read from the server so far (paramiko's count, reset at a rekey: any change is
    traffic); None where paramiko does not keep it."""
    packets = getattr(transport.packetizer, "_Packetizer__received_packets", None)
    return packets if isinstance(packets, int) else None


def proxy_command(command: str) -> paramiko.ProxyCommand:
    """ProxyCommand as ssh runs it: by a shell, which execs it (paramiko alone would split it)."""
    return paramiko.ProxyCommand("/bin/sh -c " + shlex.quote("exec " + command))


class KeepaliveWatch:
    """ServerAliveInterval/ServerAliveCountMax as ssh applies them: every ``interval`` seconds a
    ``keepalive@openssh.com`` request that wants a reply (a live server answers, if only with a
    refusal); after ``count`` intervals in a row in which nothing at all came from the server (no
    answer, no data: a bulk copy's data delays the answer behind it and is itself a sign of life),
    the link is closed, and with it every channel waiting on it.

    It reads paramiko's count of received packets and sends through its transport's own queue,
    neither of them public: where this paramiko lacks them (``supported``), the caller falls back
    to paramiko's plain keepalive, which never closes a link."""

    def __init__(self, transport: paramiko.Transport, interval: float, count: int) -> None:
        self._transport = transport
        self._interval = interval
        self._count = count
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True, name="ssh-keepalive")
        self._thread.start()

    @property
    def alive(self) -> bool:
        return self._thread.is_alive()

    @staticmethod
    def supported(transport: paramiko.Transport) -> bool:
        return _received(transport) is not None and callable(getattr(transport, "_send_user_message", None))

    def _ask(self) -> None:
        message = paramiko.Message()
        message.add_byte(paramiko.common.cMSG_GLOBAL_REQUEST)
        message.add_string("keepalive@openssh.com")
        message.add_boolean(True)  # want a reply: global_request(wait=True) would block this thread on it
        self._transport._send_user_message(message)

    def _run(self) -> None:
        missed = 0
        transport = self._transport
        while transport.is_active():
            before = _received(transport)
            with contextlib.suppress(Exception):
                self._ask()
            if self._stop.wait(self._interval):
                return
            missed = 0 if _received(transport) != before else missed + 1
            if missed >= self._count:
                transport.close()  # as ssh: "Timeout, server not responding"
                return

    def stop(self) -> None:
        self._stop.set()
