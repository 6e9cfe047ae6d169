"""~/.ssh/config as OpenSSH applies it: a Host alias reached through ProxyJump on a second private
sshd, each hop's host key verified; ssh-agent keys; an encrypted key without agent in one line."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from launcher.errors import HostError
from launcher.model import HostConfig, SshSettings
from launcher.transport import SshHost
from tests.integration.jobtools import REPO, cli, kill_run_processes, pids_with_run_id, read_events
from tests.profiles import build_profile, ps_mnist_command, ssh_host
from tests.sshd import PrivateSshd, free_port, require_sshd

pytestmark = [pytest.mark.sshd]


@pytest.fixture
def two_sshds() -> Iterator[tuple[PrivateSshd, PrivateSshd]]:
    """(jump, target): the jump logs at DEBUG1, where sshd names every forwarded connection."""
    require_sshd()
    with PrivateSshd(log_level="DEBUG1") as jump, PrivateSshd() as target:
        yield jump, target


def ssh_config(tmp: Path, jump: PrivateSshd, target: PrivateSshd) -> Path:
    path = tmp / "ssh_config"
    path.write_text(f"""
Host target-alias
    HostName {target.address}
    Port {target.port}
    User {target.user}
    IdentityFile {target.identity_file}
    ProxyJump bastion

Host bastion
    HostName {jump.address}
    Port {jump.port}
    IdentityFile {jump.identity_file}
""")
    return path


def known_hosts(tmp: Path, *servers: PrivateSshd) -> Path:
    path = tmp / "known_hosts"
    path.write_text("".join(server.host_key_line + "\n" for server in servers))
    return path


def alias_host(config: Path, kh: Path) -> HostConfig:
    # as the parser makes it: only ssh_config and known_hosts set, the rest left to the config
    unset = ("user", "identity_file", "ssh_port", "connect_timeout", "host_key_policy")
    return HostConfig(name="t", address="target-alias",
                      ssh=SshSettings(known_hosts=str(kh), ssh_config=str(config), unset=unset))


def test_an_alias_is_reached_through_its_proxyjump(tmp_path: Path,
                                                   two_sshds: tuple[PrivateSshd, PrivateSshd]) -> None:
    jump, target = two_sshds
    host = SshHost(alias_host(ssh_config(tmp_path, jump, target), known_hosts(tmp_path, jump, target)))
    try:
        host.connect()
        assert host.run("echo $SSH_CONNECTION").stdout.split()[3] == str(target.port)
        route = host.route
        assert route is not None
        assert route.describe() == (f"{target.user}@{target.address}:{target.port} via "
                                    f"{jump.user}@{jump.address}:{jump.port}")
    finally:
        host.close()
    log = jump.log_path.read_text()
    assert "direct-tcpip" in log and f"port {target.port}" in log


@pytest.mark.slow
def test_a_job_runs_on_an_alias_through_a_jump_host(tmp_path: Path,
                                                    two_sshds: tuple[PrivateSshd, PrivateSshd]) -> None:
    jump, target = two_sshds
    config, kh = ssh_config(tmp_path, jump, target), known_hosts(tmp_path, jump, target)
    profile = alias_profile(tmp_path, config, kh)
    check = cli("check", str(profile), timeout=120)
    assert check.returncode == 0, check.stderr
    assert (f"ssh       t: target-alias -> {target.user}@{target.address}:{target.port} via "
            f"{jump.user}@{jump.address}:{jump.port} (ssh -G {config})") in check.stdout
    run_dir, run_id = tmp_path / "run", "it-jump-ok"
    try:
        up = cli("up", str(profile), "--no-tui", "--run-dir", str(run_dir), "--run-id", run_id,
                 timeout=300)
        assert up.returncode == 0, up.stdout[-2000:] + up.stderr[-2000:]
        final = {e["task"]: e["state"] for e in read_events(run_dir) if e["kind"] == "state"}
        assert final == {"chief:0": "succeeded", "ps:0": "stopped", "worker:0": "stopped"}
        assert pids_with_run_id(run_id) == []
        assert "direct-tcpip" in jump.log_path.read_text()
        assert "Accepted publickey" in target.log_path.read_text()
    finally:
        kill_run_processes(run_id)


def alias_profile(tmp: Path, config: Path, kh: Path) -> Path:
    return build_profile(tmp / "jump.toml", name="it-jump", command=ps_mnist_command(40),
                         defaults={"python": sys.executable}, workdir=REPO, env={"TF_CPP_MIN_LOG_LEVEL": "2"}, grace=5,
                         ssh={"ssh_config": str(config), "known_hosts": str(kh)}, hosts=[ssh_host("t", "target-alias")],
                         roles={role: {"port": free_port()} for role in ("ps", "worker", "chief")}, role_hosts=False)


def test_an_unknown_jump_host_key_is_refused_in_one_line_and_nothing_starts(
        tmp_path: Path, two_sshds: tuple[PrivateSshd, PrivateSshd]) -> None:
    jump, target = two_sshds
    profile = alias_profile(tmp_path, ssh_config(tmp_path, jump, target), known_hosts(tmp_path, target))
    run_id = "it-jump-unknown"
    up = cli("up", str(profile), "--no-tui", "--run-dir", str(tmp_path / "run"), "--run-id", run_id,
             timeout=120)
    assert up.returncode == 2, up.stdout + up.stderr
    errors = [line for line in up.stderr.splitlines() if line.startswith("distlaunch: error")]
    assert len(errors) == 1, up.stderr
    assert "jump host bastion" in errors[0] and "unknown host key" in errors[0]
    assert f"ssh-keyscan -p {jump.port} {jump.address}" in errors[0]
    assert "Traceback" not in up.stderr
    assert pids_with_run_id(run_id) == []
    assert "Accepted publickey" not in target.log_path.read_text()  # never got past the jump


def test_profile_values_win_over_the_config(tmp_path: Path, private_sshd: PrivateSshd) -> None:
    target = private_sshd
    config = tmp_path / "ssh_config"
    config.write_text(f"Host box\n    HostName {target.address}\n    Port 1\n    User nobody-here\n")
    settings = SshSettings(user=target.user, identity_file=str(target.identity_file),
                           known_hosts=str(target.known_hosts), ssh_port=target.port,
                           ssh_config=str(config), unset=("connect_timeout",))
    host = SshHost(HostConfig(name="box", address="box", ssh=settings))
    try:
        host.connect()  # Port 1 and User nobody-here from the config lose to the profile
        assert host.run("whoami").stdout.strip() == target.user
    finally:
        host.close()


def test_a_missing_ssh_config_named_in_the_profile_is_one_line(tmp_path: Path) -> None:
    settings = SshSettings(ssh_config=str(tmp_path / "nope"))
    with pytest.raises(HostError, match=r"ssh_config .*nope does not exist; fix the path or set "
                                        r"ssh_config = false"):
        SshHost(HostConfig(name="h", address="h", ssh=settings)).connect()


@pytest.fixture
def agent(tmp_path: Path) -> Iterator[dict[str, str]]:
    """A private ssh-agent (SSH_AUTH_SOCK in the returned dict), stopped afterwards."""
    sock = tmp_path / "agent.sock"
    # without -D the agent binds its socket before the parent exits and prints its pid
    out = subprocess.run(["ssh-agent", "-s", "-a", str(sock)], capture_output=True, text=True,
                         check=True, timeout=30).stdout
    pid = int(re.search(r"SSH_AGENT_PID=(\d+)", out).group(1))  # type: ignore[union-attr]
    try:
        yield {"SSH_AUTH_SOCK": str(sock)}
    finally:
        os.kill(pid, signal.SIGTERM)


def encrypted_key(tmp: Path, server: PrivateSshd) -> Path:
    key = tmp / "id_encrypted"
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "s3cret-pass", "-f", str(key)],
                   check=True, capture_output=True, timeout=30)
    with server.authorized_keys.open("a") as fh:
        fh.write(Path(f"{key}.pub").read_text())
    return key


def test_keys_come_from_ssh_agent(tmp_path: Path, private_sshd: PrivateSshd, agent: dict[str, str],
                                  monkeypatch: pytest.MonkeyPatch) -> None:
    key = encrypted_key(tmp_path, private_sshd)
    add = subprocess.run(["ssh-add", str(key)], env={**os.environ, **agent, "SSH_ASKPASS_REQUIRE": "force",
                                                      "SSH_ASKPASS": str(askpass(tmp_path)), "DISPLAY": ":0"},
                         capture_output=True, text=True, timeout=30, stdin=subprocess.DEVNULL)
    assert add.returncode == 0, add.stderr
    monkeypatch.setenv("SSH_AUTH_SOCK", agent["SSH_AUTH_SOCK"])
    # no identity_file: the agent's key (the only one the server accepts besides ~/.ssh's) is used
    host = SshHost(private_sshd.host_config("a", identity_file=None))
    try:
        host.connect()
        assert host.run("echo ok").stdout.strip() == "ok"
    finally:
        host.close()
    # with the encrypted file named, the agent still unlocks it, as with ssh
    named = SshHost(private_sshd.host_config("b", identity_file=str(key)))
    try:
        named.connect()
    finally:
        named.close()


def askpass(tmp: Path) -> Path:
    script = tmp / "askpass.sh"
    script.write_text("#!/bin/sh\necho s3cret-pass\n")
    script.chmod(0o700)
    return script


def test_an_encrypted_key_without_agent_is_one_line(tmp_path: Path, private_sshd: PrivateSshd,
                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    key = encrypted_key(tmp_path, private_sshd)
    monkeypatch.delenv("SSH_AUTH_SOCK", raising=False)
    host = SshHost(private_sshd.host_config("enc", identity_file=str(key)))
    with pytest.raises(HostError) as caught:
        host.connect()
    message = str(caught.value)
    assert "passphrase-protected" in message and "no ssh-agent is running" in message
    assert f"ssh-add {key}" in message and "\n" not in message


def test_two_jump_hosts_are_chained_in_order(tmp_path: Path) -> None:
    require_sshd()
    with PrivateSshd(log_level="DEBUG1") as first, PrivateSshd(log_level="DEBUG1") as second, \
            PrivateSshd() as target:
        config = tmp_path / "ssh_config"
        config.write_text(f"""
Host deep
    HostName {target.address}
    Port {target.port}
    IdentityFile {target.identity_file}
    ProxyJump hop1,hop2
Host hop1
    HostName {first.address}
    Port {first.port}
    IdentityFile {first.identity_file}
Host hop2
    HostName {second.address}
    Port {second.port}
    IdentityFile {second.identity_file}
""")
        host = SshHost(HostConfig(name="d", address="deep", ssh=SshSettings(
            known_hosts=str(known_hosts(tmp_path, first, second, target)), ssh_config=str(config),
            unset=("user", "identity_file", "ssh_port"))))
        try:
            host.connect()
            assert host.run("echo $SSH_CONNECTION").stdout.split()[3] == str(target.port)
        finally:
            host.close()
        # hop1 forwarded to hop2, and hop2 to the target
        assert f"target {second.address} port {second.port}" in first.log_path.read_text()
        assert f"target {target.address} port {target.port}" in second.log_path.read_text()
