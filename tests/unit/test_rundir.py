from __future__ import annotations

import contextlib
import json
import os
import shutil
import stat
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from launcher import events as ev
from launcher.errors import UserError
from launcher.paths import check_run_id
from launcher.rundir import RunDir, new_run_id, read_state
from launcher.runlookup import find_run, read_events


def test_events_logs_and_state_are_written_and_read_back(tmp_path: Path) -> None:
    rd = RunDir.create("r1", tmp_path / "r1")
    rd.append(ev.job_event("r1", ev.JOB_RUNNING))
    rd.append(ev.log_event("r1", "worker:1", "stderr", "boom"))
    rd.append(ev.metric_event("r1", "chief:0", step=5, loss=0.5))
    rd.write_state({"run_id": "r1", "tasks": {}})
    # visible before close: every event is flushed as it comes
    kinds = [e.kind for e in read_events(rd.path)]
    assert kinds == ["job", "log", "metric"]
    assert (rd.path / "logs" / "worker-1.log").read_text() == "boom\n"
    assert read_state(rd.path)["run_id"] == "r1"
    rd.close()


def test_a_torn_last_line_is_skipped(tmp_path: Path) -> None:
    rd = RunDir.create("r2", tmp_path / "r2")
    rd.append(ev.job_event("r2", ev.JOB_CREATED))
    rd.close()
    with (rd.path / "events.jsonl").open("a") as fh:
        fh.write('{"v": 1, "kind": "job", "ts"')
    assert len(list(read_events(rd.path))) == 1


def test_find_run_by_id_path_and_latest(tmp_path: Path, distlaunch_home: Path) -> None:
    first = RunDir.create(new_run_id("my job"))
    first.write_state({"run_id": first.run_id})
    second = RunDir.create(new_run_id("my job"))
    second.write_state({"run_id": second.run_id})
    assert " " not in second.run_id and second.run_id.startswith("my-job-")
    assert find_run(None) == second.path
    assert find_run(first.run_id) == first.path
    assert find_run(str(first.path)) == first.path
    with pytest.raises(UserError, match="no run 'nope'"):
        find_run("nope")


def test_generated_run_ids_fit_the_rule_up_run_id_checks() -> None:
    for name in ("my job", "-dashed", "_under", "modèle/ü", "", "..", "a" * 80, "latest"):
        run_id = new_run_id(name)
        assert check_run_id(run_id) == run_id, name
    for bad in ("../x", "a/b", "..", ".x", "-x", "latest", "a b", "é", "x" * 101, ""):
        with pytest.raises(UserError, match="not a run id"):
            check_run_id(bad)


def test_state_file_problems_are_user_errors(tmp_path: Path) -> None:
    with pytest.raises(UserError, match="not a distlaunch run directory"):
        read_state(tmp_path)
    (tmp_path / "state.json").write_text("{broken")
    with pytest.raises(UserError, match="unreadable run state"):
        read_state(tmp_path)
    (tmp_path / "state.json").write_text(json.dumps({"run_id": "x"}))
    assert read_state(tmp_path)["run_id"] == "x"


def test_run_dirs_are_private_to_their_user_whatever_the_umask(tmp_path: Path) -> None:
    old = os.umask(0o022)
    try:
        rd = RunDir.create("r2", tmp_path / "runs" / "r2")
        rd.append(ev.log_event("r2", "worker:0", "stdout", "token=abc"))
        rd.write_state({"run_id": "r2", "tasks": {}})
        rd.close()
    finally:
        os.umask(old)
    assert stat.S_IMODE((tmp_path / "runs" / "r2").stat().st_mode) == 0o700
    assert stat.S_IMODE((tmp_path / "runs" / "r2" / "logs").stat().st_mode) == 0o700
    for name in ("events.jsonl", "state.json", "logs/worker-0.log"):
        assert stat.S_IMODE((rd.path / name).stat().st_mode) == 0o600, name


@pytest.fixture
def small_tmpfs(tmp_path: Path) -> Iterator[Path]:
    if os.geteuid() != 0 or shutil.which("mount") is None:
        pytest.skip("needs root to mount a tmpfs")
    mnt = tmp_path / "tiny"
    mnt.mkdir()
    subprocess.run(["mount", "-t", "tmpfs", "-o", "size=256k", "tmpfs", str(mnt)], check=True)
    try:
        yield mnt
    finally:
        subprocess.run(["umount", "-l", str(mnt)], check=False)


def test_a_full_disk_holds_events_in_memory_says_so_once_and_loses_nothing(small_tmpfs: Path) -> None:
    told: list[str] = []
    rd = RunDir.create("full", small_tmpfs / "full")
    rd.on_problem = told.append
    filler = small_tmpfs / "filler"
    with filler.open("wb", buffering=0) as fh, contextlib.suppress(OSError):  # take every free block
        while True:
            fh.write(b"x" * 4096)
    for i in range(200):
        rd.append(ev.log_event("full", "worker:0", "stdout", f"line {i} " + "y" * 100))
    assert len(told) == 1 and "disk is full" in told[0] and str(small_tmpfs / "full") in told[0]
    filler.unlink()
    rd.append(ev.log_event("full", "worker:0", "stdout", "after"))
    rd.close()
    assert len(told) == 2 and "writable again" in told[1]
    lines = [e.get("line") for e in read_events(rd.path)]
    assert lines == [f"line {i} " + "y" * 100 for i in range(200)] + ["after"]
    log = (rd.path / "logs" / "worker-0.log").read_text().splitlines()
    assert log == lines
