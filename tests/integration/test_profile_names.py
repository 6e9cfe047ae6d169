"""Names that are paths, users and addresses a shell or ssh would act on, and sizes past any sane
job: each refused by the real `distlaunch check` at once, in one line naming the key, exit 2."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from tests.integration.jobtools import cli, write_profile

BASE = """
[defaults]
command = "{python} t.py"
"""
LOCAL_HOST = """
[hosts.h]
address = "localhost"
transport = "local"
[roles.worker]
hosts = ["h"]
"""


def refused(tmp_path: Path, body: str) -> tuple[str, float]:
    """(the one stderr line, seconds the check took) of a profile that must be refused."""
    profile = write_profile(tmp_path / "p.toml", body)
    started = time.monotonic()
    result = cli("check", str(profile), timeout=60)
    took = time.monotonic() - started
    assert result.returncode == 2, (result.stdout, result.stderr)
    assert result.stdout == "" and len(result.stderr.splitlines()) == 1, result.stderr
    assert "Traceback" not in result.stderr
    return result.stderr.strip(), took


BAD_NAMES = {
    # host names: each would be a folder under the local run dir (`..` was the run dir itself)
    "host ..": ('[hosts.".."]\naddress = "localhost"\ntransport = "local"\n', 'hosts."..":', "'..'"),
    "host a..b": ('[hosts."a..b"]\naddress = "localhost"\n', 'hosts."a..b":', "'..'"),
    "host with /": ('[hosts."a/b"]\naddress = "localhost"\n', 'hosts."a/b":', "'/'"),
    "host -x": ('[hosts."-x"]\naddress = "localhost"\n', "hosts.-x:", "starts with '-'"),
    "host .x": ('[hosts.".x"]\naddress = "localhost"\n', 'hosts.".x":', "starts with '.'"),
    "host with NUL": ('[hosts."a\\u0000b"]\naddress = "localhost"\n', "hosts.", "NUL"),
    "empty host": ('[hosts.""]\naddress = "localhost"\n', 'hosts."":', "empty"),
    # the job's name: the outputs folder's name ({name})
    "job with /": ('name = "team/job"\n', "name:", "'/'"),
    "job ..": ('name = ".."\n', "name:", "'..'"),
    "job .x": ('name = ".hidden"\n', "name:", "starts with '.'"),
    "job -x": ('name = "-rf"\n', "name:", "starts with '-'"),
    "job with NUL": ('name = "a\\u0000b"\n', "name:", "NUL"),
    "empty job": ('name = ""\n', "name:", "empty"),
    # role names are one of four; anything else (a path among them) is refused as a role
    "role ../x": ('[roles."../x"]\ncount = 1\n', 'roles."../x":', "unknown role"),
    # addresses and users that ssh would read as options, or a shell would run
    "address -o": ('[hosts.h]\naddress = "-oProxyCommand=touch /tmp/x"\n', "hosts.h.address:", "starts with '-'"),
    "address $()": ('[hosts.h]\naddress = "h$(id)"\n', "hosts.h.address:", "'$'"),
    "user -o": ('[ssh]\nuser = "-oProxyCommand=x"\n', "ssh.user:", "starts with '-'"),
    "user $()": ('[ssh]\nuser = "root$(touch /tmp/x)"\n', "ssh.user:", "a shell would act on"),
    "host user `": ('[hosts.h]\naddress = "h"\nuser = "a`id`"\n', "hosts.h.user:", "a shell would act on"),
    "tf_address ;": ('[hosts.h]\naddress = "h"\ntf_address = "10.0.0.1;id"\n', "hosts.h.tf_address:", "';'"),
}


@pytest.mark.parametrize("case", sorted(BAD_NAMES))
def test_a_bad_name_is_refused_in_one_line_naming_the_key(case: str, tmp_path: Path) -> None:
    body, key, why = BAD_NAMES[case]
    line, _ = refused(tmp_path, body + BASE)
    assert key in line and why in line, line


def test_an_address_starting_with_a_dash_names_the_key_even_with_an_ssh_config(tmp_path: Path) -> None:
    config = tmp_path / "ssh_config"
    config.write_text("Host *\n    ConnectTimeout 5\n")
    line, _ = refused(tmp_path, f'[ssh]\nssh_config = "{config}"\n[hosts.h]\naddress = "-F/dev/null"\n' + BASE)
    assert "hosts.h.address:" in line and "starts with '-'" in line and str(config) not in line, line


def test_a_job_name_from_a_file_name_that_is_a_path_is_refused(tmp_path: Path) -> None:
    profile = write_profile(tmp_path / "..toml", BASE + LOCAL_HOST)  # its stem is "."
    result = cli("check", str(profile), timeout=60)
    assert result.returncode == 2 and len(result.stderr.splitlines()) == 1, result.stderr
    assert "name:" in result.stderr and "from the file name" in result.stderr


def test_good_names_still_pass(tmp_path: Path) -> None:
    profile = write_profile(tmp_path / "p.toml", 'name = "mnist ps v2.1"\n' + BASE + LOCAL_HOST.replace(
        "[hosts.h]", "[hosts.\"gpu_1-a.lab\"]").replace('["h"]', '["gpu_1-a.lab"]'))
    result = cli("check", "--no-remote", str(profile), timeout=60)
    assert result.returncode == 0, result.stderr


SIZES = {
    "count 100000": ("[roles.worker]\ncount = 100000\n", "roles.worker.count:", "<= 10000"),
    "counts over 10000 in all": ("[roles.ps]\ncount = 6000\n[roles.worker]\ncount = 6000\n",
                                 "roles.worker.count:", "12000 tasks in all"),
    "node[1-1000000]": ('[hosts.node]\naddress = "node[1-1000000]"\n', "hosts.node.address:", "more than 10000 hosts"),
    "node[1-10001]": ('[hosts.node]\naddress = "node[1-10001]"\n', "hosts.node.address:", "more than 10000 hosts"),
    "r[1-5000]n[1-5000]": ('[hosts.node]\naddress = "r[1-5000]n[1-5000]"\n', "hosts.node.address:",
                           "more than 10000 hosts"),
}


@pytest.mark.parametrize("case", sorted(SIZES))
def test_a_size_past_the_limit_is_refused_at_once(case: str, tmp_path: Path) -> None:
    body, key, why = SIZES[case]
    line, took = refused(tmp_path, body + BASE)
    assert key in line and why in line, line
    assert took < 2.0, f"check took {took:.1f}s"
