"""ProxyCommand injection (the CVE-2023-51385 pattern): a user or host name with shell characters
never reaches the shell that runs a ProxyCommand. Each case runs the real `distlaunch check` against
a real ssh_config whose ProxyCommand (a working `ssh -W` through a private sshd) expands the token,
and a marker file that the injected command would create."""

from __future__ import annotations

import subprocess
from pathlib import Path
from typing import Any

import pytest

from tests.integration.jobtools import cli
from tests.profiles import build_profile, ssh_host
from tests.sshd import PrivateSshd

pytestmark = [pytest.mark.sshd]


def proxy_config(tmp: Path, server: PrivateSshd, extra: str = "", via: str = "%r") -> Path:
    """An alias reached through a ProxyCommand that logs in to ``server`` as ``via`` (a token)."""
    path = tmp / "ssh_config"
    path.write_text(f"""Host target-alias
    HostName {server.address}
    Port {server.port}
    IdentityFile {server.identity_file}
{extra}    ProxyCommand ssh -F /dev/null -i {server.identity_file} -p {server.port} -o BatchMode=yes \
-o UserKnownHostsFile={server.known_hosts} -W %h:%p {via}@{server.address}
""")
    return path


def profile(tmp: Path, config: Path, server: PrivateSshd, ssh_extra: dict[str, Any] | None = None) -> Path:
    return build_profile(tmp / "p.toml", name="proxy-names", strategy="custom", command="true",
                         ssh={"ssh_config": str(config), "known_hosts": str(server.known_hosts), **(ssh_extra or {})},
                         hosts=[ssh_host("target", "target-alias")], roles={"chief": {}})


def one_line_error(result: subprocess.CompletedProcess[str]) -> str:
    """The one error line of a refused check (beside its progress lines)."""
    assert result.returncode == 2, (result.stdout, result.stderr)
    assert "Traceback" not in result.stderr, result.stderr
    errors = [line for line in result.stderr.splitlines() if line.startswith("distlaunch: error:")]
    assert len(errors) == 1, result.stderr
    return errors[0]


def test_a_profile_user_with_shell_characters_is_refused_before_any_proxycommand(
        tmp_path: Path, sshd: PrivateSshd) -> None:
    marker = tmp_path / "pwned"
    config = proxy_config(tmp_path, sshd)
    path = profile(tmp_path, config, sshd, ssh_extra={"user": f"{sshd.user}$(touch {marker})"})
    err = one_line_error(cli("check", str(path), timeout=120))
    assert "ssh.user" in err and "$" in err
    assert not marker.exists()


def test_a_config_user_with_shell_characters_is_refused_where_a_proxycommand_expands_it(
        tmp_path: Path, sshd: PrivateSshd) -> None:
    marker = tmp_path / "pwned"
    config = proxy_config(tmp_path, sshd, extra=f'    User "{sshd.user}$(touch${{IFS}}{marker})"\n')
    err = one_line_error(cli("check", str(profile(tmp_path, config, sshd)), timeout=120))
    assert f"{config} sets User" in err and "host target" in err
    assert not marker.exists()


def test_what_a_proxycommand_expands_is_shell_quoted(tmp_path: Path, sshd: PrivateSshd) -> None:
    # HostKeyAlias is no user or host name: it is not refused, but %k reaches the shell quoted
    # (ssh -G gives it in lower case: a command substitution of a bare redirection, which needs no
    # space, would create the marker before the ProxyCommand's exec)
    marker = tmp_path / "pwned"
    assert str(marker) == str(marker).lower()
    config = proxy_config(tmp_path, sshd, extra=f"    User {sshd.user}\n    HostKeyAlias x$(>{marker})\n", via="%k")
    # the alias is no host key in known_hosts: the connection fails, after the ProxyCommand ran
    result = cli("check", str(profile(tmp_path, config, sshd, ssh_extra={"connect_timeout": 3})), timeout=120)
    assert result.returncode != 0 and "Traceback" not in result.stderr, result.stderr
    assert not marker.exists()


def test_a_proxycommand_with_plain_names_still_connects(tmp_path: Path, sshd: PrivateSshd) -> None:
    config = proxy_config(tmp_path, sshd, extra=f"    User {sshd.user}\n")
    result = cli("check", str(profile(tmp_path, config, sshd)), timeout=120)
    assert result.returncode == 0, result.stderr
