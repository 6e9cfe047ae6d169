"""transport = "openssh" against real sshds: the system ssh client (its version in sshd's log), one
authentication per master, host keys under the profile's policy, ssh_config settings the built-in
client refuses. A whole `up` + `down` over it (at most 3 authentications): test_up_ssh.py."""

from __future__ import annotations

import os
import shutil
import signal
import stat
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from launcher.errors import HostError
from launcher.model import HostConfig, SshSettings
from launcher.transport import make_host
from launcher.transport.openssh import OpenSshHost
from tests.sshd import PrivateSshd, require_sshd

pytestmark = [pytest.mark.sshd]


@pytest.fixture
def server() -> Iterator[PrivateSshd]:
    """A server logging at DEBUG1, where sshd names the client's software version."""
    require_sshd()
    with PrivateSshd(log_level="DEBUG1") as sshd:
        yield sshd


def logins(server: PrivateSshd) -> int:
    return server.log_path.read_text().count("Accepted publickey")


def openssh(server: PrivateSshd, **overrides: object) -> OpenSshHost:
    host = make_host(server.host_config("o1", transport="openssh", **overrides))
    assert isinstance(host, OpenSshHost)
    return host


def test_every_command_rides_one_authenticated_master(server: PrivateSshd) -> None:
    host = openssh(server)
    host.connect()
    socket_path = host.socket_path
    try:
        directory = Path(socket_path).parent
        assert stat.S_IMODE(directory.stat().st_mode) == 0o700
        assert len(socket_path) + 17 < 104  # the unix socket path limit, with the master's temporary suffix
        lines: list[str] = []
        stream = host.stream_lines("echo up; cat", lines.append)
        for i in range(10):
            assert host.run(f"echo {i}").stdout == f"{i}\n"
        pid = host.start_detached("sleep 30", str(server.dir / "sleep.log"))
        os.killpg(pid, signal.SIGTERM)
        assert host.home().startswith("/")
        stream.close()
        assert lines == ["up"]
    finally:
        host.close()
    assert logins(server) == 1
    log = server.log_path.read_text()
    assert "remote software version OpenSSH_" in log and "paramiko" not in log
    assert not os.path.exists(socket_path)  # close ended the master it started
    assert not directory.exists()  # and removed the temporary control dir (no run: as for `check`)


@pytest.fixture
def short_home(monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """A state dir short enough for the run's sockets to live in its run dirs (pytest's tmp_path is not)."""
    home = Path(tempfile.mkdtemp(prefix="dlh-", dir="/tmp"))
    monkeypatch.setenv("DISTLAUNCH_HOME", str(home))
    try:
        yield home
    finally:
        shutil.rmtree(home, ignore_errors=True)


def test_a_second_process_finds_the_master_of_the_run(server: PrivateSshd, short_home: Path) -> None:
    (short_home / "runs" / "r1").mkdir(parents=True)
    first, second = openssh(server), openssh(server)
    first._run_id = second._run_id = "r1"
    first.connect()
    try:
        second.connect()  # as `down` would, in another process: the socket of the run answers
        assert second.run("echo hi").stdout == "hi\n"
        assert first.socket_path == second.socket_path
        assert first.socket_path.startswith(str(short_home / "runs" / "r1" / "ssh"))
        second.close()  # not its master: left for the run
        assert first.run("echo still").stdout == "still\n"
        second.end_run()  # the run is over: the master goes whoever started it
        assert not os.path.exists(first.socket_path)
    finally:
        first.close()
    assert logins(server) == 1


def test_an_unknown_host_key_is_refused_under_reject(server: PrivateSshd, tmp_path: Path) -> None:
    empty = tmp_path / "known_hosts"
    empty.write_text("")
    with pytest.raises(HostError) as caught:
        openssh(server, known_hosts=str(empty)).connect()
    message = str(caught.value)
    assert "\n" not in message and message.startswith("host o1 ")
    assert "unknown host key" in message and "Host key verification failed" in message
    assert 'host_key_policy = "accept-new"' in message
    assert empty.read_text() == "" and logins(server) == 0


def test_accept_new_records_the_key_and_says_so(server: PrivateSshd, tmp_path: Path) -> None:
    known = tmp_path / "known_hosts"
    heard: list[str] = []
    host = make_host(server.host_config("o1", transport="openssh", known_hosts=str(known),
                                        host_key_policy="accept-new"), on_notice=heard.append)
    host.connect()
    host.close()
    assert len(heard) == 1 and "Permanently added" in heard[0] and heard[0].startswith("host o1 ")
    assert server.host_key_line.split()[-1] in known.read_text()


def test_a_setting_refused_by_the_builtin_client_is_left_to_ssh(server: PrivateSshd, tmp_path: Path) -> None:
    config = tmp_path / "ssh_config"
    # a PKCS#11 library that is not there: ssh says so and goes on with the key file, as with a card out
    config.write_text(f"Host card\n    HostName {server.address}\n    Port {server.port}\n    User {server.user}\n"
                      f"    IdentityFile {server.identity_file}\n    PKCS11Provider {tmp_path}/no-such-pkcs11.so\n"
                      f"    UserKnownHostsFile {server.known_hosts}\n")
    settings = SshSettings(ssh_config=str(config), unset=("user", "identity_file", "ssh_port", "known_hosts",
                                                          "host_key_policy", "connect_timeout"))
    with pytest.raises(HostError, match="PKCS11Provider"):
        make_host(HostConfig(name="c", address="card", ssh=settings)).connect()
    host = make_host(HostConfig(name="c", address="card", transport="openssh", ssh=settings))
    host.connect()
    try:
        assert host.run("echo card").stdout == "card\n"
    finally:
        host.close()


def test_a_deep_run_dir_puts_the_socket_under_tmp(server: PrivateSshd, tmp_path: Path,
                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    home = tmp_path / ("deep-" * 12) / "home"  # a socket under it would pass the ~104-byte limit
    monkeypatch.setenv("DISTLAUNCH_HOME", str(home))
    run_id = "run-with-a-long-name-20261124-153800"
    (home / "runs" / run_id).mkdir(parents=True)
    host = openssh(server)
    host._run_id = run_id
    host.connect()
    try:
        assert host.run("echo short").stdout == "short\n"
        assert host.socket_path.startswith("/tmp/distlaunch-ssh-") and len(host.socket_path) + 17 < 104
        assert stat.S_IMODE(Path(host.socket_path).parent.stat().st_mode) == 0o700
    finally:
        host.close()
