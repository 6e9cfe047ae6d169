"""SshHost against a real private sshd: host key trust, authentication and connection errors.

Each failure must be one line naming the host and saying what to do. The tests of behaviour
(commands, streams, reconnects) run for both SSH transports: the built-in client and openssh.
"""

from __future__ import annotations

import socket
import subprocess
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from launcher.errors import HostError
from launcher.transport import Host, SshHost, make_host
from tests.sshd import PrivateSshd, free_port

pytestmark = pytest.mark.sshd

#: the SSH transports every behaviour test runs over
TRANSPORTS = pytest.mark.parametrize("transport", ["ssh", "openssh"])


@pytest.fixture
def server(private_sshd: PrivateSshd) -> PrivateSshd:
    """A server of this test's own: some tests stop it or change its files."""
    return private_sshd


def other_key(tmp_path: Path, name: str) -> Path:
    path = tmp_path / name
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(path)], check=True,
                   capture_output=True, timeout=30)
    return path


def connect_error(host: Host) -> str:
    with pytest.raises(HostError) as caught:
        host.connect()
    message = str(caught.value)
    assert "\n" not in message
    assert not host.connected
    return message


@TRANSPORTS
def test_connects_with_a_verified_host_key(server: PrivateSshd, transport: str) -> None:
    host = make_host(server.host_config("ssh1", transport=transport))
    assert type(host).__name__ == {"ssh": "SshHost", "openssh": "OpenSshHost"}[transport]
    host.connect()
    assert host.connected
    assert host.run("echo $USER-ok").stdout.strip() == f"{server.user}-ok"
    if isinstance(host, SshHost):
        # Nagle off: each request is several small SSH packets, which otherwise wait for a delayed ACK
        sock = host._connection.transport.sock  # type: ignore[union-attr]
        assert sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY) != 0
    host.close()
    host.close()  # idempotent
    assert not host.connected


def test_unknown_host_key_is_refused_with_the_keyscan_hint(server: PrivateSshd, tmp_path: Path) -> None:
    empty = tmp_path / "known_hosts"
    empty.write_text("")
    message = connect_error(SshHost(server.host_config("gpu1", known_hosts=str(empty))))
    assert message.startswith(f"host gpu1 (127.0.0.1:{server.port}): unknown host key (ssh-ed25519 SHA256:")
    assert f"`ssh-keyscan -p {server.port} 127.0.0.1 >> {empty}`" in message
    assert 'host_key_policy = "accept-new"' in message
    assert empty.read_text() == ""  # nothing was trusted behind the user's back


def test_accept_new_records_the_key_once_and_says_so(server: PrivateSshd, tmp_path: Path) -> None:
    known = tmp_path / "fresh" / "known_hosts"  # neither file nor directory exist yet
    heard: list[str] = []
    host = make_host(server.host_config("gpu1", known_hosts=str(known), host_key_policy="accept-new"),
                     on_notice=heard.append)
    assert isinstance(host, SshHost)
    host.connect()
    host.close()
    assert len(heard) == 1 and host.notices == heard
    assert heard[0].startswith(f"host gpu1 (127.0.0.1:{server.port}): added new host key ssh-ed25519 SHA256:")
    assert str(known) in heard[0]
    assert known.read_text() == server.host_key_line + "\n"

    again = SshHost(server.host_config("gpu1", known_hosts=str(known), host_key_policy="reject"))
    again.connect()  # the recorded key is now trusted under the strict policy too
    assert again.notices == []
    again.close()


@pytest.mark.parametrize("policy", ["reject", "accept-new"])
def test_changed_host_key_is_always_refused(server: PrivateSshd, tmp_path: Path, policy: str) -> None:
    impostor = other_key(tmp_path, "impostor")
    key_type, blob = Path(f"{impostor}.pub").read_text().split()[:2]
    known = tmp_path / "known_hosts"
    known.write_text(f"[127.0.0.1]:{server.port} {key_type} {blob}\n")
    config = server.host_config("gpu1", known_hosts=str(known), host_key_policy=policy)
    message = connect_error(SshHost(config))
    assert message.startswith(f"host gpu1 (127.0.0.1:{server.port}): host key CHANGED")
    assert "attack" in message
    assert f"ssh-keygen -R '[127.0.0.1]:{server.port}' -f {known}" in message
    assert known.read_text() == f"[127.0.0.1]:{server.port} {key_type} {blob}\n"


def test_refused_identity_names_key_and_user(server: PrivateSshd, tmp_path: Path) -> None:
    stranger = other_key(tmp_path, "id_stranger")
    message = connect_error(SshHost(server.host_config("gpu1", identity_file=str(stranger))))
    assert message.startswith(
        f"host gpu1 (127.0.0.1:{server.port}): refused key {stranger} for user {server.user};")
    assert "authorized_keys" in message


@TRANSPORTS
def test_missing_identity_file_is_named(server: PrivateSshd, tmp_path: Path, transport: str) -> None:
    config = server.host_config("gpu1", identity_file=str(tmp_path / "id_nope"), transport=transport)
    message = connect_error(make_host(config))
    assert f"identity_file {tmp_path / 'id_nope'} does not exist" in message
    assert "[hosts.gpu1]" in message


def test_closed_port_is_reported_quickly(server: PrivateSshd) -> None:
    port = free_port()
    started = time.monotonic()
    message = connect_error(SshHost(server.host_config("gpu1", ssh_port=port)))
    assert time.monotonic() - started < 3
    assert message == (f"host gpu1 (127.0.0.1:{port}): connection refused; "
                       f"is sshd running there and is ssh_port = {port} right?")


def test_silent_server_times_out_after_connect_timeout(server: PrivateSshd) -> None:
    with socket.socket() as silent:  # accepts TCP (kernel backlog) but never sends a banner
        silent.bind(("127.0.0.1", 0))
        silent.listen(1)
        port = silent.getsockname()[1]
        started = time.monotonic()
        message = connect_error(SshHost(server.host_config("gpu1", ssh_port=port, connect_timeout=1.0)))
        elapsed = time.monotonic() - started
    assert 0.9 < elapsed < 5
    assert message.startswith(f"host gpu1 (127.0.0.1:{port}): ")
    assert "1s (connect_timeout)" in message


@TRANSPORTS
def test_connection_loss_is_a_host_error_and_reconnect_works(server: PrivateSshd, transport: str) -> None:
    host = make_host(server.host_config("gpu1", transport=transport))
    host.connect()
    server.stop()  # the listener goes; the existing session is kept by its own sshd child
    server.start()
    assert host.run("echo still").stdout == "still\n"
    host.close()
    assert host.run("echo again").stdout == "again\n"  # run reconnects a closed host
    host.close()


@TRANSPORTS
def test_commands_from_many_threads_share_the_connection_beside_a_stream(server: PrivateSshd,
                                                                         transport: str) -> None:
    host = make_host(server.host_config("gpu1", transport=transport))
    host.connect()
    lines: list[str] = []
    stream = host.stream_lines("echo started; echo warn >&2; cat", lines.append)
    try:
        with ThreadPoolExecutor(max_workers=8) as pool:
            results = list(pool.map(lambda i: host.run(f"echo {i}").stdout, range(40)))
        assert results == [f"{i}\n" for i in range(40)]
        assert lines == ["started"]
        assert stream.alive
    finally:
        stream.close()
    assert stream.stderr_tail() == "warn\n"
    host.close()


@TRANSPORTS
def test_a_large_send_waits_for_a_command_that_reads_late(server: PrivateSshd, transport: str) -> None:
    """The agent upload rides a stream's stdin: more than the server's window (OpenSSH: 2 MiB)
    to a command that reads only after a while must still arrive whole."""
    import queue as queue_module

    host = make_host(server.host_config("gpu1", transport=transport))
    host.connect()
    lines: queue_module.Queue[str] = queue_module.Queue()
    stream = host.stream_lines("sleep 1.5; head -c 4194304 | wc -c", lines.put)
    try:
        assert stream.send(b"x" * 4194304, timeout=30.0)
        assert lines.get(timeout=30).strip() == "4194304"
    finally:
        stream.close()
        host.close()


@TRANSPORTS
def test_a_command_is_given_a_large_stdin_whole_and_in_linear_time(server: PrivateSshd, transport: str) -> None:
    """A checkpoint pushed to a host rides ``run``'s stdin: 64 MiB arrive whole, in seconds (paramiko's
    sendall copied what was left of a bytes object at every packet: 55 s for 64 MiB)."""
    host = make_host(server.host_config("gpu1", transport=transport))
    host.connect()
    try:
        began = time.monotonic()
        result = host.run("wc -c", timeout=60, stdin=b"x" * (64 << 20))
        assert result.ok and result.stdout.strip() == str(64 << 20)
        assert time.monotonic() - began < 20
    finally:
        host.close()
