"""A private OpenSSH server on a loopback port, with throw-away host and user keys.

Usable from pytest (the ``sshd`` fixture below; register with ``pytest_plugins = ["tests.sshd"]``)
and from plain scripts (benchmarks start several)::

    with PrivateSshd() as server:
        host = SshHost(server.host_config("ssh1"))

Where /usr/sbin/sshd is missing the fixture skips with the reason, unless
``DISTLAUNCH_REQUIRE_SSHD=1`` (CI), where it fails instead.
"""

from __future__ import annotations

import contextlib
import dataclasses
import getpass
import os
import shutil
import socket
import subprocess
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from types import TracebackType
from typing import Any

import pytest

from launcher.model import HostConfig, SshSettings

SSHD = "/usr/sbin/sshd"
START_TIMEOUT = 15.0


class SshdUnavailable(RuntimeError):
    """This machine cannot run a private sshd (binary missing)."""


def free_port(address: str = "127.0.0.1") -> int:
    with socket.socket() as probe:
        probe.bind((address, 0))
        return int(probe.getsockname()[1])


def _keygen(path: Path, comment: str) -> None:
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", comment, "-f", str(path)],
                   check=True, stdin=subprocess.DEVNULL, capture_output=True, timeout=30)


class PrivateSshd:
    """One sshd process serving ``address``:``port`` for the current user only."""

    def __init__(self, address: str = "127.0.0.1", port: int | None = None,
                 extra_config: str = "", netns: str | None = None, log_level: str = "VERBOSE",
                 sftp: bool = True, authorized_keys: bool = True, kbd_interactive: bool = False) -> None:
        """``netns``: run sshd inside that network namespace (``ip netns exec``; root only).
        ``log_level``: DEBUG1 also logs forwarded (direct-tcpip) connections.
        ``sftp``: False serves no SFTP subsystem (as some hardened hosts).
        ``authorized_keys``: False reads none (``AuthorizedKeysFile none``: certificates only).
        ``kbd_interactive``: offer keyboard-interactive (with ``AuthenticationMethods`` in
        ``extra_config``: a host that asks for it alone)."""
        if not os.path.exists(SSHD):
            raise SshdUnavailable(f"{SSHD} not found (install openssh-server)")
        self.address = address
        self.netns = netns
        self.port = port or free_port(address)
        self.user = getpass.getuser()
        self._tmp = tempfile.TemporaryDirectory(prefix="distlaunch-sshd-")
        self.dir = Path(self._tmp.name)
        self.host_key = self.dir / "ssh_host_ed25519_key"
        self.identity_file = self.dir / "id_ed25519"
        self.known_hosts = self.dir / "known_hosts"
        self.authorized_keys = self.dir / "authorized_keys"
        self.config_path = self.dir / "sshd_config"
        self.log_path = self.dir / "sshd.log"
        self._extra_config = extra_config
        self._log_level = log_level
        self._sftp = sftp
        self._authorized = authorized_keys
        self._kbd = kbd_interactive
        self._proc: subprocess.Popen[bytes] | None = None
        self._prepare()

    def _prepare(self) -> None:
        _keygen(self.host_key, "distlaunch-test-host")
        _keygen(self.identity_file, "distlaunch-test-user")
        self.authorized_keys.write_text(Path(f"{self.identity_file}.pub").read_text())
        name = self.address if self.port == 22 else f"[{self.address}]:{self.port}"  # as ssh writes it
        self.host_key_line = f"{name} {self._public_key(self.host_key)}"
        self.known_hosts.write_text(self.host_key_line + "\n")
        self.config_path.write_text("\n".join([
            f"ListenAddress {self.address}",
            f"Port {self.port}",
            f"HostKey {self.host_key}",
            f"AuthorizedKeysFile {self.authorized_keys if self._authorized else 'none'}",
            f"PidFile {self.dir / 'sshd.pid'}",
            "PasswordAuthentication no",
            f"KbdInteractiveAuthentication {'yes' if self._kbd else 'no'}",
            "PubkeyAuthentication yes",
            "UsePAM no",
            "StrictModes no",
            "PermitRootLogin prohibit-password",
            "MaxSessions 64",
            "MaxStartups 100:30:200",
            f"LogLevel {self._log_level}",
            "Subsystem sftp internal-sftp" if self._sftp else "",
            self._extra_config,
            "",
        ]))

    @staticmethod
    def _public_key(private_key: Path) -> str:
        key_type, blob = Path(f"{private_key}.pub").read_text().split()[:2]
        return f"{key_type} {blob}"

    def start(self) -> PrivateSshd:
        os.makedirs("/run/sshd", mode=0o755, exist_ok=True)  # privilege separation dir
        prefix = ["ip", "netns", "exec", self.netns] if self.netns else []
        self._proc = subprocess.Popen(
            [*prefix, SSHD, "-f", str(self.config_path), "-D", "-e", "-E", str(self.log_path)],
            stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        deadline = time.monotonic() + START_TIMEOUT
        while time.monotonic() < deadline:
            if self._proc.poll() is not None:
                raise RuntimeError(f"sshd exited with {self._proc.returncode}: {self.log_tail()}")
            if self._answers():
                return self
            time.sleep(0.05)  # polling a port that has no readiness event
        self.stop()
        raise RuntimeError(f"sshd did not accept connections within {START_TIMEOUT}s: {self.log_tail()}")

    def _answers(self) -> bool:
        try:
            with socket.create_connection((self.address, self.port), timeout=1.0) as conn:
                conn.settimeout(1.0)
                return conn.recv(4).startswith(b"SSH-")
        except OSError:
            return False

    def stop(self) -> None:
        proc, self._proc = self._proc, None
        if proc is not None and proc.poll() is None:
            proc.terminate()
            try:
                proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(timeout=10)

    def cleanup(self) -> None:
        self.stop()
        self._tmp.cleanup()

    @property
    def running(self) -> bool:
        return self._proc is not None and self._proc.poll() is None

    def log_tail(self, lines: int = 20) -> str:
        with contextlib.suppress(OSError):
            return " | ".join(self.log_path.read_text(errors="replace").splitlines()[-lines:])
        return ""

    def host_config(self, name: str = "ssh1", **overrides: Any) -> HostConfig:
        """A HostConfig that reaches this server; ``overrides`` may set any SshSettings field
        (``known_hosts=...``) or HostConfig field (``gpus=(0,)``)."""
        ssh_fields = {f.name for f in dataclasses.fields(SshSettings)}
        ssh_overrides = {k: v for k, v in overrides.items() if k in ssh_fields}
        host_overrides = {k: v for k, v in overrides.items() if k not in ssh_fields}
        settings = SshSettings(user=self.user, identity_file=str(self.identity_file),
                               known_hosts=str(self.known_hosts), host_key_policy="reject",
                               connect_timeout=10.0, ssh_port=self.port)
        settings = dataclasses.replace(settings, **ssh_overrides)
        config = HostConfig(name=name, address=self.address, transport="ssh", ssh=settings)
        return dataclasses.replace(config, **host_overrides)

    def __enter__(self) -> PrivateSshd:
        return self.start()

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.cleanup()


def sshd_available() -> tuple[bool, str]:
    if not os.path.exists(SSHD):
        return False, f"{SSHD} not found (install openssh-server)"
    if shutil.which("ssh-keygen") is None:
        return False, "ssh-keygen not found (install openssh-client)"
    return True, ""


def require_sshd() -> None:
    """Skip the calling test where sshd cannot run here; fail instead under DISTLAUNCH_REQUIRE_SSHD=1."""
    ok, reason = sshd_available()
    if ok:
        return
    if os.environ.get("DISTLAUNCH_REQUIRE_SSHD") == "1":
        pytest.fail(f"DISTLAUNCH_REQUIRE_SSHD=1 but {reason}")
    pytest.skip(reason)


@pytest.fixture(scope="session")
def sshd() -> Iterator[PrivateSshd]:
    """One private sshd for the whole session. Tests must not change its files; use
    ``private_sshd`` for a server of your own."""
    require_sshd()
    with PrivateSshd() as server:
        yield server


@pytest.fixture
def private_sshd() -> Iterator[PrivateSshd]:
    """A fresh private sshd for one test (its keys and known_hosts may be changed freely)."""
    require_sshd()
    with PrivateSshd() as server:
        yield server
