"""The checkpoint keeper's parts: the book, the pick, where a checkpoint goes on another host, and
copies that are complete or absent (real files, a real shell on this machine)."""

from __future__ import annotations

import io
import os
import shutil
import subprocess
import tarfile
import time
from collections.abc import Callable
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from launcher import events as ev
from launcher.errors import HostError
from launcher.model import HostConfig, Profile
from launcher.remote.session import HostSession
from launcher.runstate import RunState
from launcher.supervise.checkpoints import (
    Checkpoint,
    CheckpointBook,
    CheckpointKeeper,
)
from launcher.supervise.ckptbook import KEEP_RECORDS, ONE_SAVE_SECONDS
from launcher.supervise.ckptcopies import COPY_TIME_SHARE, Pacer, extract_complete, tar_files
from launcher.supervise.ckptplaces import (
    kept_off_host,
    park_command,
    push_command,
    restores,
    saves,
    source_of,
    state_text,
    target_directory,
    task_directory,
)
from launcher.transport.local import LocalHost

FILES = ["ckpt-40.index", "ckpt-40.data-00000-of-00001", "checkpoint"]


def cp(task: str = "worker:0", step: int = 40, host: str = "a", directory: str = "/d/a/ckpt") -> Checkpoint:
    return Checkpoint(task, host, directory, [f.replace("40", str(step)) for f in FILES], step, ts=float(step))


def session(name: str, outputs: str = "", **env: str) -> HostSession:
    config = HostConfig(name=name, address="localhost", transport="local", env=dict(env))
    return HostSession(config, LocalHost(config), "r", "/nonexistent", "python3", outputs)


def test_the_book_keeps_each_tasks_newest_checkpoints_in_step_order() -> None:
    book = CheckpointBook()
    for step in (20, 60, 40, *range(80, 80 + 20 * KEEP_RECORDS, 20)):
        book.add(cp(step=step))
    book.add(cp(step=40, task="worker:1"))
    steps = [c.step for c in book.history("worker:0")]
    assert steps == sorted(steps, reverse=True) and len(steps) == KEEP_RECORDS
    assert book.newest("worker:0") is book.history("worker:0")[0]
    assert book.newest("ps:0") is None
    again = CheckpointBook.from_json(RunState.from_json(
        RunState("r", checkpoints=book.to_json()).to_json()).checkpoints)
    assert again.to_json() == book.to_json()


def test_the_newest_copied_checkpoint_outlives_newer_saves_the_copier_did_not_reach() -> None:
    # a fast Keras fit saves every second, the copier copies one in twenty: the one copy must stay
    # with its record, or a restart that finds the newer saves gone has nothing to resume from
    book = CheckpointBook()
    first = cp(step=25)
    book.add(first)
    first.copy = "/run/checkpoints/worker-0/25"
    for step in range(50, 50 + 25 * (KEEP_RECORDS + 2), 25):
        book.add(cp(step=step))
    history = book.history("worker:0")
    assert history[-1] is first and len(history) == KEEP_RECORDS + 1
    last = 50 + 25 * (KEEP_RECORDS + 1)
    assert [c.step for c in history[:-1]] == list(range(last, last - 25 * KEEP_RECORDS, -25))
    copied = history[0]  # a newer copy made: the older one is an ordinary record again, and goes
    copied.copy = "/run/checkpoints/worker-0/150"
    book.add(cp(step=200))
    assert first not in book.history("worker:0") and len(book.history("worker:0")) == KEEP_RECORDS


def test_the_source_is_the_chief_else_worker0_else_the_lone_task() -> None:
    mwms = ["worker:0", "worker:1"]
    assert source_of(mwms, mwms) == "worker:0"
    pss = ["chief:0", "ps:0", "worker:0"]
    assert source_of(["chief:0", "ps:0"], pss) == "chief:0"
    assert source_of(["ps:0"], pss) == "ps:0"  # a lone ps restarted alone reads its own
    assert source_of(["worker:1"], mwms) == "worker:1"
    shrunk = ["worker:1", "worker:2"]  # worker:0's host lost, no spare: the first worker left saves
    assert source_of(shrunk, shrunk) == "worker:1"


def test_a_directory_is_named_on_the_target_as_its_host_names_its_roots() -> None:
    a = session("a", "/home/u/out/job", CKPT_ROOT="/disk/a", OTHER="x")
    b = session("b", "/srv/u/out/job", CKPT_ROOT="/disk/b")
    assert target_directory("/disk/a/ckpt", a, b) == "/disk/b/ckpt"
    assert target_directory("/home/u/out/job/ckpt/chief", a, b) == "/srv/u/out/job/ckpt/chief"
    assert target_directory("/elsewhere/ckpt", a, b) == "/elsewhere/ckpt"  # same path on every host
    assert target_directory("/disk/ab/ckpt", a, b) == "/disk/ab/ckpt"  # a root is a whole path component


def test_the_state_file_names_the_checkpoint_relative_to_its_directory() -> None:
    assert state_text(cp(step=40)) == 'model_checkpoint_path: "ckpt-40"\nall_model_checkpoint_paths: "ckpt-40"\n'
    assert state_text(Checkpoint("worker:0", "a", "/d", ["weights.h5"])) is None


def write_checkpoint(directory: Path, step: int) -> Checkpoint:
    directory.mkdir(parents=True, exist_ok=True)
    c = cp(step=step, directory=str(directory))
    for name in c.files:
        (directory / name).write_text(f"{name} of step {step}")
    return c


def test_a_copy_is_complete_or_absent(tmp_path: Path) -> None:
    source = write_checkpoint(tmp_path / "src", 40)
    data = tar_files(tmp_path / "src", source.files)
    dest = tmp_path / "copies" / "worker-0" / "40"
    extract_complete(data, source.files, dest)
    assert sorted(p.name for p in dest.iterdir()) == sorted(source.files)
    # cut short (a dropped link): nothing at all, no temp dir left
    for cut in (data[: len(data) // 2], data[:700], b""):
        other = tmp_path / "copies" / "worker-0" / "60"
        with pytest.raises((ValueError, tarfile.TarError, OSError)):
            extract_complete(cut, source.files, other)
        assert not other.exists()
    # a file missing, or one more than announced: refused
    short = tar_files(tmp_path / "src", source.files[:2])
    with pytest.raises(ValueError, match="lacks"):
        extract_complete(short, source.files, tmp_path / "copies" / "x")
    assert sorted(p.name for p in (tmp_path / "copies" / "worker-0").iterdir()) == ["40"]
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as tar:
        tar.add(str(tmp_path / "src" / "checkpoint"), arcname="../escape")
    with pytest.raises(ValueError, match="unexpected"):
        extract_complete(buf.getvalue(), source.files, tmp_path / "copies" / "y")
    assert not (tmp_path / "copies" / "y").exists() and not (tmp_path / "copies" / "escape").exists()


def test_a_push_replaces_the_state_file_last_and_a_cut_push_changes_nothing(tmp_path: Path) -> None:
    host = LocalHost(HostConfig(name="b", address="localhost", transport="local"))
    target = tmp_path / "b" / "ckpt"
    write_checkpoint(target, 20)
    source = write_checkpoint(tmp_path / "a" / "ckpt", 40)
    data = tar_files(tmp_path / "a" / "ckpt", source.files)
    before = (target / "checkpoint").read_text()
    cut = host.run(push_command(str(target), source.files, state_text(source)), stdin=data[:600])
    assert not cut.ok
    assert (target / "checkpoint").read_text() == before
    assert not list(target.glob(".distlaunch-in.*"))
    done = host.run(push_command(str(target), source.files, state_text(source)), stdin=data)
    assert done.ok, done.stderr
    assert (target / "checkpoint").read_text() == state_text(source)
    assert (target / "ckpt-40.index").read_text() == "ckpt-40.index of step 40"
    assert (target / "ckpt-20.index").exists()  # the older one is not read any more, not removed
    assert not list(target.glob(".distlaunch-in.*"))
    assert host.run(park_command(str(target))).ok
    assert not (target / "checkpoint").exists() and list(target.glob("checkpoint.distlaunch-parked-*"))


def test_copies_off_the_host_are_kept_of_the_checkpoints_groups_resume_from() -> None:
    mwms, pss = ["worker:0", "worker:1"], ["chief:0", "ps:0", "worker:0"]
    assert [t for t in mwms if kept_off_host(t, mwms, "multi_worker_mirrored")] == ["worker:0"]
    assert [t for t in pss if kept_off_host(t, pss, "parameter_server")] == ["chief:0"]
    assert all(kept_off_host(t, pss, "custom") for t in pss)


def test_who_reads_the_sources_checkpoint() -> None:
    assert restores("worker:1", "worker:0", "multi_worker_mirrored")
    assert restores("worker:1", "chief:0", "multi_worker_mirrored")
    assert not restores("ps:0", "chief:0", "parameter_server")
    assert not restores("worker:0", "chief:0", "parameter_server")
    assert restores("chief:0", "chief:0", "parameter_server")


# -- the keeper before a start: real files, a real shell per host, hosts told apart by CKPT_ROOT ---------


class Owner:
    """What the keeper uses of a supervisor: hosts a, b, c on this machine, some of them lost."""

    def __init__(self, tmp: Path, roots: dict[str, Path], lost: set[str], spares: tuple[str, ...] = (),
                 kept: int = 2) -> None:
        self.run_id = "r"
        self.sessions = {h: session(h, "", CKPT_ROOT=str(root)) for h, root in roots.items()}
        self.tasks = {"worker:0": None, "worker:1": None}
        self.plan = SimpleNamespace(profile=SimpleNamespace(
            strategy="multi_worker_mirrored", checkpoint_copies_kept=kept, checkpoint_copy_bandwidth=0,
            checkpoint_copy_percent=5))
        self.lost = lost
        self.spares = spares
        self.notices: list[str] = []
        self.said: list[str] = []
        self.restated: list[ev.CheckpointEvent] = []
        self.rundir = SimpleNamespace(path=tmp / "run")
        self.rested: list[float] = []  # the copier's rests after each copy, in seconds

    def call(self, fn: Callable[[], None]) -> None:
        fn()

    def publish(self, event: ev.Event, line: str | None = None) -> None:
        if isinstance(event, ev.CheckpointEvent):
            self.restated.append(event)
        else:
            assert isinstance(event, ev.LogEvent) and event.line.startswith("distlaunch: ")
            self.said.append(event.line.removeprefix("distlaunch: "))

    def notice(self, message: str) -> None:
        self.notices.append(message)

    def write_state(self) -> None:
        pass

    def reachable(self, host: str) -> bool:
        return host not in self.lost

    def in_job(self, host: str) -> bool:
        return host not in self.lost

    def spare_hosts(self) -> tuple[str, ...]:
        return self.spares


def member(task: str, host: str) -> Any:
    return SimpleNamespace(spec=SimpleNamespace(task_id=task, host=host))


def keeper_on(tmp_path: Path, roots: dict[str, Path], lost: set[str], spares: tuple[str, ...] = (),
              kept: int = 2) -> tuple[CheckpointKeeper, Owner]:
    owner = Owner(tmp_path, roots, lost, spares, kept)
    keeper = CheckpointKeeper(owner)  # type: ignore[arg-type]
    keeper.copier.pacer.sleep = owner.rested.append  # the copier's rests, not slept here
    return keeper, owner


def test_a_lost_hosts_checkpoint_on_shared_storage_is_read_where_it_is(tmp_path: Path) -> None:
    shared = tmp_path / "shared"
    keeper, owner = keeper_on(tmp_path, {h: shared for h in "abc"}, lost={"a"})
    keeper.book.add(write_checkpoint(shared / "ckpt", 40))
    before = (shared / "ckpt" / "checkpoint").read_text()
    keeper.before_start([member("worker:0", "c"), member("worker:1", "b")])
    assert (shared / "ckpt" / "checkpoint").read_text() == before  # nothing parked, nothing pushed
    assert owner.said == ["resuming worker:0, worker:1 from step 40 (checkpoint of worker:0)"]


def test_a_lost_hosts_checkpoint_comes_from_the_copy_to_every_member(tmp_path: Path) -> None:
    roots = {h: tmp_path / f"disk-{h}" for h in "abc"}
    keeper, owner = keeper_on(tmp_path, roots, lost={"a"})
    old = write_checkpoint(roots["a"] / "ckpt", 20)
    new = write_checkpoint(roots["a"] / "ckpt", 40)
    old.copy = str(tmp_path / "copy-20")
    extract_complete(tar_files(roots["a"] / "ckpt", old.files), old.files, Path(old.copy))
    keeper.book.add(old)
    keeper.book.add(new)  # never copied: host a took it along
    keeper.before_start([member("worker:0", "c"), member("worker:1", "b")])
    for host in "bc":
        assert (roots[host] / "ckpt" / "checkpoint").read_text() == state_text(old)
        assert (roots[host] / "ckpt" / "ckpt-20.index").read_text() == "ckpt-20.index of step 20"
    assert owner.said == ["resuming worker:0, worker:1 from step 20 (checkpoint of worker:0, put in place for "
                          "worker:0 on c, worker:1 on b); step 40 of worker:0 did not survive host a: step 20 is older"]


def test_with_no_checkpoint_left_the_members_start_from_scratch_together(tmp_path: Path) -> None:
    roots = {h: tmp_path / f"disk-{h}" for h in "abc"}
    keeper, owner = keeper_on(tmp_path, roots, lost={"a"})
    keeper.book.add(write_checkpoint(roots["a"] / "ckpt", 40))
    write_checkpoint(roots["b"] / "ckpt", 20)  # worker:1's older one: it would resume alone from it
    keeper.before_start([member("worker:0", "c"), member("worker:1", "b")])
    assert not (roots["b"] / "ckpt" / "checkpoint").exists()
    assert list((roots["b"] / "ckpt").glob("checkpoint.distlaunch-parked-*"))
    assert owner.said == ["resuming from step 0: no checkpoint of worker:0 survived host a; worker:0, worker:1 "
                          "start from scratch together"]


def test_a_restart_with_no_checkpoint_ever_seen_says_it_starts_from_step_0(tmp_path: Path) -> None:
    roots = {h: tmp_path / f"disk-{h}" for h in "ab"}
    keeper, owner = keeper_on(tmp_path, roots, lost=set())
    keeper.before_start([member("worker:0", "a"), member("worker:1", "b")])
    assert owner.said == ["no checkpoint of worker:0 seen yet: worker:0, worker:1 start again from step 0, "
                          "unless the script restores one itself"]
    assert owner.notices == owner.said  # to every client too, not only in the source task's log
    owner.said.clear()
    keeper.before_start([member("worker:1", "b")])  # alone, worker:1 is not the one that saves
    assert owner.said == []
    owner.plan.profile.strategy = "custom"  # where each task restarts alone from its own
    keeper.before_start([member("worker:1", "b")])
    assert owner.said == ["no checkpoint of worker:1 seen yet: worker:1 starts again from step 0, "
                          "unless the script restores one itself"]
    owner.said.clear()
    keeper.before_start([member("ps:0", "b")])  # a ps keeps no state of its own
    assert owner.said == []


def test_who_saves_what_a_group_restores() -> None:
    pss, mwms = ("chief:0", "worker:0", "worker:1", "ps:0"), ("worker:0", "worker:1")
    assert saves("chief:0", pss, "parameter_server") and not saves("worker:1", pss, "parameter_server")
    assert not saves("ps:0", pss, "parameter_server")
    assert saves("worker:0", mwms, "multi_worker_mirrored") and not saves("worker:1", mwms, "multi_worker_mirrored")
    assert saves("worker:1", mwms, "custom") and not saves("ps:0", pss, "custom")


def test_the_source_hosts_newest_checkpoint_is_pushed_to_the_other_members(tmp_path: Path) -> None:
    roots = {h: tmp_path / f"disk-{h}" for h in "ab"}
    keeper, owner = keeper_on(tmp_path, roots, lost=set())
    keeper.book.add(write_checkpoint(roots["a"] / "ckpt", 40))
    keeper.before_start([member("worker:1", "b"), member("worker:0", "a")])
    assert (roots["b"] / "ckpt" / "ckpt-40.data-00000-of-00001").is_file()
    assert (roots["b"] / "ckpt" / "checkpoint").read_text() == state_text(cp(step=40))
    assert owner.said == ["resuming worker:1, worker:0 from step 40 (checkpoint of worker:0, put in place for "
                          "worker:1 on b)"]


def backup(directory: Path, task: str, epoch: int, host: str) -> Checkpoint:
    """A Keras 3 BackupAndRestore save: fixed names, rewritten every epoch."""
    directory.mkdir(parents=True, exist_ok=True)
    files = ["latest.weights.h5", "training_metadata.json"]
    for name in files:
        (directory / name).write_text(f"{name} of {task} epoch {epoch}")
    return Checkpoint(task, host, str(directory), files, step=epoch * 25, epoch=epoch, api="backup_and_restore",
                      ts=float(epoch), nbytes=sum((directory / f).stat().st_size for f in files))


def test_a_save_cut_short_is_never_read_in_place_and_comes_from_the_copy(tmp_path: Path) -> None:
    """A worker stopped as Keras rewrote its backup leaves a half file of the announced names: read
    in place, every restart fails on it. The keeper puts the last copy of a whole save there."""
    roots = {h: tmp_path / f"disk-{h}" for h in "ab"}
    keeper, owner = keeper_on(tmp_path, roots, lost=set())
    folder = roots["a"] / "ckpt"
    old = backup(folder, "worker:0", 3, "a")
    old.copy = str(tmp_path / "copy-3")
    extract_complete(tar_files(folder, old.files), old.files, Path(old.copy))
    keeper.book.add(old)
    keeper.book.add(backup(folder, "worker:0", 4, "a"))  # announced, never copied
    (folder / "latest.weights.h5").write_text("latest.weights")  # epoch 5's save, cut short by the stop
    keeper.before_start([member("worker:0", "a"), member("worker:1", "b")])
    for root in roots.values():
        assert (root / "ckpt" / "latest.weights.h5").read_text() == "latest.weights.h5 of worker:0 epoch 3"
    assert owner.said == ["resuming worker:0, worker:1 from step 75 (checkpoint of worker:0, put in place for "
                          "worker:0 on a, worker:1 on b); step 100 of worker:0 did not survive host a: "
                          "step 75 is older"]
    # step 100 is gone (its files were written over): the next restart reads step 75 where it is
    assert [c.step for c in keeper.book.history("worker:0")] == [75]
    owner.said.clear()
    keeper.before_start([member("worker:0", "a"), member("worker:1", "b")])
    assert owner.said == ["resuming worker:0, worker:1 from step 75 (checkpoint of worker:0)"]


def test_a_folder_per_task_is_named_for_each_member() -> None:
    assert task_directory("/d/ckpt/backup-worker-0", "worker:0", "worker:2") == "/d/ckpt/backup-worker-2"
    assert task_directory("/d/worker_0/ckpt", "worker:0", "chief:0") == "/d/chief_0/ckpt"
    assert task_directory("/d/ckpt/worker0", "worker:0", "worker:11") == "/d/ckpt/worker11"
    for same in ("/d/ckpt", "/d/ckpt/worker-01", "/d/coworker-0", "/d/ckpt/backup-worker-0"):
        assert task_directory(same, "worker:0", "worker:0" if same.endswith("-0") else "worker:1") == same
    # only below the host's root: a home named like a task is nobody's folder
    assert task_directory("/home/worker0/out/ckpt/worker0", "worker:0", "worker:1", "/home/worker0/out") == \
        "/home/worker0/out/ckpt/worker1"
    assert task_directory("/home/worker0/out", "worker:0", "worker:1", "/home/worker0/out") == "/home/worker0/out"


def test_a_folder_per_task_gets_the_sources_save_where_the_member_reads(tmp_path: Path) -> None:
    """Issue 55: an MWMS group grows 2 -> 3 with a BackupAndRestore folder per worker, each host
    its own disk. worker:1 saved epoch 3 as worker:0 did (its own files stay); worker:2 is new on
    c: worker:0's epoch 3 goes into c's backup-worker-2, where worker:2 reads."""
    roots = {h: tmp_path / f"disk-{h}" for h in "abc"}
    keeper, owner = keeper_on(tmp_path, roots, lost=set())
    keeper.book.add(backup(roots["a"] / "ckpt" / "backup-worker-0", "worker:0", 3, "a"))
    keeper.book.add(backup(roots["b"] / "ckpt" / "backup-worker-1", "worker:1", 3, "b"))
    keeper.before_start([member("worker:0", "a"), member("worker:1", "b"), member("worker:2", "c")])
    assert (roots["b"] / "ckpt" / "backup-worker-1" / "latest.weights.h5").read_text() == \
        "latest.weights.h5 of worker:1 epoch 3"
    assert (roots["c"] / "ckpt" / "backup-worker-2" / "latest.weights.h5").read_text() == \
        "latest.weights.h5 of worker:0 epoch 3"
    assert not (roots["c"] / "ckpt" / "backup-worker-0").exists()  # a folder nobody reads
    assert owner.said == ["resuming worker:0, worker:1, worker:2 from step 75 (checkpoint of worker:0, put in "
                          "place for worker:2 on c)"]


def test_a_member_whose_own_folder_is_ahead_or_behind_gets_the_sources_save(tmp_path: Path) -> None:
    """One shared folder per task: worker:1 got to epoch 4 before the stop, worker:0's epoch 4 was
    never announced; worker:1 goes back to epoch 3 with worker:0 (the files of one save)."""
    shared = tmp_path / "shared"
    keeper, owner = keeper_on(tmp_path, {h: shared for h in "ab"}, lost=set())
    keeper.book.add(backup(shared / "backup-worker-0", "worker:0", 3, "a"))
    keeper.book.add(backup(shared / "backup-worker-1", "worker:1", 3, "b"))
    keeper.book.add(backup(shared / "backup-worker-1", "worker:1", 4, "b"))
    keeper.before_start([member("worker:0", "a"), member("worker:1", "b")])
    assert (shared / "backup-worker-1" / "latest.weights.h5").read_text() == "latest.weights.h5 of worker:0 epoch 3"
    assert owner.said == ["resuming worker:0, worker:1 from step 75 (checkpoint of worker:0, put in place for "
                          "worker:1 on b); goes back for worker:1 had step 100"]


def test_a_folder_that_names_the_saver_but_every_member_reads_is_not_one_per_task(tmp_path: Path) -> None:
    """No other task ever saved in a folder naming it: ``ckpt/worker-0`` is the one folder all read."""
    roots = {h: tmp_path / f"disk-{h}" for h in "ab"}
    keeper, owner = keeper_on(tmp_path, roots, lost=set())
    keeper.book.add(backup(roots["a"] / "ckpt" / "worker-0", "worker:0", 3, "a"))
    keeper.before_start([member("worker:0", "a"), member("worker:1", "b")])
    assert (roots["b"] / "ckpt" / "worker-0" / "latest.weights.h5").read_text() == \
        "latest.weights.h5 of worker:0 epoch 3"
    assert not (roots["b"] / "ckpt" / "worker-1").exists()
    assert owner.said == ["resuming worker:0, worker:1 from step 75 (checkpoint of worker:0, put in place for "
                          "worker:1 on b)"]


def test_a_cut_save_with_no_copy_is_parked_and_everyone_starts_from_scratch(tmp_path: Path) -> None:
    """One shared folder, no copies: a backup cut short is no checkpoint, and nobody reads it."""
    shared = tmp_path / "shared"
    keeper, owner = keeper_on(tmp_path, {h: shared for h in "ab"}, lost=set())
    keeper.book.add(backup(shared / "ckpt", "worker:0", 3, "a"))
    (shared / "ckpt" / "latest.weights.h5").write_text("cut")
    keeper.before_start([member("worker:0", "a"), member("worker:1", "b")])
    assert not (shared / "ckpt" / "latest.weights.h5").exists()
    assert [p.name.split(".distlaunch-parked-")[0] for p in sorted((shared / "ckpt").glob("*parked*"))] == \
        ["latest.weights.h5", "training_metadata.json"]
    assert owner.said == ["resuming from step 0: no checkpoint of worker:0 survived host a; worker:0, worker:1 "
                          "start from scratch together"]


def test_a_copy_off_the_host_and_a_placement_are_published_as_the_checkpoints_copies(tmp_path: Path) -> None:
    """Issue 54 §1: where the copies are reaches the dashboard and `status` (JobView's copies)."""
    from launcher.telemetry.jobview import JobView

    roots = {h: tmp_path / f"disk-{h}" for h in "abc"}
    keeper, owner = keeper_on(tmp_path, roots, lost=set())
    new = write_checkpoint(roots["a"] / "ckpt", 40)
    keeper.book.add(new)
    keeper.copier.copy_one(new)
    launcher_copy = tmp_path / "run" / "checkpoints" / "worker-0" / "40"
    assert new.copy == str(launcher_copy) and (launcher_copy / "ckpt-40.index").is_file()
    assert [e.copies for e in owner.restated] == [[f"launcher:{launcher_copy}"]]
    keeper.before_start([member("worker:0", "c"), member("worker:1", "b")])  # worker:0 moved to c
    placed = [f"c:{roots['c']}/ckpt", f"b:{roots['b']}/ckpt"]
    assert [e.copies for e in owner.restated][1:] == [placed]
    view = JobView()
    view.apply(ev.checkpoint_event("r", "worker:0", new.directory, step=40, files=new.files, host="a", ts=new.ts))
    for event in owner.restated:  # through the events file, as `status` and replay read them
        again = ev.Event.from_json(event.to_json())
        assert isinstance(again, ev.CheckpointEvent) and again.ts == new.ts and again.step == 40
        view.apply(again)
    task = view.tasks["worker:0"]
    assert task.checkpoint is not None and task.checkpoint.step == 40 and task.checkpoint.copies == []
    assert task.checkpoint_copies == [f"launcher:{launcher_copy}", *placed]
    # a slow copy of a checkpoint that is no longer the newest is not said
    newer = write_checkpoint(roots["a"] / "ckpt", 60)
    keeper.book.add(newer)
    keeper.copier.copy_one(new)
    assert len(owner.restated) == 2


# -- copies to the spares, the number kept, the bandwidth (issue 54 §4) ------------------------------


def test_the_newest_checkpoint_is_copied_on_to_the_spare_as_the_task_would_read_it_there(tmp_path: Path) -> None:
    roots = {h: tmp_path / f"disk-{h}" for h in "abc"}
    keeper, owner = keeper_on(tmp_path, roots, lost=set(), spares=("c",))
    new = write_checkpoint(roots["a"] / "ckpt", 40)
    keeper.book.add(new)
    keeper.copier.copy_one(new)
    assert (roots["c"] / "ckpt" / "ckpt-40.index").read_text() == "ckpt-40.index of step 40"
    assert (roots["c"] / "ckpt" / "checkpoint").read_text() == state_text(new)
    assert not list((roots["c"] / "ckpt").glob(".distlaunch-in.*"))
    launcher_copy = tmp_path / "run" / "checkpoints" / "worker-0" / "40"
    assert [e.copies for e in owner.restated] == [[f"launcher:{launcher_copy}", f"c:{roots['c']}/ckpt"]]
    assert not (roots["b"] / "ckpt").exists()  # b runs a task: it gets a checkpoint only before a start


def test_a_push_leaves_another_push_under_way_alone(tmp_path: Path) -> None:
    """Two pushes into one directory (the copier and a restart's placement): neither removes the
    other's temp dir; only one a cut push left long ago is cleared."""
    host = LocalHost(HostConfig(name="b", address="localhost", transport="local"))
    target = tmp_path / "b" / "ckpt"
    target.mkdir(parents=True)
    busy, stale = target / ".distlaunch-in.busy", target / ".distlaunch-in.stale"
    busy.mkdir()
    stale.mkdir()
    os.utime(stale, (time.time() - 3600, time.time() - 3600))
    source = write_checkpoint(tmp_path / "a" / "ckpt", 40)
    done = host.run(push_command(str(target), source.files, state_text(source)),
                    stdin=tar_files(tmp_path / "a" / "ckpt", source.files))
    assert done.ok, done.stderr
    assert busy.is_dir() and not stale.exists()


def test_many_copies_kept_are_still_bounded(tmp_path: Path) -> None:
    """checkpoint_copies_kept past the records a book keeps by default: every copy's record stays,
    so the oldest copy is still removed."""
    roots = {h: tmp_path / f"disk-{h}" for h in "ab"}
    keeper, _ = keeper_on(tmp_path, roots, lost=set(), spares=(), kept=5)
    for step in range(10, 80, 10):
        c = write_checkpoint(roots["a"] / "ckpt", step)
        keeper.book.add(c)
        keeper.copier.copy_one(c)
    copies = sorted(int(p.name) for p in (tmp_path / "run" / "checkpoints" / "worker-0").iterdir())
    assert copies == [30, 40, 50, 60, 70]


def test_a_spares_older_files_of_the_same_names_are_never_taken_for_the_newest(tmp_path: Path) -> None:
    """Keras' backups write the same file names each time: the spare holds step 20's files under
    the names step 40 has, since step 40 was not pushed there. A task moved to the spare must get
    step 40 (pushed before it starts), not resume silently from step 20's weights."""
    roots = {h: tmp_path / f"disk-{h}" for h in "abc"}
    keeper, owner = keeper_on(tmp_path, roots, lost=set(), spares=("c",))
    same = ["backup.index", "backup.data-00000-of-00001", "checkpoint"]

    def backup(step: int) -> Checkpoint:
        directory = roots["a"] / "ckpt"
        directory.mkdir(parents=True, exist_ok=True)
        for name in same:
            (directory / name).write_text(f"{name} of step {step}")
        return Checkpoint("worker:0", "a", str(directory), list(same), step, ts=float(step))

    old = backup(20)
    keeper.book.add(old)
    keeper.copier.copy_one(old)  # on the spare: step 20's files
    new = backup(40)
    keeper.book.add(new)  # its push to the spare did not happen (the copier paced it, a link dropped)
    keeper.before_start([member("worker:0", "c")])
    assert (roots["c"] / "ckpt" / "backup.index").read_text() == "backup.index of step 40"
    assert owner.said and "from step 40" in owner.said[-1], owner.said


def test_a_source_host_cut_during_the_copy_leaves_the_copier_alive(tmp_path: Path,
                                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    """The host is cut right after its checkpoint reached the launcher: asking whether the spare
    shares its disk fails. The launcher's copy stands, the spare is asked again next time, and the
    copy thread never dies of it (it did: no copy at all for the rest of the job)."""
    roots = {h: tmp_path / f"disk-{h}" for h in "abc"}
    keeper, owner = keeper_on(tmp_path, roots, lost=set(), spares=("c",))

    def cut(*_: object) -> bool:
        raise HostError("host a (10.0.0.1:22): connection lost (Timeout opening channel.)")

    new = write_checkpoint(roots["a"] / "ckpt", 40)
    keeper.book.add(new)
    assert not keeper.is_shared(new)  # judged once, before the cut: the disks are each host's own
    monkeypatch.setattr(keeper, "sees", cut)
    keeper.copier.copy_one(new)
    assert (tmp_path / "run" / "checkpoints" / "worker-0" / "40" / "ckpt-40.index").is_file()
    assert not (roots["c"] / "ckpt").exists()
    monkeypatch.setattr(keeper.copier, "copy_one", cut)
    keeper.copier._copy_guarded(new)  # whatever a copy meets, the thread goes on
    assert any("not copied on" in line for line in owner.notices), owner.notices


def test_copies_kept_bounds_the_launchers_and_the_spares_copies(tmp_path: Path) -> None:
    roots = {h: tmp_path / f"disk-{h}" for h in "abc"}
    keeper, _ = keeper_on(tmp_path, roots, lost=set(), spares=("c",), kept=1)
    for step in (20, 40):
        c = write_checkpoint(roots["a"] / "ckpt", step)
        keeper.book.add(c)
        keeper.copier.copy_one(c)
    assert [p.name for p in (tmp_path / "run" / "checkpoints" / "worker-0").iterdir()] == ["40"]
    assert sorted(p.name for p in (roots["c"] / "ckpt").iterdir()) == [
        "checkpoint", "ckpt-40.data-00000-of-00001", "ckpt-40.index"]


@pytest.mark.skipif(os.geteuid() != 0 or shutil.which("mount") is None, reason="a tmpfs mount needs root")
def test_a_full_disk_on_the_spare_drops_that_copy_in_one_line_and_leaves_no_half_checkpoint(tmp_path: Path) -> None:
    """The spare's disk is a 64 KiB tmpfs; the checkpoint is 256 KiB: the push fails, one line
    says so, the spare keeps no part of it, and the launcher's copy (and the job) go on."""
    roots = {h: tmp_path / f"disk-{h}" for h in "abc"}
    roots["c"].mkdir()
    if subprocess.run(["mount", "-t", "tmpfs", "-o", "size=64k", "tmpfs", str(roots["c"])]).returncode != 0:
        pytest.skip("no tmpfs mount here")
    try:
        keeper, owner = keeper_on(tmp_path, roots, lost=set(), spares=("c",))
        big = write_checkpoint(roots["a"] / "ckpt", 40)
        (roots["a"] / "ckpt" / big.files[1]).write_bytes(os.urandom(256 * 1024))
        keeper.book.add(big)
        keeper.copier.copy_one(big)
        assert [n for n in owner.notices if "spare c" in n] == [
            n for n in owner.notices if n.startswith("checkpoint step 40 of worker:0 not copied to spare c: ")]
        assert len([n for n in owner.notices if "spare c" in n]) == 1
        assert "the job goes on" in owner.notices[-1]
        left = list((roots["c"] / "ckpt").iterdir()) if (roots["c"] / "ckpt").exists() else []
        assert left == [], left
        assert big.copy is not None and (Path(big.copy) / big.files[1]).stat().st_size == 256 * 1024
        assert [e.copies for e in owner.restated] == [[f"launcher:{big.copy}"]]
    finally:
        subprocess.run(["umount", str(roots["c"])])


@pytest.mark.skipif(os.geteuid() != 0 or shutil.which("mount") is None, reason="a tmpfs mount needs root")
def test_a_full_disk_on_the_launchers_side_drops_the_copy_in_one_line_and_leaves_nothing(tmp_path: Path) -> None:
    roots = {h: tmp_path / f"disk-{h}" for h in "ab"}
    run = tmp_path / "run"
    run.mkdir()
    if subprocess.run(["mount", "-t", "tmpfs", "-o", "size=64k", "tmpfs", str(run)]).returncode != 0:
        pytest.skip("no tmpfs mount here")
    try:
        keeper, owner = keeper_on(tmp_path, roots, lost=set())
        big = write_checkpoint(roots["a"] / "ckpt", 40)
        (roots["a"] / "ckpt" / big.files[1]).write_bytes(os.urandom(256 * 1024))
        keeper.book.add(big)
        keeper.copier.copy_one(big)  # returns: the job goes on
        assert [n for n in owner.notices if "not copied" in n] == [
            n for n in owner.notices if n.startswith("checkpoint step 40 of worker:0 not copied off host a: ")]
        assert len([n for n in owner.notices if "not copied" in n]) == 1
        assert big.copy is None and owner.restated == []
        assert [p for p in run.rglob("*") if p.is_file()] == []  # no half copy, no temp dir's files
    finally:
        subprocess.run(["umount", str(run)])


def test_the_copier_rests_so_copies_take_a_twentieth_of_the_time(tmp_path: Path) -> None:
    """However often checkpoints come, copying (pull and pushes) takes at most COPY_TIME_SHARE of
    the time: a copy of t seconds is followed by a rest of 19 t (the cost on the training hosts)."""
    assert COPY_TIME_SHARE == 0.05 == Profile.__dataclass_fields__["checkpoint_copy_percent"].default / 100
    assert Pacer(0, lambda _: None).rest_after(0.5) == pytest.approx(9.5)
    roots = {h: tmp_path / f"disk-{h}" for h in "abc"}
    keeper, owner = keeper_on(tmp_path, roots, lost=set(), spares=("c",))
    cp = write_checkpoint(roots["a"] / "ckpt", 40)
    keeper.book.add(cp)
    keeper.copier.copy_one(cp)
    assert cp.copy_seconds is not None and len(owner.rested) == 1
    # the pull's seconds and the push's to spare c: more than the pull's alone
    assert owner.rested[0] > 19 * cp.copy_seconds
    fresh = Owner(tmp_path, roots, set())
    fresh.plan.profile.checkpoint_copy_percent = 100  # the profile's word: no rest, the freshest copies
    assert CheckpointKeeper(fresh).copier.pacer.rest_after(1.0) == 0.0  # type: ignore[arg-type]


def test_the_pacer_keeps_the_average_rate_under_the_cap() -> None:
    slept: list[float] = []
    pacer = Pacer(1000, slept.append)
    assert pacer.pause_after(5000, 1.0) == 4.0  # 5000 bytes at 1000/s take 5 s: 4 more
    assert pacer.pause_after(500, 1.0) == 0.0  # already slower than the cap
    assert Pacer(0, slept.append).pause_after(10**9, 0.1) == 0.0  # 0: no limit
    assert slept == [4.0]


def test_one_save_told_twice_is_one_record_completed_in_place() -> None:
    """autolog's line for a save (no step known) and the script's own: one record, the step given,
    the object a copy thread may hold kept; a backup that rewrites its files each epoch is a new save."""
    book = CheckpointBook()
    first = Checkpoint("worker:0", "a", "/d/a/ckpt", list(FILES), None, ts=100.0)
    assert book.add(first) is first
    assert book.add(Checkpoint("worker:0", "a", "/d/a/ckpt", list(reversed(FILES)), 40, ts=100.2)) is None
    assert book.history("worker:0") == [first] and first.step == 40
    later = Checkpoint("worker:0", "a", "/d/a/ckpt", list(FILES), None, ts=100.0 + ONE_SAVE_SECONDS + 1)
    assert book.add(later) is later  # the same files rewritten later: another save
    # autolog's line read the step too, and did not list the state file: still one save
    told = Checkpoint("worker:2", "a", "/d/c", FILES[:2], 60, ts=7.0)
    assert book.add(told) is told and book.add(Checkpoint("worker:2", "a", "/d/c", list(FILES), 60, ts=7.1)) is None
    assert sorted(told.files) == sorted(FILES)
    # two unnumbered saves of fixed names close together are two saves, each to be copied
    fixed = ["w.weights.h5"]
    assert book.add(Checkpoint("worker:3", "a", "/d/w", fixed, ts=1.0)) is not None
    assert book.add(Checkpoint("worker:3", "a", "/d/w", fixed, ts=2.0)) is not None
    backup = ["latest.weights.h5", "training_metadata.json"]
    assert book.add(Checkpoint("worker:1", "a", "/d/b", backup, 4, epoch=1, ts=5.0)) is not None
    assert book.add(Checkpoint("worker:1", "a", "/d/b", backup, 8, epoch=2, ts=6.0)) is not None
    assert [c.epoch for c in book.history("worker:1")] == [2, 1]


def test_a_copy_a_restart_reads_from_is_not_pruned_under_it(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A newer checkpoint copied while a restart puts step 20's copy in place: the copier prunes
    step 20's copy later, never in the middle of the push."""
    roots = {h: tmp_path / f"disk-{h}" for h in "abc"}
    keeper, owner = keeper_on(tmp_path, roots, lost={"a"}, kept=1)
    old = write_checkpoint(roots["a"] / "ckpt", 20)
    old.copy = str(tmp_path / "copy-20")
    extract_complete(tar_files(roots["a"] / "ckpt", old.files), old.files, Path(old.copy))
    keeper.book.add(old)
    push = keeper.push
    newer = cp(step=60, host="b", directory=str(roots["b"] / "other"))

    def push_while_a_newer_copy_lands(c: Checkpoint, host: str, directory: str, from_host: bool) -> None:
        with keeper.lock:
            keeper.book.add(newer)
            newer.copy = str(tmp_path / "copy-60")
            for older in keeper.book.history("worker:0")[1:]:  # the copier's prune, as it runs
                if older.copy is not None and older.copy not in keeper.pinned:
                    shutil.rmtree(older.copy)
                    older.copy = None
        push(c, host, directory, from_host)

    monkeypatch.setattr(keeper, "_ways", lambda c, members, newest: {"worker:0": "copy"} if c is old else None)
    monkeypatch.setattr(keeper, "push", push_while_a_newer_copy_lands)
    keeper.before_start([member("worker:0", "c")])
    assert (roots["c"] / "ckpt" / "ckpt-20.index").read_text() == "ckpt-20.index of step 20"
    assert keeper.pinned == set() and "from step 20" in owner.said[-1]


def test_a_tar_that_failed_on_the_host_is_no_copy(tmp_path: Path) -> None:
    """sh has no pipefail: a file gone (or rewritten) as tar read it must not pass for a copy."""
    roots = {h: tmp_path / f"disk-{h}" for h in "ab"}
    keeper, _ = keeper_on(tmp_path, roots, lost=set())
    c = write_checkpoint(roots["a"] / "ckpt", 40)
    (roots["a"] / "ckpt" / "ckpt-40.index").unlink()
    with pytest.raises(OSError, match=r"tar on host a failed: .*ckpt-40\.index"):
        keeper.pull(c)


def test_a_drained_hosts_last_save_skips_the_copiers_rest_and_the_restart_waits_for_its_copy(tmp_path: Path) -> None:
    """A drain stops the tasks of a host that leaves the job: their last save (the step they stopped
    at) is there only until it is copied off. It must not wait for the copier's rest after an
    earlier copy, and the restart must wait for it rather than go back to an older checkpoint."""
    roots = {h: tmp_path / f"disk-{h}" for h in "abc"}
    owner = Owner(tmp_path, roots, lost=set())
    keeper = CheckpointKeeper(owner)  # type: ignore[arg-type]
    keeper.copier.pacer.share = 0.0001  # after a copy, the copier rests as long as it may (REST_MAX_SECONDS)
    owner.sessions["d"] = owner.sessions["c"]  # two hosts or more: copies off a host are worth having
    first = write_checkpoint(roots["a"] / "ckpt", 20)
    keeper.book.add(first)
    keeper._offer(first)
    deadline = time.monotonic() + 30
    while first.copy is None and time.monotonic() < deadline:
        time.sleep(0.02)
    assert first.copy is not None  # copied; the copier rests now
    owner.lost.add("a")  # drained: out of the job, its disk read from the copies only
    last = write_checkpoint(roots["a"] / "ckpt", 40)
    keeper.book.add(last)
    keeper._offer(last)
    began = time.monotonic()
    keeper.before_start([member("worker:0", "c"), member("worker:1", "b")])
    assert time.monotonic() - began < 20  # not the rest's 60 s
    assert last.copy is not None
    for host in "bc":
        assert (roots[host] / "ckpt" / "checkpoint").read_text() == state_text(last)
    assert owner.said[-1].startswith("resuming worker:0, worker:1 from step 40 "), owner.said
    keeper.close()
