"""Issue 54 §1: the profile's checkpoint_dir, watched by the agent: one `checkpoint` event (api
"watched") for each new complete checkpoint, never one for half a checkpoint."""

from __future__ import annotations

import os
from pathlib import Path

from launcher.agent.ckptwatch import CheckpointWatch, watched_directory
from launcher.agent.spec import AgentSpec


def _watch(directory: Path, step: int | None = 40) -> CheckpointWatch:
    return CheckpointWatch("r1", "worker:0", "a", str(directory), lambda: step)


def _write(path: Path, size: int = 8, age_s: float = 0.0) -> None:
    path.write_bytes(b"x" * size)
    if age_s:
        then = path.stat().st_mtime - age_s
        os.utime(path, (then, then))


def test_a_tf_prefix_counts_once_its_index_and_every_shard_are_there(tmp_path: Path) -> None:
    watch = _watch(tmp_path)
    assert watch.scan() == []  # the first scan: nothing there
    _write(tmp_path / "ckpt-1.data-00000-of-00002")
    assert watch.scan() == []  # no index: still being written
    _write(tmp_path / "ckpt-1.index")
    assert watch.scan() == []  # one shard of two
    _write(tmp_path / "ckpt-1.data-00001-of-00002")
    _write(tmp_path / "checkpoint", 4)
    [event] = watch.scan()
    assert (event.task, event.host, event.directory, event.api, event.step) == (
        "worker:0", "a", str(tmp_path), "watched", 40)
    assert event.files == ["checkpoint", "ckpt-1.data-00000-of-00002", "ckpt-1.data-00001-of-00002", "ckpt-1.index"]
    assert event.bytes == 24
    assert watch.scan() == []  # once


def test_a_file_of_its_own_format_counts_once_settled_and_temporary_names_never(tmp_path: Path) -> None:
    watch = _watch(tmp_path)
    watch.scan()
    _write(tmp_path / "state-10.npz", 100)
    _write(tmp_path / "state-20.npz.tmp", 50)
    _write(tmp_path / ".hidden", 5)
    assert watch.scan() == []  # seen once: not settled yet
    [event] = watch.scan()
    assert event.files == ["state-10.npz"] and event.bytes == 100
    _write(tmp_path / "state-10.npz", 120)  # rewritten in place: a new checkpoint once settled
    assert watch.scan() == []
    [event] = watch.scan()
    assert event.bytes == 120


def test_the_first_scan_reports_only_the_newest_checkpoint_already_there(tmp_path: Path) -> None:
    _write(tmp_path / "old-1.bin", age_s=60)
    _write(tmp_path / "old-2.bin", age_s=30)
    watch = _watch(tmp_path)
    [event] = watch.scan()
    assert event.files == ["old-2.bin"]
    assert watch.scan() == [] and watch.scan() == []


def test_the_tasks_end_takes_what_is_there_as_settled(tmp_path: Path) -> None:
    watch = _watch(tmp_path, step=None)
    watch.scan()
    _write(tmp_path / "weights.h5", 10)
    [event] = watch.scan(final=True)
    assert event.files == ["weights.h5"] and event.step is None


def test_a_directory_not_there_yet_is_no_error(tmp_path: Path) -> None:
    assert _watch(tmp_path / "later").scan() == []


def test_checkpoint_dir_is_relative_to_the_workdir_and_travels_in_spec_json() -> None:
    assert watched_directory("/home/u/job", "ckpt") == "/home/u/job/ckpt"
    assert watched_directory("/home/u/job", "/data/ckpt") == "/data/ckpt"
    spec = AgentSpec(run="r", task="worker:0", command="c", workdir="/w", checkpoint_dir="ckpt/{x}")
    assert AgentSpec.from_dict(spec.to_dict()).checkpoint_dir == "ckpt/{x}"


def test_a_name_numbered_by_step_gives_its_step_and_a_save_counter_does_not(tmp_path: Path) -> None:
    steps = iter([100, 260, 400])
    watch = CheckpointWatch("r1", "chief:0", "a", str(tmp_path), lambda: next(steps))
    assert watch.scan() == []  # step 100
    for name in ("ckpt-200.index", "ckpt-200.data-00000-of-00001"):
        _write(tmp_path / name)
    [event] = watch.scan()  # step 260 now: ckpt-200 lies between 100 and 260
    assert event.step == 200
    for name in ("model-3.index", "model-3.data-00000-of-00001"):
        _write(tmp_path / name)
    [event] = watch.scan()  # step 400: 3 is a save counter, not a step of this window
    assert event.step == 400
