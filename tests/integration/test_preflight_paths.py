"""Preflight finds a newcomer's path mistakes (workdir, script, module, program, identity file) on a
local host and on an SSH host, names the host, role, path and key to fix, and starts nothing."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import pytest

from tests.integration.jobtools import cli, pids_with_run_id, read_events
from tests.profiles import Host, build_profile, local_host, ssh_table, sshd_host
from tests.sshd import PrivateSshd

# every task of a good profile touches a file in the marker dir: none may appear after a refusal
GOOD_SCRIPT = """import os, sys
open(os.path.join(sys.argv[1], os.environ["DISTLAUNCH_TASK"].replace(":", "-")), "w").close()
"""


def project(tmp: Path) -> Path:
    """A workdir with a script, an importable package and an executable program."""
    proj = tmp / "proj"
    (proj / "pkg").mkdir(parents=True)
    (proj / "train.py").write_text(GOOD_SCRIPT)
    (proj / "pkg" / "__init__.py").write_text("")
    (proj / "pkg" / "main.py").write_text(GOOD_SCRIPT)
    program = proj / "run.sh"
    program.write_text(f"#!/bin/sh\nexec {sys.executable} {proj / 'train.py'} \"$@\"\n")
    program.chmod(0o755)
    (tmp / "markers").mkdir()
    return proj


def make_profile(tmp: Path, host: Host, *, workdir: str, command: str, ps_command: str | None = None,
                 ssh: dict[str, Any] | None = None) -> Path:
    return build_profile(tmp / "p.toml", name="it-preflight-paths", strategy="custom", command=command,
                         defaults={"python": sys.executable}, workdir=workdir, restart="never", ssh=ssh, hosts=[host],
                         roles={"ps": {"command": ps_command} if ps_command else {}, "worker": 2})


LOCAL_HOST = local_host("box")


def ssh_blocks(server: PrivateSshd, identity: str | None = None) -> tuple[dict[str, Any], Host]:
    ssh = ssh_table(server, identity_file=identity) if identity else ssh_table(server)
    return ssh, sshd_host(server, "box")


def assert_refused(tmp: Path, profile: Path, *needles: str) -> str:
    """`check` and `up` both exit 2 with one error line holding every needle; nothing started."""
    run_id = f"it-pre-{tmp.name[-20:]}".replace("_", "-")
    lines = []
    for args in (["check", str(profile)],
                 ["up", str(profile), "--no-tui", "--run-dir", str(tmp / "run"), "--run-id", run_id]):
        result = cli(*args, timeout=180)
        assert result.returncode == 2, result.stdout + result.stderr
        assert "Traceback" not in result.stderr
        errors = [ln for ln in result.stderr.splitlines() if "error" in ln]
        assert len(errors) == 1, result.stderr
        for needle in needles:
            assert needle in errors[0], errors[0]
        lines.append(errors[0])
    assert not [e for e in read_events(tmp / "run") if e["kind"] == "state"]
    assert not list((tmp / "markers").iterdir())
    assert not pids_with_run_id(run_id)
    return lines[0]


# -- the mistakes, each on a local host and an SSH host -------------------------------------------

MISTAKES = {
    # name: (workdir relative to tmp, command, ps command, needles beyond host and path)
    "workdir": ("nope", "{python} train.py {markers}", None, ("workdir", "roles ps, worker", "`defaults.workdir`")),
    "script": ("proj", "{python} -u trian.py {markers}", None, ("script trian.py", "`defaults.command`")),
    "script-of-one-role": ("proj", "{python} train.py {markers}", "{python} tarin.py {markers}",
                           ("role ps", "script tarin.py", "`roles.ps.command`")),
    "module": ("proj", "{python} -m pkg.mian {markers}", None, ("module pkg.mian", "not importable")),
    "program": ("proj", "./rnu.sh {markers}", None, ("program ./rnu.sh", "`defaults.command`")),
    "program-on-path": ("proj", "trian-job {markers}", None, ("program trian-job", "not on the PATH")),
}


def _setup(tmp: Path, mistake: str) -> tuple[str, str, str | None, tuple[str, ...]]:
    project(tmp)
    workdir, command, ps_command, needles = MISTAKES[mistake]
    markers = str(tmp / "markers")
    command = command.replace("{markers}", markers)
    ps_command = ps_command.replace("{markers}", markers) if ps_command else None
    return str(tmp / workdir), command, ps_command, needles


@pytest.mark.parametrize("mistake", sorted(MISTAKES))
def test_local_host(tmp_path: Path, mistake: str) -> None:
    workdir, command, ps_command, needles = _setup(tmp_path, mistake)
    profile = make_profile(tmp_path, LOCAL_HOST, workdir=workdir, command=command, ps_command=ps_command)
    line = assert_refused(tmp_path, profile, "host box", *needles)
    if mistake == "workdir":
        assert workdir in line


@pytest.mark.slow
@pytest.mark.sshd
@pytest.mark.parametrize("mistake", sorted(MISTAKES))
def test_ssh_host(tmp_path: Path, sshd: PrivateSshd, mistake: str) -> None:
    workdir, command, ps_command, needles = _setup(tmp_path, mistake)
    ssh, host = ssh_blocks(sshd)
    profile = make_profile(tmp_path, host, workdir=workdir, command=command, ps_command=ps_command, ssh=ssh)
    line = assert_refused(tmp_path, profile, "host box", *needles)
    if mistake == "workdir":
        assert workdir in line


@pytest.mark.sshd
def test_missing_identity_file_is_named(tmp_path: Path, sshd: PrivateSshd) -> None:
    proj = project(tmp_path)
    ssh, host = ssh_blocks(sshd, identity=str(tmp_path / "id_missing"))
    profile = make_profile(tmp_path, host, workdir=str(proj), command=f"{{python}} train.py {tmp_path}/markers",
                           ssh=ssh)
    assert_refused(tmp_path, profile, "identity_file", str(tmp_path / "id_missing"))


def test_good_profile_passes_every_path_check(tmp_path: Path) -> None:
    """The checks must not refuse what works: script, module and program, then a real run."""
    proj = project(tmp_path)
    markers = tmp_path / "markers"
    for command in (f"{{python}} -u train.py {markers}", f"{{python}} -m pkg.main {markers}",
                    f"./run.sh {markers}"):
        profile = make_profile(tmp_path, LOCAL_HOST, workdir=str(proj), command=command)
        result = cli("check", str(profile), timeout=180)
        assert result.returncode == 0, result.stderr
        assert "workdirs and scripts found" in result.stdout
