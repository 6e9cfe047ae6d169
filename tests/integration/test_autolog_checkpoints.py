"""Issue 54 §1 end to end: unmodified TensorFlow / Keras scripts under `distlaunch up` write
checkpoints, and each one comes out as a `checkpoint` event with its step, directory and files.

One small job runs them side by side (tests/data/autolog/checkpoint_writers.py, one API per
worker index; the evaluator writes files of its own format into the profile's checkpoint_dir);
each test looks at one writer's events, so each fails on its own when its writer is not seen."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from tests.integration.jobtools import REPO, cli, kill_run_processes, pids_with_run_id, read_events
from tests.profiles import build_profile

pytestmark = pytest.mark.slow

SCRIPT = REPO / "tests" / "data" / "autolog" / "checkpoint_writers.py"
ENV = {"TF_CPP_MIN_LOG_LEVEL": "2", "DISTLAUNCH_AUTOLOG_INTERVAL": "0.05", "DISTLAUNCH_REPORT_INTERVAL": "0",
       "PYTHONUNBUFFERED": "1"}
RUN_ID = "it-al-ckpt"


@pytest.fixture(scope="module")
def job(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, list[dict[str, Any]]]:
    tmp = tmp_path_factory.mktemp("ckpt")
    work = tmp / "work"
    work.mkdir()
    path = build_profile(tmp / "job.toml", name="autolog-checkpoints", strategy="custom",
                         command=f"{{python}} {SCRIPT} {{index}}", workdir=work, restart="never",
                         env={**ENV, "DONE_EVENTS": str(tmp / "run" / "events.jsonl"), "DONE_COUNT": "4"},
                         roles={"worker": 4, "evaluator": {"command": f"{{python}} {SCRIPT} own_files",
                                                           "checkpoint_dir": "ckpt-own_files"}},
                         role_hosts=False)
    run_dir = tmp / "run"
    try:
        result = cli("up", str(path), "--no-tui", "--run-dir", str(run_dir), "--run-id", RUN_ID, timeout=300)
        assert result.returncode == 0, result.stdout[-4000:] + result.stderr[-2000:]
        assert pids_with_run_id(RUN_ID) == []
    finally:
        kill_run_processes(RUN_ID)
    events = read_events(run_dir)
    assert [e["state"] for e in events if e["kind"] == "job"][-1] == "Succeeded"
    ended = {e["task"]: (e["state"], e["exit_code"]) for e in events if e["kind"] == "state"}
    assert all(end == ("succeeded", 0) for end in ended.values()), ended  # none stopped by the chief's success
    for log in (run_dir / "logs").glob("*.log"):
        assert "distlaunch autolog:" not in log.read_text(), f"autolog turned itself off in {log.name}"
    return work, events


def _checkpoints(events: list[dict[str, Any]], task: str) -> list[dict[str, Any]]:
    return [e for e in events if e["kind"] == "checkpoint" and e["task"] == task]


def _said(events: list[dict[str, Any]], task: str) -> str:
    """The task's own lines and what it told distlaunch, for a failure's message."""
    return "\n".join(e["line"] if e["kind"] == "log" else str(e) for e in events
                     if e.get("task") == task and e["kind"] in ("log", "checkpoint", "state"))[-4000:]


def _wrote(run_events: list[dict[str, Any]], task: str) -> list[int]:
    """The steps the script said it checkpointed at (its `WROTE <step>` lines)."""
    return [int(e["line"].split()[1]) for e in run_events
            if e["kind"] == "log" and e["task"] == task and e["line"].startswith("WROTE ")]


def _on_disk(directory: str, files: list[str]) -> None:
    for name in files:
        assert (Path(directory) / name).is_file(), (directory, name)


def test_checkpoint_manager_saves_are_reported_with_the_optimizer_step(job: tuple[Path, list[dict[str, Any]]]) -> None:
    work, events = job
    seen = _checkpoints(events, "worker:0")
    assert [e["step"] for e in seen] == _wrote(events, "worker:0") == [10, 20, 30]  # the step, not save_counter
    assert {e["api"] for e in seen} == {"checkpoint_manager"}
    assert {e["directory"] for e in seen} == {str(work / "ckpt-checkpoint_manager")}
    last = seen[-1]
    assert set(last["files"]) == {"checkpoint", "ckpt-3.index", "ckpt-3.data-00000-of-00001"}
    assert last["bytes"] > 0 and last["seconds"] >= 0 and last["host"]
    _on_disk(last["directory"], last["files"])


def test_keras3_backup_and_restore_is_reported_each_epoch(job: tuple[Path, list[dict[str, Any]]]) -> None:
    work, events = job
    seen = _checkpoints(events, "worker:1")
    assert [(e["api"], e["epoch"], e["step"]) for e in seen] == [
        ("backup_and_restore", 1, 4), ("backup_and_restore", 2, 8), ("backup_and_restore", 3, 12)]
    assert seen[-1]["directory"] == str(work / "ckpt-keras3_backup")
    assert seen[-1]["files"] == ["latest.weights.h5", "training_metadata.json"]
    _on_disk(seen[-1]["directory"], seen[-1]["files"])


def test_tf_keras_backup_and_restore_is_reported_in_its_real_directory(job: tuple[Path, list[dict[str, Any]]]) -> None:
    work, events = job
    seen = _checkpoints(events, "worker:2")
    assert [(e["api"], e["epoch"], e["step"]) for e in seen] == [
        ("backup_and_restore", 1, 4), ("backup_and_restore", 2, 8), ("backup_and_restore", 3, 12)], \
        _said(events, "worker:2") + f"\non disk: {sorted(p.name for p in (work / 'ckpt-tf_keras_backup').rglob('*'))}"
    # tf_keras keeps the backup of the chief (a single worker is its own chief) under chief/
    assert seen[-1]["directory"] == str(work / "ckpt-tf_keras_backup" / "chief")
    assert set(seen[-1]["files"]) == {"checkpoint", "ckpt-3.index", "ckpt-3.data-00000-of-00001"}
    _on_disk(seen[-1]["directory"], seen[-1]["files"])


def test_tf1_saver_is_reported_with_its_global_step(job: tuple[Path, list[dict[str, Any]]]) -> None:
    work, events = job
    seen = _checkpoints(events, "worker:3")
    assert [e["step"] for e in seen] == _wrote(events, "worker:3") == [10, 20, 30]
    assert {e["api"] for e in seen} == {"saver"}
    assert seen[-1]["directory"] == str(work / "ckpt-saver")
    assert set(seen[-1]["files"]) == {"checkpoint", "model.ckpt-30.index", "model.ckpt-30.meta",
                                      "model.ckpt-30.data-00000-of-00001"}
    _on_disk(seen[-1]["directory"], seen[-1]["files"])


def test_a_watched_checkpoint_dir_reports_each_settled_file(job: tuple[Path, list[dict[str, Any]]]) -> None:
    work, events = job
    seen = _checkpoints(events, "evaluator:0")
    assert {e["api"] for e in seen} == {"watched"}
    assert {e["directory"] for e in seen} == {str(work / "ckpt-own_files")}
    assert [e["files"] for e in seen] == [["state-10.npz"], ["state-20.npz"]]  # never the temporary name
    assert all(e["bytes"] > 0 for e in seen)


def test_mwms_tf_keras_backup_is_reported_by_the_chief_only_in_the_real_directory(tmp_path: Path) -> None:
    """TensorFlow's multi-worker Keras pattern: every worker names one backup_dir; tf_keras writes the
    chief's (worker:0's) backup there and each other worker's into a temporary directory it deletes
    at once. Only what remains is reported: the chief's, in the real directory."""
    work = tmp_path / "work"
    work.mkdir()
    path = build_profile(tmp_path / "job.toml", name="autolog-mwms-backup", strategy="multi_worker_mirrored",
                         command=f"{{python}} {SCRIPT} mwms_tf_keras_backup", workdir=work, env=ENV,
                         restart="never", roles={"worker": 2}, role_hosts=False)
    run_dir, run_id = tmp_path / "run", "it-al-ckpt-mwms"
    try:
        result = cli("up", str(path), "--no-tui", "--run-dir", str(run_dir), "--run-id", run_id, timeout=300)
        assert result.returncode == 0, result.stdout[-4000:] + result.stderr[-2000:]
    finally:
        kill_run_processes(run_id)
    events = read_events(run_dir)
    chief = _checkpoints(events, "worker:0")
    assert [(e["api"], e["epoch"], e["step"]) for e in chief] == [("backup_and_restore", 1, 4),
                                                                  ("backup_and_restore", 2, 8)]
    assert {e["directory"] for e in chief} == {str(work / "ckpt-mwms_tf_keras_backup" / "chief")}
    _on_disk(chief[-1]["directory"], chief[-1]["files"])
    assert _checkpoints(events, "worker:1") == []  # its temporary copies are gone
