"""`distlaunch init` then `distlaunch check`, both as real processes: every kind of script in examples/
and a TF1 between-graph script get a profile that passes check (with its real local preflight) as written."""

from __future__ import annotations

import shutil
import tomllib
from pathlib import Path

import pytest

from tests.integration.jobtools import REPO, cli

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
    env = {"PYTHONPATH": str(REPO), "DISTLAUNCH_HOME": str(tmp_path / "home")}
    made = cli("init", script.name, cwd=project, env=env, timeout=60)
    assert made.returncode == 0, made.stderr
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
    again = cli("init", script.name, cwd=project, env=env, timeout=60)
    assert again.returncode == 2 and again.stderr.count("\n") == 1 and "--force" in again.stderr


def test_an_ssh_profile_from_init_validates(tmp_path: Path) -> None:
    shutil.copy(REPO / "examples" / "mwms_keras.py", tmp_path / "train.py")
    env = {"PYTHONPATH": str(REPO), "DISTLAUNCH_HOME": str(tmp_path / "home")}
    made = cli("init", "train.py", "--hosts", "gpu[1-2],head", cwd=tmp_path, env=env, timeout=60)
    assert made.returncode == 0, made.stderr
    checked = cli("check", "--no-remote", "train.toml", cwd=tmp_path, env=env, timeout=60)
    assert checked.returncode == 0, checked.stderr
    for task, host in (("worker:0", "gpu-1"), ("worker:1", "gpu-2"), ("worker:2", "head")):
        assert any(line.split()[:2] == [task, host] for line in checked.stdout.splitlines()), checked.stdout
