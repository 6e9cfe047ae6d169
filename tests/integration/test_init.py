"""`distlaunch init` then `distlaunch check`, both as real processes: every kind of script in examples/
and a TF1 between-graph script get a profile that passes check (with its real local preflight) as written."""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import sys
import tomllib
from pathlib import Path

import pytest

from tests.integration.jobtools import REPO, cli, kill_run_processes
from tests.profiles import build_profile
from tests.sshd import PrivateSshd

DATA = REPO / "tests" / "data"


@pytest.mark.parametrize(("script", "strategy", "roles"), [
    (REPO / "examples" / "ps_mnist.py", "parameter_server", {"chief": 1, "ps": 1, "worker": 2}),
    (REPO / "examples" / "mwms_keras.py", "multi_worker_mirrored", {"worker": 2}),
    (REPO / "examples" / "print_steps.py", "custom", {"worker": 1}),
    (DATA / "tf1_between_graph.py", "parameter_server", {"ps": 1, "worker": 2}),
])
def test_init_writes_a_profile_that_check_passes(script: Path, strategy: str, roles: dict[str, int],
                                                 tmp_path: Path) -> None:
    project = tmp_path / "project"
    project.mkdir()
    shutil.copy(script, project / script.name)
    # HOME: the profile's outputs (~/distlaunch/outputs/<name>, made only by up) would stay in tmp
    env = {"PYTHONPATH": str(REPO), "DISTLAUNCH_HOME": str(tmp_path / "state"), "HOME": str(tmp_path)}
    made = cli("init", script.name, cwd=project, env=env, timeout=60)
    assert made.returncode == 0, made.stderr
    assert not (tmp_path / "distlaunch").exists()
    profile = project / f"{script.stem}.toml"
    assert made.stdout.startswith(f"wrote {profile.name}: {strategy} (")
    assert f"next: distlaunch check {profile.name}" in made.stdout
    data = tomllib.loads(profile.read_text())
    assert data["strategy"] == strategy
    assert {role: table["count"] for role, table in data["roles"].items()} == roles
    checked = cli("check", profile.name, cwd=project, env=env, timeout=240)
    assert checked.returncode == 0, checked.stdout + checked.stderr
    assert "preflight: all hosts reachable" in checked.stdout
    assert "workdirs and scripts found" in checked.stdout
    assert not (tmp_path / "distlaunch").exists()  # check starts nothing and creates no outputs
    again = cli("init", script.name, cwd=project, env=env, timeout=60)
    assert again.returncode == 2 and again.stderr.count("\n") == 1 and "--force" in again.stderr


def test_check_creates_no_outputs_and_up_does(tmp_path: Path) -> None:
    """`check` starts nothing: the outputs are not made on any host, only found creatable (their
    nearest existing parent writable); `up` makes them before the first task starts."""
    outputs = tmp_path / "out" / "deep" / "job"
    env = {"PYTHONPATH": str(REPO), "DISTLAUNCH_HOME": str(tmp_path / "state")}
    profile = build_profile(tmp_path / "quick.toml", name="quick", strategy="custom", outputs=outputs,
                            command="{python} -c pass", workdir=tmp_path, defaults={"python": sys.executable},
                            restart="never", role_hosts=False)
    checked = cli("check", str(profile), cwd=tmp_path, env=env, timeout=240)
    assert checked.returncode == 0, checked.stdout + checked.stderr
    assert not (tmp_path / "out").exists()

    (tmp_path / "afile").write_text("")  # a file where a directory would be made: even root cannot
    refused = cli("check", str(profile), "--set", f'outputs="{tmp_path / "afile" / "job"}"', cwd=tmp_path,
                  env=env, timeout=240)
    assert refused.returncode == 2, refused.stdout + refused.stderr
    assert f"{tmp_path / 'afile'} is not a directory this user may write" in refused.stderr, refused.stderr

    try:
        up = cli("up", str(profile), "--no-tui", "--run-id", "it-outputs-made", cwd=tmp_path, env=env, timeout=240)
        assert up.returncode == 0, up.stdout[-3000:] + up.stderr[-3000:]
        assert outputs.is_dir()
    finally:
        kill_run_processes("it-outputs-made")


def test_an_ssh_profile_from_init_validates(tmp_path: Path) -> None:
    shutil.copy(REPO / "examples" / "mwms_keras.py", tmp_path / "train.py")
    env = {"PYTHONPATH": str(REPO), "DISTLAUNCH_HOME": str(tmp_path / "home")}
    made = cli("init", "train.py", "--hosts", "gpu[1-2],head", cwd=tmp_path, env=env, timeout=60)
    assert made.returncode == 0, made.stderr
    checked = cli("check", "--no-remote", "train.toml", cwd=tmp_path, env=env, timeout=60)
    assert checked.returncode == 0, checked.stderr
    for task, host in (("worker:0", "gpu-1"), ("worker:1", "gpu-2"), ("worker:2", "head")):
        assert any(line.split()[:2] == [task, host] for line in checked.stdout.splitlines()), checked.stdout


@pytest.mark.sshd
def test_an_ssh_profile_from_init_passes_check_against_a_real_sshd(tmp_path: Path, sshd: PrivateSshd) -> None:
    """As written, but for what this test's private sshd needs (its port, key and known_hosts) and
    outputs in tmp: the code is synced into ~/distlaunch-code/<name> on the host and found there."""
    name = f"init_ssh_{os.getpid()}"
    shutil.copy(REPO / "examples" / "print_steps.py", tmp_path / f"{name}.py")
    env = {"PYTHONPATH": str(REPO), "DISTLAUNCH_HOME": str(tmp_path / "home")}
    made = cli("init", f"{name}.py", "--hosts", "127.0.0.1", cwd=tmp_path, env=env, timeout=60)
    assert made.returncode == 0, made.stderr
    remote = Path.home() / "distlaunch-code" / name
    try:
        checked = cli("check", f"{name}.toml", "--set", f"ssh.ssh_port={sshd.port}",
                      "--set", f'ssh.identity_file="{sshd.identity_file}"',
                      "--set", f'ssh.known_hosts="{sshd.known_hosts}"',
                      "--set", f'outputs="{tmp_path / "outputs"}"', cwd=tmp_path, env=env, timeout=240)
        assert checked.returncode == 0, checked.stdout + checked.stderr
        assert f"synced 127.0.0.1:~/distlaunch-code/{name}" in checked.stderr
        assert "workdirs and scripts found" in checked.stdout
        assert (remote / f"{name}.py").read_bytes() == (tmp_path / f"{name}.py").read_bytes()
    finally:
        shutil.rmtree(remote, ignore_errors=True)
        with contextlib.suppress(OSError):
            remote.parent.rmdir()


def test_tfconfig_shows_an_init_profile_with_its_ports_picked_at_launch(tmp_path: Path) -> None:
    shutil.copy(REPO / "examples" / "mwms_keras.py", tmp_path / "train.py")
    env = {"PYTHONPATH": str(REPO), "DISTLAUNCH_HOME": str(tmp_path / "home")}
    assert cli("init", "train.py", cwd=tmp_path, env=env, timeout=60).returncode == 0
    shown = cli("tfconfig", "train.toml", "worker:1", cwd=tmp_path, env=env, timeout=60)
    assert shown.returncode == 0, shown.stderr
    assert json.loads(shown.stdout) == {"cluster": {"worker": ["localhost:<picked at launch>"] * 2},
                                        "task": {"type": "worker", "index": 1}}
    assert shown.stderr == ("distlaunch: note: the ports of worker are picked at launch (no `port` in their "
                            "role): `distlaunch status --json` shows them once the job runs\n")
