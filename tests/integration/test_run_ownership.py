"""Another local user never runs code as you through a run (DESIGN.md section 8): a RUN given as an
id resolves only under your own state root, and a run dir, its state.json and its recorded
profile (which name the ``python`` and commands distlaunch runs) are used only if you own them and
no one else can write them. The planted runs name a ``python`` that leaves a marker if run."""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.integration.jobtools import cli
from tests.integration.otheruser import as_other, require_other_user, shared_tmp
from tests.profiles import local_host, profile_toml

RUN_ID = "planted-20260101-000000-beef"


def _state(run_dir: Path, python: Path, profile: Path | None = None) -> dict[str, object]:
    """A state.json whose one local host runs ``python`` for `down` and `stacks`."""
    return {"run_id": run_dir.name, "name": "planted", "profile": str(profile or run_dir / "p.toml"),
            "hosts": {"h": {"config": {"name": "h", "address": "localhost", "transport": "local"},
                            "base_dir": str(run_dir / "hosts" / "h"), "python": str(python)}},
            "tasks": {"worker:0": {"host": "h", "slug": "worker-0", "port": 1}}}


def _marker_script(path: Path, marker: Path) -> Path:
    path.write_text(f"#!/bin/sh\necho \"ran as $(id -u)\" >> {marker}\n")
    path.chmod(0o755)
    return path


@pytest.fixture
def shared() -> Iterator[Path]:
    require_other_user()
    with shared_tmp() as folder:
        yield folder


@pytest.fixture
def planted(shared: Path, tmp_path: Path) -> Path:
    """A run dir another user made in a /tmp-like folder, naming a python of theirs that would
    leave ``tmp_path / "ran"`` (a folder only we can write: it proves who ran it)."""
    run_dir = shared / RUN_ID
    evil = shared / "evil.sh"
    state = json.dumps(_state(run_dir, evil))
    as_other('mkdir -m 755 "$D/$ID" && printf "%s" "$STATE" > "$D/$ID/state.json" && '
             'printf "#!/bin/sh\\necho ran >> $M\\n" > "$D/evil.sh" && chmod 755 "$D/evil.sh"',
             D=str(shared), ID=RUN_ID, STATE=state, M=str(tmp_path / "ran"))
    assert (run_dir / "state.json").stat().st_uid == 65534
    return run_dir


def _one_line(stderr: str) -> str:
    lines = [ln for ln in stderr.splitlines() if ln.strip()]
    assert len(lines) == 1 and "Traceback" not in stderr, stderr
    return lines[0]


@pytest.mark.parametrize("verb", ["down", "stacks"])
def test_a_run_id_never_resolves_in_the_current_directory(verb: str, planted: Path, tmp_path: Path) -> None:
    result = cli(verb, RUN_ID, cwd=planted.parent, timeout=60)
    line = _one_line(result.stderr)
    assert result.returncode == 2, result.stderr
    assert f"no run {RUN_ID!r} under" in line and f"./{RUN_ID}" in line  # says how to mean the folder here
    assert not (tmp_path / "ran").exists()


def test_another_users_run_dir_given_as_a_path_is_refused(planted: Path, tmp_path: Path) -> None:
    result = cli("down", str(planted), timeout=60)
    line = _one_line(result.stderr)
    assert result.returncode == 2
    assert str(planted) in line and "owned by" in line and "65534" in line and "not by you" in line
    assert not (tmp_path / "ran").exists() and not (planted / "down-requested").exists()


@pytest.mark.parametrize(("dir_mode", "file_mode", "culprit", "problem"), [
    (0o777, 0o600, "", "writable by group and others (mode 0777)"),
    (0o770, 0o600, "", "writable by group (mode 0770)"),
    (0o700, 0o602, "/state.json", "writable by others (mode 0602)"),
], ids=["dir-0777", "dir-0770", "state-0602"])
def test_a_run_dir_of_ours_that_others_may_write_is_refused(tmp_path: Path, dir_mode: int, file_mode: int,
                                                           culprit: str, problem: str) -> None:
    run_dir = tmp_path / "ours"
    run_dir.mkdir()
    python = _marker_script(tmp_path / "python.sh", tmp_path / "ran")
    (run_dir / "state.json").write_text(json.dumps(_state(run_dir, python)))
    os.chmod(run_dir / "state.json", file_mode)
    os.chmod(run_dir, dir_mode)
    result = cli("down", str(run_dir), timeout=60)
    line = _one_line(result.stderr)
    assert result.returncode == 2
    assert f"{run_dir}{culprit}: {problem}" in line and "chmod go-w" in line
    assert not (tmp_path / "ran").exists()


def test_a_state_file_linked_to_another_users_file_is_refused(shared: Path, tmp_path: Path) -> None:
    run_dir = tmp_path / "ours"
    run_dir.mkdir(mode=0o700)
    theirs = shared / "state.json"
    as_other('printf "%s" "$STATE" > "$F"', F=str(theirs),
             STATE=json.dumps(_state(run_dir, _marker_script(tmp_path / "python.sh", tmp_path / "ran"))))
    (run_dir / "state.json").symlink_to(theirs)
    result = cli("down", str(run_dir), timeout=60)
    line = _one_line(result.stderr)
    assert result.returncode == 2 and f"{run_dir}/state.json" in line and "symbolic link" in line
    assert not (tmp_path / "ran").exists()


def test_a_recorded_profile_others_may_write_is_not_run_again(tmp_path: Path) -> None:
    """`attach` of a run whose supervisor died plans it again from the recorded profile.toml."""
    run_dir = tmp_path / "ours"
    run_dir.mkdir(mode=0o700)
    python = _marker_script(tmp_path / "python.sh", tmp_path / "ran")
    (run_dir / "state.json").write_text(json.dumps(_state(run_dir, python, profile=tmp_path / "p.toml")))
    recorded = run_dir / "profile.toml"
    # (a chief, where the run had a worker: a distlaunch that read it anyway stops at the mismatch
    # instead of starting a supervisor)
    recorded.write_text(profile_toml(name="p", strategy="custom", command=str(python), hosts=[local_host("h")],
                                     roles={"chief": {}}))
    recorded.chmod(0o666)
    result = cli("attach", str(run_dir), "--no-tui", timeout=60)
    line = _one_line(result.stderr)
    assert result.returncode == 2
    assert f"{recorded}: writable by group and others (mode 0666)" in line
    assert not (tmp_path / "ran").exists()
