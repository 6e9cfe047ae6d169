"""A run dir is used only where no other user can swap it (issue 59, item 1): every folder above it
must be the user's or root's and not writable by others unless sticky, as OpenSSH's StrictModes
judges a home. Before, only the last component was checked: uid 65534 made ``/tmp/myruns`` (0777)
first, renamed the owner's run dir away and put theirs in its place, and the owner's `down` and
supervisor ran their ``agent.pyz``; a link ``state.json.tmp`` had the next state written through it."""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from launcher.rundir import RunDir
from tests.integration.jobtools import cli
from tests.integration.otheruser import as_other, require_other_user, shared_tmp
from tests.integration.test_run_ownership import _marker_script, _one_line, _state
from tests.profiles import local_host, profile_toml


@pytest.fixture
def shared() -> Iterator[Path]:
    require_other_user()
    with shared_tmp() as folder:
        yield folder


def _profile(tmp_path: Path) -> Path:
    path = tmp_path / "p.toml"
    path.write_text(profile_toml(name="anc", strategy="custom", command="true", hosts=[local_host("h")],
                                 roles={"chief": {}}))
    return path


def test_up_refuses_a_run_dir_under_a_folder_another_user_made(shared: Path, tmp_path: Path) -> None:
    as_other('mkdir -m 777 "$D/myruns"', D=str(shared))
    target = shared / "myruns" / "exp1"
    result = cli("up", str(_profile(tmp_path)), "--no-tui", "--run-dir", str(target), timeout=60)
    line = _one_line(result.stderr)
    assert result.returncode == 2, result.stdout + result.stderr
    culprit = shared / "myruns"
    assert line.startswith(f"distlaunch: error: --run-dir {target}: the folder {culprit} above it is owned by"), line
    assert "65534" in line
    assert not target.exists()


def test_up_refuses_a_run_dir_in_a_folder_of_ours_others_may_write(tmp_path: Path) -> None:
    open_folder = tmp_path / "open"
    open_folder.mkdir()
    open_folder.chmod(0o777)  # not sticky: anyone may rename what is in it
    target = open_folder / "exp1"
    result = cli("up", str(_profile(tmp_path)), "--no-tui", "--run-dir", str(target), timeout=60)
    line = _one_line(result.stderr)
    assert result.returncode == 2
    assert f"{open_folder} above it is writable by group and others (mode 0777, not sticky)" in line
    assert not target.exists()


def test_a_sticky_shared_folder_is_a_fine_parent(shared: Path) -> None:
    run_dir = RunDir.create("anc-sticky-1", shared / "anc-sticky-1")
    run_dir.close()
    assert (shared / "anc-sticky-1" / ".distlaunch-run").is_file()


def test_down_refuses_a_run_dir_read_back_under_a_folder_others_may_write(tmp_path: Path) -> None:
    open_folder = tmp_path / "open"
    run_dir = open_folder / "ours"
    run_dir.mkdir(parents=True, mode=0o700)
    python = _marker_script(tmp_path / "python.sh", tmp_path / "ran")
    (run_dir / "state.json").write_text(json.dumps(_state(run_dir, python)))
    os.chmod(run_dir / "state.json", 0o600)
    open_folder.chmod(0o777)
    result = cli("down", str(run_dir), timeout=60)
    line = _one_line(result.stderr)
    assert result.returncode == 2
    assert f"{open_folder} above it is writable by group and others" in line
    assert not (tmp_path / "ran").exists()


def test_the_state_is_never_written_through_a_link_planted_in_the_run_dir(tmp_path: Path) -> None:
    victim = tmp_path / "profile-of-yours"
    victim.write_text("keep me\n")
    run_dir = RunDir.create("anc-link-1", tmp_path / "run")
    try:
        run_dir.write_state({"run_id": "anc-link-1"})
        (run_dir.path / "state.json.tmp").symlink_to(victim)
        run_dir.write_state({"run_id": "anc-link-1", "n": 2})
    finally:
        run_dir.close()
    assert victim.read_text() == "keep me\n"
    assert json.loads((run_dir.path / "state.json").read_text())["n"] == 2
