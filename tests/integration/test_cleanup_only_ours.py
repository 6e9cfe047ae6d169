"""Cleanup deletes only what distlaunch wrote (DESIGN.md section 8): `up --run-dir` takes only a new
or empty folder that is not a link, and `prune` / `down` remove run dirs entry by entry, a link as
a link (its target untouched), leaving the user's files and saying so."""

from __future__ import annotations

import os
import stat
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from launcher.agent.leaving import retire
from tests.integration.jobtools import cli, kill_run_processes, pids_with_run_id
from tests.integration.otheruser import as_other, require_other_user, shared_tmp
from tests.profiles import build_profile, local_host


def _profile(tmp_path: Path) -> Path:
    return build_profile(tmp_path / "quick.toml", name="quick", strategy="custom", command="{python} -c 'print(1)'",
                         defaults={"python": sys.executable}, workdir=tmp_path, restart="never",
                         hosts=[local_host("here")], roles={"worker": {}})


@pytest.fixture
def run_id(request: pytest.FixtureRequest) -> Iterator[str]:
    name = f"it-clean-{request.node.name[5:25].replace('_', '-').strip('-')}"
    yield name
    kill_run_processes(name)


def _up(tmp_path: Path, run_id: str, *extra: str, cwd: Path | None = None) -> tuple[int, str]:
    args = ["up", str(_profile(tmp_path)), "--no-tui", "--run-id", run_id, *extra]
    done = cli(*args, timeout=120) if cwd is None else cli(*args, timeout=120, cwd=cwd)
    return done.returncode, done.stderr


def _outside(tmp_path: Path) -> Path:
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "precious").write_text("keep me")
    return outside


def test_prune_keeps_the_users_files_and_removes_links_as_links(tmp_path: Path, run_id: str) -> None:
    run_dir = tmp_path / "run"
    run_dir.mkdir(mode=0o755)  # an empty folder of ours is fine
    code, err = _up(tmp_path, run_id, "--run-dir", str(run_dir))
    assert code == 0, err[-2000:]
    assert stat.S_IMODE(run_dir.stat().st_mode) == 0o700
    (run_dir / "notes.txt").write_text("mine")
    outside = _outside(tmp_path)
    log = run_dir / "logs" / "worker-0.log"
    log.unlink()
    log.symlink_to(outside / "precious")  # a link where distlaunch writes a file
    (run_dir / "stacks").symlink_to(outside)  # and where it makes a folder

    pruned = cli("prune", run_id, timeout=60)
    assert pruned.returncode == 0, pruned.stderr
    assert f"kept what distlaunch did not write: {run_dir / 'notes.txt'}" in pruned.stdout
    assert sorted(os.listdir(run_dir)) == ["notes.txt"] and (run_dir / "notes.txt").read_text() == "mine"
    assert os.listdir(outside) == ["precious"] and (outside / "precious").read_text() == "keep me"


def test_a_run_dir_outside_the_state_root_without_its_marker_is_left_whole(tmp_path: Path, run_id: str) -> None:
    run_dir = tmp_path / "run"
    code, err = _up(tmp_path, run_id, "--run-dir", str(run_dir))
    assert code == 0, err[-2000:]
    (run_dir / ".distlaunch-run").unlink()  # as a folder distlaunch did not make (or made before the marker)
    before = sorted(os.listdir(run_dir))
    pruned = cli("prune", run_id, timeout=60)
    assert pruned.returncode == 1
    assert f"{run_id} kept: {run_dir}: no .distlaunch-run of run {run_id} in it" in pruned.stderr
    assert sorted(os.listdir(run_dir)) == before


def test_a_run_dir_that_is_not_empty_is_refused_before_anything_starts(tmp_path: Path, run_id: str) -> None:
    project = tmp_path / "project"
    (project / "src").mkdir(parents=True)
    (project / "README").write_text("hello")
    project.chmod(0o755)
    code, err = _up(tmp_path, run_id, "--run-dir", ".", cwd=project)
    lines = err.strip().splitlines()
    assert code == 2 and len(lines) == 1, err
    assert "--run-dir .: not empty (2 entries" in lines[0] and "give a new or empty directory" in lines[0]
    assert sorted(os.listdir(project)) == ["README", "src"] and stat.S_IMODE(project.stat().st_mode) == 0o755
    assert pids_with_run_id(run_id) == []


def test_a_run_dir_linked_into_another_users_folder_is_refused(tmp_path: Path, run_id: str) -> None:
    require_other_user()
    with shared_tmp() as shared:
        theirs = shared / "theirs"
        as_other(f'mkdir -m 755 "{theirs}"')
        link = tmp_path / "run"
        link.symlink_to(theirs)
        code, err = _up(tmp_path, run_id, "--run-dir", str(link))
        lines = err.strip().splitlines()
        assert code == 2 and len(lines) == 1, err
        assert f"--run-dir {link}: a symbolic link (to {theirs})" in lines[0]
        assert os.listdir(theirs) == [] and stat.S_IMODE(theirs.stat().st_mode) == 0o755
        assert pids_with_run_id(run_id) == []


def test_down_removes_only_what_distlaunch_wrote_in_a_host_run_dir(tmp_path: Path, run_id: str,
                                                                   distlaunch_home: Path) -> None:
    code, err = _up(tmp_path, run_id)  # in the state root: down removes its hosts' run dirs
    assert code == 0, err[-2000:]
    host_dir = distlaunch_home / "runs" / run_id / "hosts" / "here"
    assert (host_dir / "agent.pyz").exists()
    (host_dir / "checkpoint.txt").write_text("a task wrote this into {run_dir}")
    outside = _outside(tmp_path)
    (host_dir / "agent.log").unlink()
    (host_dir / "agent.log").symlink_to(outside / "precious")

    down = cli("down", run_id, timeout=60)
    assert down.returncode == 0, down.stderr
    assert f"host here: kept {host_dir}: it holds files distlaunch did not write (checkpoint.txt)" in down.stderr
    assert os.listdir(host_dir) == ["checkpoint.txt"]
    assert (outside / "precious").read_text() == "keep me"


def test_down_refuses_a_host_run_dir_that_is_a_link(tmp_path: Path, run_id: str, distlaunch_home: Path) -> None:
    code, err = _up(tmp_path, run_id)
    assert code == 0, err[-2000:]
    host_dir = distlaunch_home / "runs" / run_id / "hosts" / "here"
    elsewhere = tmp_path / "elsewhere"
    host_dir.rename(elsewhere)
    host_dir.symlink_to(elsewhere)
    kept = sorted(os.listdir(elsewhere))

    down = cli("down", run_id, timeout=60)
    assert f"host here: cannot remove {host_dir}: a symbolic link; left in place" in down.stderr, down.stderr
    assert host_dir.is_symlink() and sorted(os.listdir(elsewhere)) == kept


def test_down_removes_the_retired_mark_a_drain_wrote(tmp_path: Path, run_id: str, distlaunch_home: Path) -> None:
    """Issue 59, item 12: after a drain, `down` kept the drained host's run dir for ``retired``,
    which distlaunch itself wrote there (the agent's ``retire``, as a drain leaves it)."""
    code, err = _up(tmp_path, run_id)
    assert code == 0, err[-2000:]
    host_dir = distlaunch_home / "runs" / run_id / "hosts" / "here"
    retire(str(host_dir), "drained by the operator")
    (host_dir / "retired.tmp").write_text("a retire cut short")
    down = cli("down", run_id, timeout=60)
    assert down.returncode == 0, down.stderr
    assert "kept" not in down.stderr, down.stderr
    assert not host_dir.exists()
