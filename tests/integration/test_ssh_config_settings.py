"""ssh_config settings beyond HostName/User/Port/ProxyJump, against real sshds: each is honoured
by the built-in client (a certificate-only sshd, ProxyCommand through a bastion, Match and
Include, HostKeyAlias) or refused by name with the way out (PKCS11Provider, StrictHostKeyChecking no)."""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from launcher.errors import HostError
from launcher.model import HostConfig, SshSettings
from launcher.transport import SshHost
from tests.integration.jobtools import cli, wait_for
from tests.profiles import build_profile, ssh_host
from tests.sshd import PrivateSshd, require_sshd

pytestmark = [pytest.mark.sshd]

#: the profile sets only ssh_config and known_hosts, as a parsed profile leaves the rest to the config
UNSET = ("user", "identity_file", "ssh_port", "connect_timeout", "host_key_policy")


def via_config(address: str, config: Path, known_hosts: Path | None = None, name: str = "h") -> HostConfig:
    unset = UNSET if known_hosts is not None else (*UNSET, "known_hosts")
    return HostConfig(name=name, address=address, ssh=SshSettings(
        known_hosts=str(known_hosts or "~/.ssh/known_hosts"), ssh_config=str(config), unset=unset))


def connect_and_echo(config: HostConfig) -> str:
    host = SshHost(config)
    try:
        host.connect()
        return host.run("echo $SSH_CONNECTION").stdout.strip()
    finally:
        host.close()


@pytest.fixture
def cert_sshd(tmp_path: Path) -> Iterator[tuple[PrivateSshd, Path]]:
    """(server, certificate): an sshd that trusts a CA and reads no authorized_keys; its user key
    signed by that CA, the certificate kept where no client would find it by its name alone."""
    require_sshd()
    ca = tmp_path / "user_ca"
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(ca)], check=True,
                   capture_output=True, timeout=30)
    server = PrivateSshd(extra_config=f"TrustedUserCAKeys {ca}.pub", authorized_keys=False)
    try:
        subprocess.run(["ssh-keygen", "-q", "-s", str(ca), "-I", "distlaunch-test", "-n", server.user,
                        "-V", "-5m:+1h", f"{server.identity_file}.pub"], check=True, capture_output=True,
                       timeout=30)
        cert = tmp_path / "user-certificate.pub"
        shutil.move(f"{server.identity_file}-cert.pub", cert)
        server.start()
        yield server, cert
    finally:
        server.cleanup()


def cert_config(tmp: Path, server: PrivateSshd, cert: Path | None) -> Path:
    path = tmp / "ssh_config"
    path.write_text(f"""Host certhost
    HostName {server.address}
    Port {server.port}
    User {server.user}
    IdentityFile {server.identity_file}
""" + (f"    CertificateFile {cert}\n" if cert else ""))
    return path


def test_a_certificate_only_host_is_reached_with_certificatefile(
        tmp_path: Path, cert_sshd: tuple[PrivateSshd, Path]) -> None:
    server, cert = cert_sshd
    config = via_config("certhost", cert_config(tmp_path, server, cert), server.known_hosts)
    assert connect_and_echo(config).split()[3] == str(server.port)
    assert "Accepted publickey" in server.log_path.read_text() and "CERT" in server.log_path.read_text()


def test_without_the_certificate_the_same_host_refuses_the_key(
        tmp_path: Path, cert_sshd: tuple[PrivateSshd, Path]) -> None:
    server, _ = cert_sshd
    with pytest.raises(HostError, match="refused key"):
        connect_and_echo(via_config("certhost", cert_config(tmp_path, server, None), server.known_hosts))


@pytest.fixture
def bastion_and_target() -> Iterator[tuple[PrivateSshd, PrivateSshd]]:
    require_sshd()
    with PrivateSshd(log_level="DEBUG1") as bastion, PrivateSshd() as target:
        yield bastion, target


def test_proxycommand_goes_through_the_bastion(tmp_path: Path,
                                               bastion_and_target: tuple[PrivateSshd, PrivateSshd]) -> None:
    bastion, target = bastion_and_target
    config = tmp_path / "ssh_config"
    # %h and %p are the target's HostName and Port after the config; %r its user; %% a literal %
    config.write_text(f"""Host behind
    HostName {target.address}
    Port {target.port}
    User {target.user}
    IdentityFile {target.identity_file}
    ProxyCommand ssh -F /dev/null -i {bastion.identity_file} -p {bastion.port} -o BatchMode=yes \
-o UserKnownHostsFile={bastion.known_hosts} -o SetEnv=DL_WHO=%r%%ok -W %h:%p {bastion.user}@{bastion.address}
""")
    assert connect_and_echo(via_config("behind", config, target.known_hosts)).split()[3] == str(target.port)
    log = bastion.log_path.read_text()
    assert "direct-tcpip" in log and f"port {target.port}" in log  # the bastion carried it


def test_match_and_include_are_applied(tmp_path: Path, private_sshd: PrivateSshd) -> None:
    server = private_sshd
    included = tmp_path / "conf.d" / "nodes.conf"
    included.parent.mkdir()
    included.write_text(f"""Match originalhost node-alias
    HostName {server.address}
Match host {server.address}
    Port {server.port}
    User {server.user}
    IdentityFile {server.identity_file}
""")
    config = tmp_path / "ssh_config"
    config.write_text(f"Include {included.parent}/*.conf\n")
    assert connect_and_echo(via_config("node-alias", config, server.known_hosts)).split()[3] == str(server.port)


def test_hostkeyalias_names_the_key_in_known_hosts(tmp_path: Path, private_sshd: PrivateSshd) -> None:
    server = private_sshd
    known = tmp_path / "known_hosts"
    known.write_text("login-pool " + server.host_key_line.split(" ", 1)[1] + "\n")
    config = tmp_path / "ssh_config"
    body = (f"Host pool\n    HostName {server.address}\n    Port {server.port}\n    User {server.user}\n"
            f"    IdentityFile {server.identity_file}\n")
    config.write_text(body + "    HostKeyAlias login-pool\n")
    assert connect_and_echo(via_config("pool", config, known))
    plain = tmp_path / "ssh_config_plain"  # (resolutions are cached per file)
    plain.write_text(body)  # without the alias the key is not known under the address
    with pytest.raises(HostError, match="unknown host key"):
        connect_and_echo(via_config("pool", plain, known))


def test_userknownhostsfile_of_the_config_is_used_when_the_profile_sets_none(
        tmp_path: Path, private_sshd: PrivateSshd) -> None:
    server = private_sshd
    config = tmp_path / "ssh_config"
    config.write_text(f"Host kh\n    HostName {server.address}\n    Port {server.port}\n    User {server.user}\n"
                      f"    IdentityFile {server.identity_file}\n"
                      f"    UserKnownHostsFile {tmp_path}/empty {server.known_hosts}\n")
    assert connect_and_echo(via_config("kh", config))


@pytest.mark.parametrize(("line", "named"), [
    ("PKCS11Provider /usr/lib/x86_64-linux-gnu/opensc-pkcs11.so", "PKCS11Provider"),
    ("GSSAPIAuthentication yes", "GSSAPIAuthentication"),
    ("PreferredAuthentications keyboard-interactive", "PreferredAuthentications"),
])
def test_a_setting_the_client_cannot_honour_is_refused_by_name(tmp_path: Path, line: str, named: str) -> None:
    config = tmp_path / "ssh_config"
    config.write_text(f"Host card\n    HostName 127.0.0.1\n    {line}\n")
    with pytest.raises(HostError) as caught:
        SshHost(via_config("card", config, tmp_path / "kh")).connect()
    message = str(caught.value)
    assert message.startswith("host h: ") and named in message and "\n" not in message
    assert 'set transport = "openssh" for this host' in message


def test_stricthostkeychecking_no_is_refused_with_what_to_use(tmp_path: Path) -> None:
    config = tmp_path / "ssh_config"
    config.write_text("Host lax\n    HostName 127.0.0.1\n    StrictHostKeyChecking no\n")
    with pytest.raises(HostError, match=r"StrictHostKeyChecking no .*any host key.*accept-new"):
        SshHost(via_config("lax", config, tmp_path / "kh")).connect()


def test_controlmaster_settings_are_ignored(tmp_path: Path, private_sshd: PrivateSshd) -> None:
    server = private_sshd
    config = tmp_path / "ssh_config"
    config.write_text(f"Host mux\n    HostName {server.address}\n    Port {server.port}\n    User {server.user}\n"
                      f"    IdentityFile {server.identity_file}\n    ControlMaster auto\n"
                      f"    ControlPath {tmp_path}/%C\n    ControlPersist 60\n    Compression yes\n"
                      f"    ServerAliveInterval 2\n    ServerAliveCountMax 2\n")
    assert connect_and_echo(via_config("mux", config, server.known_hosts))


def test_check_exits_2_naming_the_host_and_the_setting(tmp_path: Path) -> None:
    config = tmp_path / "ssh_config"
    config.write_text("Host card\n    HostName 127.0.0.1\n    PKCS11Provider /usr/lib/opensc-pkcs11.so\n")
    profile = build_profile(tmp_path / "p.toml", name="refuse", command="true", ssh={"ssh_config": str(config)},
                            hosts=[ssh_host("cardhost", "card")], roles={"chief": {}})
    result = cli("check", str(profile), timeout=120)
    assert result.returncode == 2, result.stdout + result.stderr
    assert "Traceback" not in result.stderr
    errors = [line for line in (result.stdout + result.stderr).splitlines() if "PKCS11Provider" in line]
    assert errors and "cardhost" in errors[0] and 'set transport = "openssh"' in errors[0]


def test_identityagent_names_the_agent_socket(tmp_path: Path, private_sshd: PrivateSshd,
                                              monkeypatch: pytest.MonkeyPatch) -> None:
    server = private_sshd
    sock = tmp_path / "agent.sock"
    out = subprocess.run(["ssh-agent", "-s", "-a", str(sock)], capture_output=True, text=True, check=True,
                         timeout=30).stdout
    pid = int(out.split("SSH_AGENT_PID=")[1].split(";")[0])
    try:
        subprocess.run(["ssh-add", str(server.identity_file)], check=True, capture_output=True, timeout=30,
                       env={"SSH_AUTH_SOCK": str(sock), "PATH": os.environ["PATH"]})
        monkeypatch.delenv("SSH_AUTH_SOCK", raising=False)
        body = f"Host agented\n    HostName {server.address}\n    Port {server.port}\n    User {server.user}\n"
        config = tmp_path / "ssh_config"
        config.write_text(body + f"    IdentityAgent {sock}\n")  # the key is only in that agent
        assert connect_and_echo(via_config("agented", config, server.known_hosts))
        none = tmp_path / "ssh_config_none"
        none.write_text(body + "    IdentityAgent none\n")
        monkeypatch.setenv("SSH_AUTH_SOCK", str(sock))  # there, but IdentityAgent none says not to use it
        with pytest.raises(HostError, match=r"refused every key|no SSH key"):
            connect_and_echo(via_config("agented", none, server.known_hosts))
    finally:
        os.kill(pid, signal.SIGTERM)


def descendants(pid: int) -> list[int]:
    children: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            with contextlib.suppress(OSError):
                ppid = int(Path(f"/proc/{entry}/stat").read_text().rsplit(")", 1)[1].split()[1])
                children.setdefault(ppid, []).append(int(entry))
    found, todo = [], [pid]
    while todo:
        for child in children.get(todo.pop(), []):
            found.append(child)
            todo.append(child)
    return found


@pytest.mark.parametrize("alive", ["    ServerAliveInterval 1\n    ServerAliveCountMax 2\n", ""],
                         ids=["set-in-ssh-config", "the-launchers-default"])
def test_serveralivecountmax_ends_a_link_that_stopped_answering(tmp_path: Path, private_sshd: PrivateSshd,
                                                                alive: str) -> None:
    """A link whose server stopped answering is closed: after ServerAliveInterval x CountMax as set,
    else the launcher's 5 s x 3, as the openssh transport's (without it, a checkpoint copy over a
    cut link hung for its whole 600 s)."""
    server = private_sshd
    config = tmp_path / "ssh_config"
    config.write_text(f"Host alive\n    HostName {server.address}\n    Port {server.port}\n    User {server.user}\n"
                      f"    IdentityFile {server.identity_file}\n{alive}")
    host = SshHost(via_config("alive", config, server.known_hosts))
    host.connect()
    assert server._proc is not None
    frozen = descendants(server._proc.pid)  # the session's sshd processes: the link goes silent
    assert frozen
    try:
        stopped = []
        for pid in frozen:  # a short-lived helper of sshd's may be gone already: the session's stays
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGSTOP)
                stopped.append(pid)
        assert stopped
        wait_for(lambda: not host.connected, 10 if alive else 30, "the link to be declared dead")
    finally:
        for pid in frozen:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGCONT)
        host.close()


def test_an_idle_link_whose_server_answers_stays_open(tmp_path: Path, private_sshd: PrivateSshd) -> None:
    """The launcher's keepalive asks for a reply: a link on which nothing else happens for longer
    than 5 s x 3 (a long preflight import, a quiet host) is not taken for a dead one."""
    server = private_sshd
    config = tmp_path / "ssh_config"
    config.write_text(f"Host idle\n    HostName {server.address}\n    Port {server.port}\n    User {server.user}\n"
                      f"    IdentityFile {server.identity_file}\n")
    host = SshHost(via_config("idle", config, server.known_hosts))
    host.connect()
    try:
        deadline = time.monotonic() + 22  # past three intervals of the watch, and a fourth
        while time.monotonic() < deadline:  # an absence to watch for: no event marks it
            assert host.connected, "an idle link to a live server was closed"
            time.sleep(0.5)
        assert host.run("echo still", timeout=30).stdout.strip() == "still"
    finally:
        host.close()


def test_a_jump_host_with_its_own_proxyjump_is_refused_not_bypassed(tmp_path: Path) -> None:
    config = tmp_path / "ssh_config"
    config.write_text("Host inner\n    HostName 10.9.0.2\n    ProxyJump mid\n"
                      "Host mid\n    HostName 10.9.0.1\n    ProxyJump outer\n")
    with pytest.raises(HostError) as caught:
        SshHost(via_config("inner", config, tmp_path / "kh")).connect()
    message = str(caught.value)
    assert "ProxyJump" in message and "jump host mid" in message and 'transport = "openssh"' in message


def test_a_keyboard_interactive_only_host_is_refused_with_the_way_out() -> None:
    require_sshd()
    with PrivateSshd(extra_config="AuthenticationMethods keyboard-interactive", kbd_interactive=True) as server, \
            pytest.raises(HostError) as caught:
        SshHost(server.host_config("kbd")).connect()
    message = str(caught.value)
    assert message.startswith("host kbd ") and "only keyboard-interactive" in message
    assert 'set transport = "openssh" for this host' in message and "authorized_keys" not in message


def test_stricthostkeychecking_accept_new_and_compression_are_applied(tmp_path: Path,
                                                                      private_sshd: PrivateSshd) -> None:
    server = private_sshd
    known = tmp_path / "known_hosts"  # not there yet: accept-new records the key
    config = tmp_path / "ssh_config"
    config.write_text(f"Host fresh\n    HostName {server.address}\n    Port {server.port}\n    User {server.user}\n"
                      f"    IdentityFile {server.identity_file}\n    UserKnownHostsFile {known}\n"
                      "    StrictHostKeyChecking accept-new\n    Compression yes\n")
    host = SshHost(via_config("fresh", config))
    try:
        host.connect()
        transport = host._connection.transport  # type: ignore[union-attr]
        assert transport.local_compression is not None and "zlib" in transport.local_compression
    finally:
        host.close()
    assert server.host_key_line.split()[-1] in known.read_text()
    assert host.notices and "accept-new" in host.notices[0]


def test_identitiesonly_keeps_agent_keys_out(tmp_path: Path, private_sshd: PrivateSshd,
                                             monkeypatch: pytest.MonkeyPatch) -> None:
    server = private_sshd
    stranger = tmp_path / "id_stranger"
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(stranger)], check=True,
                   capture_output=True, timeout=30)
    sock = tmp_path / "agent.sock"
    out = subprocess.run(["ssh-agent", "-s", "-a", str(sock)], capture_output=True, text=True, check=True,
                         timeout=30).stdout
    pid = int(out.split("SSH_AGENT_PID=")[1].split(";")[0])
    try:
        subprocess.run(["ssh-add", str(server.identity_file)], check=True, capture_output=True, timeout=30,
                       env={"SSH_AUTH_SOCK": str(sock), "PATH": os.environ["PATH"]})
        monkeypatch.setenv("SSH_AUTH_SOCK", str(sock))
        body = (f"Host only\n    HostName {server.address}\n    Port {server.port}\n    User {server.user}\n"
                f"    IdentityFile {stranger}\n")
        plain, strict = tmp_path / "plain", tmp_path / "strict"
        plain.write_text(body)
        strict.write_text(body + "    IdentitiesOnly yes\n")
        assert connect_and_echo(via_config("only", plain, server.known_hosts))  # the agent's key after the file's
        with pytest.raises(HostError, match="refused key"):
            connect_and_echo(via_config("only", strict, server.known_hosts))
    finally:
        os.kill(pid, signal.SIGTERM)
