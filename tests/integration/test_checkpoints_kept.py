"""Checkpoints the launcher keeps, with real TensorFlow on two hosts that each have their own disk.

Hosts ``a`` and ``b`` are this machine, told apart by ``CKPT_ROOT`` (each host's own checkpoint
directory): what matters is that a checkpoint written on a is not where b's tasks read. The job
(tests/integration/ckpt_mwms_steps.py) is MultiWorkerMirrored: worker:0 keeps checkpoints,
worker:1 keeps none, and a group that restores different steps exits 3 at once.
"""

from __future__ import annotations

import dataclasses
import json
import os
import re
import shutil
import signal
import sys
from pathlib import Path
from typing import Any

import pytest

from tests.integration.jobtools import (
    REPO,
    cli,
    finish_up,
    kill_run_processes,
    launch_up,
    pids_with_run_id,
    read_events,
    start_cli,
    wait_for,
    wait_for_event,
)
from tests.profiles import Host, build_profile

pytestmark = pytest.mark.slow

STEPS = 60


def two_host_profile(tmp: Path, max_restarts: int = 2, steps: int = STEPS) -> tuple[Path, Path, Path]:
    roots = tmp / "disk-a", tmp / "disk-b"
    hosts = [Host(name, options={"env": {"CKPT_ROOT": str(root)}}) for name, root in zip("ab", roots, strict=True)]
    profile = build_profile(
        tmp / "ckpt.toml", name="it-ckpt", strategy="multi_worker_mirrored", orphan_grace=30,
        top="checkpoint_copy_percent = 100\n",  # every save copied at once: these tests wait for given steps
        command=f"{sys.executable} -u tests/integration/ckpt_mwms_steps.py", workdir=REPO,
        env={"STEPS": str(steps), "CKPT_EVERY": "20", "STEP_SECONDS": "0.15", "TF_CPP_MIN_LOG_LEVEL": "2"},
        restart="on-failure", max_restarts=max_restarts, grace=2, hosts=hosts,
        roles={"worker": {"count": 2, "hosts": ["a", "b"]}})
    return profile, roots[0], roots[1]


def own_disks(lab: Any, tmp: Path) -> tuple[dict[str, Path], list[Any]]:
    """Each netns host with a checkpoint folder of its own (its ``CKPT_ROOT``), as separate SSH
    boxes have: the folders, and the hosts for a profile."""
    from tests.profiles import netns_hosts

    disks = {name: tmp / f"disk-{name}" for name in lab.hosts}
    hosts = [dataclasses.replace(h, options={**h.options, "env": {"CKPT_ROOT": str(disks[h.name])}})
             for h in netns_hosts(lab, "ssh")]
    return disks, hosts


def spare_profile(tmp: Path, hosts: list[Any], name: str, ckpt_every: int) -> Path:
    """The MWMS steps job on netns hosts a and b (worker:0 saves every ``ckpt_every`` steps), spare
    c, a host lost after 8 s."""
    return build_profile(
        tmp / f"{name}.toml", name=name, strategy="multi_worker_mirrored", orphan_grace=4,
        top='host_lost_seconds = 8\nspares = ["c"]\n',
        command="{python} -u tests/integration/ckpt_mwms_steps.py", defaults={"python": sys.executable},
        workdir=REPO, env={"STEPS": str(STEPS), "CKPT_EVERY": str(ckpt_every), "STEP_SECONDS": "0.3",
                           "TF_CPP_MIN_LOG_LEVEL": "2"},
        restart="on-failure", max_restarts=2, grace=2, hosts=hosts,
        roles={"worker": {"count": 2, "hosts": ["a", "b"]}})


def lines_of(events: list[dict[str, Any]], task: str, pattern: str) -> list[int]:
    return [int(m.group(1)) for e in events if e["kind"] == "log" and e["task"] == task
            for m in [re.search(pattern, e["line"])] if m]


def running_pid(run_dir: Path, task: str, restarts: int = 0) -> int:
    event = wait_for_event(run_dir, lambda e: e["kind"] == "state" and e["task"] == task and e["state"] == "running"
                           and e.get("restarts", 0) == restarts, 90, f"{task} running")
    return int(event["pid"])


def checkpoint_event(run_dir: Path) -> dict[str, Any]:
    return wait_for_event(run_dir, lambda e: e["kind"] == "checkpoint" and e["task"] == "worker:0", 120,
                          "worker:0's first checkpoint")


def assert_resumed_together(run_dir: Path, events: list[dict[str, Any]], steps: int = STEPS) -> int:
    """Both workers restored the same step after the restart (> 0), and trained to the end."""
    restored = {t: lines_of(events, t, r"restored step (\d+)") for t in ("worker:0", "worker:1")}
    assert all(len(r) == 2 for r in restored.values()), restored
    assert restored["worker:0"][1] == restored["worker:1"][1] > 0, restored
    assert not any("restored different steps" in e.get("line", "") for e in events if e["kind"] == "log")
    assert lines_of(events, "worker:0", r"finished at step (\d+)")[-1] == steps
    assert [e for e in events if e["kind"] == "job"][-1]["state"] == "Succeeded"
    said = [e["line"].removeprefix("distlaunch: ") for e in events
                if e["kind"] == "log" and e["line"].startswith("distlaunch: resuming")]
    assert said and f"step {restored['worker:0'][1]}" in said[-1], said
    return restored["worker:0"][1]


def test_check_says_whether_the_hosts_share_the_outputs_dir(tmp_path: Path) -> None:
    profile, _disk_a, _disk_b = two_host_profile(tmp_path)
    result = cli("check", str(profile), timeout=120)
    assert result.returncode == 0, result.stdout[-2000:] + result.stderr[-2000:]
    # both hosts are this machine, and the outputs dir is named alike: one folder
    assert "preflight: outputs is shared by every host: checkpoints there are read by whoever restarts" \
        in result.stdout


def test_a_killed_worker_and_its_group_resume_from_worker0s_checkpoint(tmp_path: Path) -> None:
    profile, _disk_a, disk_b = two_host_profile(tmp_path)
    run_id = "it-ckpt-kill"
    proc, run_dir = launch_up(tmp_path, profile, run_id)
    try:
        running_pid(run_dir, "worker:0")
        pid1 = running_pid(run_dir, "worker:1")
        checkpoint_event(run_dir)
        os.kill(pid1, signal.SIGKILL)
        assert finish_up(proc, tmp_path, 240) == 0, (tmp_path / "up.log").read_text()[-3000:]
        events = read_events(run_dir)
        step = assert_resumed_together(run_dir, events)
        # worker:1's host got worker:0's checkpoint, in the layout CheckpointManager reads
        assert (disk_b / "ckpt" / "checkpoint").is_file() and (disk_b / "ckpt" / f"ckpt-{step}.index").is_file()
        assert not list((disk_b / "ckpt").glob(".distlaunch-in.*"))
        assert "ckpt on a are per host (not seen from b)" in (tmp_path / "up.log").read_text()
        assert pids_with_run_id(run_id) == []
    finally:
        kill_run_processes(run_id)


def test_a_checkpoint_whose_disk_is_gone_comes_back_from_the_launchers_copy(tmp_path: Path) -> None:
    profile, disk_a, _disk_b = two_host_profile(tmp_path)
    run_id = "it-ckpt-copy"
    proc, run_dir = launch_up(tmp_path, profile, run_id)
    try:
        pid0 = running_pid(run_dir, "worker:0")
        checkpoint_event(run_dir)

        def copied() -> list[dict[str, Any]]:
            state = json.loads((run_dir / "state.json").read_text())
            return [c for c in state.get("checkpoints", {}).get("worker:0", []) if c.get("copy")]

        copies = wait_for(copied, 60, "a copy of worker:0's checkpoint off host a")
        shutil.rmtree(disk_a / "ckpt")  # host a's disk lost what it had
        os.kill(pid0, signal.SIGKILL)
        assert finish_up(proc, tmp_path, 240) == 0, (tmp_path / "up.log").read_text()[-3000:]
        events = read_events(run_dir)
        step = assert_resumed_together(run_dir, events)
        state = json.loads((run_dir / "state.json").read_text())
        copied_steps = {c["step"] for c in state["checkpoints"]["worker:0"] if c.get("copy")}
        assert step in copied_steps | {c["step"] for c in copies}
        kept = run_dir / "checkpoints" / "worker-0"
        assert 1 <= len([p for p in kept.iterdir() if not p.name.startswith(".")]) <= 2
        assert pids_with_run_id(run_id) == []
    finally:
        kill_run_processes(run_id)


def test_a_supervisor_that_takes_the_run_over_knows_its_checkpoints(tmp_path: Path) -> None:
    """The record is in state.json: after `attach` adopted the run, a killed worker's group still
    resumes from worker:0's checkpoint (the new supervisor never saw its event)."""
    profile, _disk_a, _disk_b = two_host_profile(tmp_path, steps=140)
    run_id, run_dir = "it-ckpt-attach", tmp_path / "run"
    attach = None
    try:
        up = cli("up", str(profile), "--detach", "--run-dir", str(run_dir), "--run-id", run_id, timeout=120)
        assert up.returncode == 0, up.stdout + up.stderr
        checkpoint_event(run_dir)
        state = json.loads((run_dir / "state.json").read_text())
        assert state["checkpoints"]["worker:0"], state.get("checkpoints")
        os.kill(state["supervisor_pid"], signal.SIGKILL)
        attach = start_cli("attach", str(run_dir), "--no-tui", log=tmp_path / "attach.log")
        wait_for(lambda: json.loads((run_dir / "state.json").read_text()).get("supervisor_pid")
                 not in (None, state["supervisor_pid"]), 60, "a new supervisor")
        os.kill(running_pid(run_dir, "worker:1"), signal.SIGKILL)
        assert attach.wait(timeout=240) == 0, (tmp_path / "attach.log").read_text()[-3000:]
        assert_resumed_together(run_dir, read_events(run_dir), steps=140)
    finally:
        if attach is not None and attach.poll() is None:
            attach.kill()
        kill_run_processes(run_id)


def test_when_no_checkpoint_survives_every_worker_starts_from_scratch_together(tmp_path: Path) -> None:
    """worker:1's host holds step 20 (put there at a first restart); then every copy of worker:0's
    checkpoints is gone and worker:0 is killed: b's older checkpoint is parked, both start at 0."""
    profile, disk_a, disk_b = two_host_profile(tmp_path, max_restarts=4)
    run_id = "it-ckpt-none"
    proc, run_dir = launch_up(tmp_path, profile, run_id)
    try:
        running_pid(run_dir, "worker:0")
        os.kill(running_pid(run_dir, "worker:1"), signal.SIGKILL)  # before any checkpoint: nothing to align
        pid0 = running_pid(run_dir, "worker:0", restarts=1)
        wait_for_event(run_dir, lambda e: e["kind"] == "checkpoint" and e["step"] == 40, 120, "step 40 saved")

        def copied_40() -> bool:
            state = json.loads((run_dir / "state.json").read_text())
            return any(c.get("copy") and c["step"] == 40 for c in state.get("checkpoints", {}).get("worker:0", []))

        wait_for(copied_40, 60, "step 40 copied off host a")
        os.kill(running_pid(run_dir, "worker:1", restarts=1), signal.SIGKILL)
        # b now holds step 40, which worker:1 would resume from alone
        wait_for(lambda: (disk_b / "ckpt" / "ckpt-40.index").is_file(), 60, "step 40 put on b")
        running_pid(run_dir, "worker:1", restarts=2)
        pid0 = running_pid(run_dir, "worker:0", restarts=2)
        shutil.rmtree(disk_a / "ckpt")
        shutil.rmtree(run_dir / "checkpoints")
        os.kill(pid0, signal.SIGKILL)
        assert finish_up(proc, tmp_path, 240) == 0, (tmp_path / "up.log").read_text()[-3000:]
        events = read_events(run_dir)
        restored = {t: lines_of(events, t, r"restored step (\d+)") for t in ("worker:0", "worker:1")}
        assert restored["worker:0"][-1] == restored["worker:1"][-1] == 0, restored
        said = [e["line"].removeprefix("distlaunch: ") for e in events
                if e["kind"] == "log" and e["line"].startswith("distlaunch: resuming")]
        assert said[-1].startswith("resuming from step 0: no checkpoint of worker:0 survived host a"), said
        assert lines_of(events, "worker:0", r"finished at step (\d+)")[-1] == STEPS
        assert [e for e in events if e["kind"] == "job"][-1]["state"] == "Succeeded"
        assert list((disk_b / "ckpt").glob("checkpoint.distlaunch-parked-*"))
    finally:
        kill_run_processes(run_id)


@pytest.mark.netns
@pytest.mark.sshd
@pytest.mark.timeout(360)
def test_the_source_host_lost_its_task_moves_to_the_spare_and_all_resume_from_the_copy(tmp_path: Path) -> None:
    """worker:0's host a is cut for good after its checkpoint was copied off it: worker:0 moves to
    the spare c, whose disk has nothing; c and b both get the launcher's copy and resume from it."""
    from tests.netns import NetnsLab, require_netns

    require_netns()
    with NetnsLab(3) as lab:
        run_id = f"it-ckpt-spare-{lab.tag}"
        disks, hosts = own_disks(lab, tmp_path)
        profile = spare_profile(tmp_path, hosts, "it-ckpt-spare", ckpt_every=20)
        proc, run_dir = launch_up(tmp_path, profile, run_id)
        try:
            checkpoint_event(run_dir)

            def copied() -> list[dict[str, Any]]:
                state = json.loads((run_dir / "state.json").read_text())
                return [c for c in state.get("checkpoints", {}).get("worker:0", []) if c.get("copy")]

            wait_for(copied, 60, "a copy of worker:0's checkpoint off host a")
            lab.cut("a")
            assert finish_up(proc, tmp_path, 300) == 0, (tmp_path / "up.log").read_text()[-4000:]
            events = read_events(run_dir)
            moved = [e for e in events if e["kind"] == "state" and e["task"] == "worker:0"
                     and e["state"] == "running" and e.get("moved_from") == "a"]
            assert moved and moved[0]["host"] == "c"
            step = assert_resumed_together(run_dir, events)
            assert (disks["c"] / "ckpt" / f"ckpt-{step}.index").is_file()
            # a checkpoint written as the link went may not get off the host (said in one line),
            # never the one the group resumed from
            failed = [int(n) for n in re.findall(r"checkpoint step (\d+) of worker:0 not copied off",
                                                 (tmp_path / "up.log").read_text())]
            assert all(n > step for n in failed), (step, failed)
            assert pids_with_run_id(run_id) == []
        finally:
            kill_run_processes(run_id)


@pytest.mark.netns
@pytest.mark.sshd
@pytest.mark.timeout(360)
def test_the_source_host_lost_before_any_checkpoint_both_start_from_scratch_together(tmp_path: Path) -> None:
    """worker:0's host a is cut for good before any checkpoint exists (each host its own disk):
    worker:0 moves to the spare c, and the group starts again from step 0, both workers alike,
    and trains to the end."""
    from tests.netns import NetnsLab, require_netns

    require_netns()
    with NetnsLab(3) as lab:
        run_id = f"it-ckpt-none-lost-{lab.tag}"
        _, hosts = own_disks(lab, tmp_path)
        profile = spare_profile(tmp_path, hosts, "it-ckpt-none-lost", ckpt_every=1000)
        proc, run_dir = launch_up(tmp_path, profile, run_id)
        try:
            wait_for(lambda: all(lines_of(read_events(run_dir), t, r"restored step (\d+)") == [0]
                                 for t in ("worker:0", "worker:1")), 120, "both workers training from step 0")
            lab.cut("a")
            assert finish_up(proc, tmp_path, 300) == 0, (tmp_path / "up.log").read_text()[-4000:]
            events = read_events(run_dir)
            moved = [e for e in events if e["kind"] == "state" and e["task"] == "worker:0"
                     and e["state"] == "running" and e.get("moved_from") == "a"]
            assert moved and moved[0]["host"] == "c"
            restored = {t: lines_of(events, t, r"restored step (\d+)") for t in ("worker:0", "worker:1")}
            assert restored == {"worker:0": [0, 0], "worker:1": [0, 0]}, restored
            assert not [e for e in events if e["kind"] == "checkpoint"]
            assert lines_of(events, "worker:0", r"finished at step (\d+)")[-1] == STEPS
            assert [e for e in events if e["kind"] == "job"][-1]["state"] == "Succeeded"
            assert pids_with_run_id(run_id) == []
        finally:
            kill_run_processes(run_id)


PS_STEPS = 300


@pytest.mark.netns
@pytest.mark.sshd
@pytest.mark.timeout(420)
def test_pss_chief_and_ps_host_lost_the_moved_chief_resumes_from_the_copy(tmp_path: Path) -> None:
    """ParameterServer, each host its own checkpoint dir (``$CKPT_ROOT/ckpt``): chief:0 and ps:0 on
    a, worker:0 on b, spare c. a is cut for good after a checkpoint of chief:0 was copied off it:
    chief and ps move to c, where nothing was; the chief restores the launcher's copy (not step 0)
    and the job trains to the full step count."""
    from tests.netns import NetnsLab, require_netns

    require_netns()
    with NetnsLab(3) as lab:
        run_id = f"it-ckpt-pss-{lab.tag}"
        disks, hosts = own_disks(lab, tmp_path)
        profile = build_profile(
            tmp_path / "pss.toml", name="it-ckpt-pss", strategy="parameter_server", orphan_grace=4,
            top='host_lost_seconds = 8\nspares = ["c"]\n',
            command=f"{{python}} -u examples/ps_mnist.py --steps {PS_STEPS} --log-every 20 "
                    "--checkpoint-dir $CKPT_ROOT/ckpt --checkpoint-every 40",
            defaults={"python": sys.executable}, workdir=REPO, env={"TF_CPP_MIN_LOG_LEVEL": "2"},
            grace=5, hosts=hosts,
            roles={"chief": {"hosts": ["a"]}, "ps": {"hosts": ["a"]}, "worker": {"hosts": ["b"]}})
        proc, run_dir = launch_up(tmp_path, profile, run_id)
        try:
            def copied() -> list[dict[str, Any]]:
                state = json.loads((run_dir / "state.json").read_text())
                return [c for c in state.get("checkpoints", {}).get("chief:0", []) if c.get("copy")]

            wait_for_event(run_dir, lambda e: e["kind"] == "checkpoint" and e["task"] == "chief:0", 240,
                           "chief:0's first checkpoint")
            before = wait_for(copied, 60, "a copy of chief:0's checkpoint off host a")
            lab.cut("a")
            assert finish_up(proc, tmp_path, 300) == 0, (tmp_path / "up.log").read_text()[-4000:]
            events = read_events(run_dir)
            ran = {t: [e["host"] for e in events if e["kind"] == "state" and e["task"] == t
                       and e["state"] == "running"] for t in ("chief:0", "ps:0")}
            assert ran["chief:0"][-1] == ran["ps:0"][-1] == "c", ran
            restored = [int(e["values"]["restored_step"]) for e in events if e["kind"] == "metric"
                        and e["task"] == "chief:0" and "restored_step" in (e.get("values") or {})]
            assert restored and restored[-1] >= before[0]["step"] > 0, (restored, before)  # the copy, not 0
            steps = [e["step"] for e in events if e["kind"] == "metric" and e["task"] == "chief:0"
                     and e.get("step") is not None]
            assert max(steps) == PS_STEPS
            assert [e for e in events if e["kind"] == "job"][-1]["state"] == "Succeeded"
            said = [e["line"].removeprefix("distlaunch: ") for e in events
                if e["kind"] == "log" and e["line"].startswith("distlaunch: resuming")]
            # on c already when the copier pushed it there before the cut (issue 54 §4), else put there
            line = f"resuming chief:0 from step {restored[-1]} (checkpoint of chief:0"
            assert said and said[-1] in (f"{line})", f"{line}, put in place for chief:0 on c)"), said
            # where the copies are reached the events: the launcher's copy, and the one on the spare c
            copies = [c for e in events if e["kind"] == "checkpoint" and e["task"] == "chief:0"
                      for c in e.get("copies") or []]
            assert any(c.startswith(f"launcher:{run_dir}/checkpoints/chief-0/") for c in copies), copies
            assert f"c:{disks['c']}/ckpt" in copies, copies
            assert pids_with_run_id(run_id) == []
        finally:
            kill_run_processes(run_id)


@pytest.mark.timeout(300)
def test_a_drained_keras_job_checkpoints_before_it_stops_and_redoes_no_step(tmp_path: Path) -> None:
    """Issue 54 §5: a single-worker tf_keras fit (BackupAndRestore saving every 7 batches) on host
    a, each host its own disk, spare b; `drain a` mid-fit: the task saves at its next batch end
    (autolog on SIGTERM), the keeper puts that save on b, and the moved task goes on from the next
    step: steps redone, counted from the events' `trained step` lines, 0."""
    roots = {name: tmp_path / f"disk-{name}" for name in "ab"}
    hosts = [Host(name, options={"env": {"CKPT_ROOT": str(root)}}) for name, root in roots.items()]
    profile = build_profile(
        tmp_path / "drain.toml", name="it-ckpt-drain", strategy="custom", orphan_grace=30,
        top='spares = ["b"]\n', command=f"{sys.executable} -u tests/data/autolog/keras_sigterm.py '$CKPT_ROOT/backup'",
        workdir=REPO, env={"STEP_SECONDS": "0.15", "SAVE_EVERY": "7", "TF_USE_LEGACY_KERAS": "1",
                           "TF_CPP_MIN_LOG_LEVEL": "2"},
        restart="on-failure", max_restarts=2, grace=20, hosts=hosts, roles={"worker": {"count": 1, "hosts": ["a"]}})
    run_id = "it-ckpt-drain"
    proc, run_dir = launch_up(tmp_path, profile, run_id)
    try:
        wait_for_event(run_dir, lambda e: e["kind"] == "log" and e["task"] == "worker:0"
                       and e["line"] == "trained step 10", 120, "worker:0 at step 10")
        drained = cli("drain", run_id, "a", "--reason", "kernel update")
        assert drained.returncode == 0, drained.stdout + drained.stderr
        assert finish_up(proc, tmp_path, 240) == 0, (tmp_path / "up.log").read_text()[-3000:]
        events = read_events(run_dir)
        runs = [i for i, e in enumerate(events) if e["kind"] == "state" and e["task"] == "worker:0"
                and e["state"] == "running"]
        assert len(runs) == 2 and events[runs[1]]["host"] == "b"
        first = lines_of(events[:runs[1]], "worker:0", r"^trained step (\d+)$")
        second = lines_of(events[runs[1]:], "worker:0", r"^trained step (\d+)$")
        redone = first[-1] - (second[0] - 1)
        assert redone == 0, (first[-1], second[:3])
        assert second[-1] == 30 and [e for e in events if e["kind"] == "job"][-1]["state"] == "Succeeded"
        assert "finished at step 30" in [e["line"] for e in events if e["kind"] == "log"]
        ended = [e for e in events[:runs[1]] if e["kind"] == "state" and e["task"] == "worker:0"
                 and e["state"] in ("failed", "stopped", "succeeded")]
        assert ended and ended[-1].get("exit_code") == 143, ended
    finally:
        kill_run_processes(run_id)


def drain_mwms_and_count_redone(tmp: Path, hosts: list[Any], on: list[str], spare: str, run_id: str,
                                python: str = sys.executable) -> list[dict[str, Any]]:
    """A tf_keras MultiWorkerMirrored fit (BackupAndRestore every 7 batches) of two workers on the
    hosts ``on``, drained off ``on[0]`` at step 10 to ``spare``: asserts that every worker saved at
    the drain's one step, exited 143, and went on from the next step (0 redone); the events."""
    profile = build_profile(
        tmp / "drain-mwms.toml", name="it-ckpt-drain-mwms", strategy="multi_worker_mirrored",
        orphan_grace=30, top=f'spares = ["{spare}"]\n', defaults={"python": python},
        command="{python} -u tests/data/autolog/keras_mwms_sigterm.py '$CKPT_ROOT/backup'",
        workdir=REPO, env={"STEP_SECONDS": "0.15", "SAVE_EVERY": "7", "TF_USE_LEGACY_KERAS": "1",
                           "TF_CPP_MIN_LOG_LEVEL": "2"},
        restart="on-failure", max_restarts=2, grace=20, hosts=hosts, roles={"worker": {"count": 2, "hosts": on}})
    proc, run_dir = launch_up(tmp, profile, run_id)
    wait_for_event(run_dir, lambda e: e["kind"] == "log" and e["task"] == "worker:0"
                   and e["line"] == "trained step 10", 150, "worker:0 at step 10")
    drained = cli("drain", run_id, on[0], "--reason", "kernel update")
    assert drained.returncode == 0, drained.stdout + drained.stderr
    assert finish_up(proc, tmp, 240) == 0, (tmp / "up.log").read_text()[-3000:]
    events = read_events(run_dir)
    for task in ("worker:0", "worker:1"):
        runs = [i for i, e in enumerate(events) if e["kind"] == "state" and e["task"] == task
                and e["state"] == "running"]
        assert len(runs) == 2, (task, runs)
        first = lines_of(events[:runs[1]], task, r"^trained step (\d+)$")
        second = lines_of(events[runs[1]:], task, r"^trained step (\d+)$")
        assert first[-1] - (second[0] - 1) == 0, (task, first[-3:], second[:3])
        assert second[-1] == 30
        ended = [e for e in events[:runs[1]] if e["kind"] == "state" and e["task"] == task
                 and e["state"] in ("failed", "stopped", "succeeded")]
        assert ended and ended[-1].get("exit_code") == 143, ended
    moved = [e for e in events if e["kind"] == "state" and e["task"] == "worker:0" and e["state"] == "running"]
    assert moved[-1]["host"] == spare
    second_run = max(i for i, e in enumerate(events) if e["kind"] == "state" and e["task"] == "worker:0"
                     and e["state"] == "running")
    saved = [e["step"] for e in events[:second_run] if e["kind"] == "checkpoint" and e["task"] == "worker:0"
             and not e.get("copies")]
    stopped_at = lines_of(events[:second_run], "worker:0", r"^trained step (\d+)$")[-1]
    assert saved[-1] == stopped_at, (saved, stopped_at)  # saved at the very step it stopped
    placed = [c for e in events if e["kind"] == "checkpoint" and e["task"] == "worker:0"
              and e.get("step") == saved[-1] for c in e.get("copies") or []]
    assert any(c.startswith(f"{spare}:") for c in placed), placed
    assert [e for e in events if e["kind"] == "job"][-1]["state"] == "Succeeded"
    return events


@pytest.mark.timeout(360)
def test_a_drained_mwms_host_with_both_workers_saves_at_one_step_and_redoes_none(tmp_path: Path) -> None:
    """Issue 54 §5 for a MultiWorkerMirrored group: both workers on host a (its own disk), spare b;
    `drain a` sends both SIGTERM at moments of their own. A save is collective, so the workers
    agree on one batch (autolog, through the coordination service), both save it and exit 143; the
    keeper puts worker:0's backup on b, and the group goes on there from the next step."""
    roots = {name: tmp_path / f"disk-{name}" for name in "ab"}
    hosts = [Host(name, options={"env": {"CKPT_ROOT": str(root)}}) for name, root in roots.items()]
    run_id = "it-ckpt-drain-mwms"
    try:
        drain_mwms_and_count_redone(tmp_path, hosts, ["a", "a"], "b", run_id)
    finally:
        kill_run_processes(run_id)


@pytest.mark.netns
@pytest.mark.sshd
@pytest.mark.timeout(420)
def test_a_drained_mwms_worker_host_on_its_own_disk_moves_to_the_spare_redoing_none(tmp_path: Path) -> None:
    """Network-namespace hosts, each with its own disk: worker:0 on a, worker:1 on b, spare c;
    `drain a` sends SIGTERM to worker:0 alone. worker:1 learns the step through the coordination
    service, both save it; worker:0 resumes on c and worker:1 on b from that one save."""
    from tests.netns import NetnsLab, require_netns

    require_netns()
    with NetnsLab(3) as lab:
        run_id = f"it-ckpt-drain-mwms-{lab.tag}"
        _, hosts = own_disks(lab, tmp_path)
        try:
            drain_mwms_and_count_redone(tmp_path, hosts, ["a", "b"], "c", run_id)
            assert pids_with_run_id(run_id) == []
        finally:
            kill_run_processes(run_id)


def copy_under_way(step: int, directory: Path) -> bool:
    """A pull of checkpoint ``step`` out of ``directory`` runs: its tar, working there (the source
    host's, in this machine's process table)."""
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                argv = (entry / "cmdline").read_bytes().split(b"\0")
                cwd = os.readlink(entry / "cwd")
            except OSError:
                continue
            if argv[:3] == [b"tar", b"-cf", b"-"] and f"ckpt-{step}.index".encode() in argv and \
                    Path(cwd) == directory:
                return True
    return False


@pytest.mark.netns
@pytest.mark.sshd
@pytest.mark.timeout(300)
def test_a_copy_cut_by_a_dropped_link_leaves_no_half_and_is_copied_when_the_link_is_back(tmp_path: Path) -> None:
    """Host a's link is slowed to 2 Mbit/s, so worker:0's 3 MiB checkpoint takes ~17 s to copy off
    it, and cut while the copy runs: within seconds (the host's silence, then the SSH keepalive) one
    line says the copy failed, the launcher's run dir holds no part of it, and the job goes on (its
    tasks outlive the cut: orphan_grace). When the link is back, that checkpoint is copied, whole,
    without waiting for the next save (which here waits for the test's word: none would come)."""
    from tests.netns import NetnsLab, require_netns

    require_netns()
    if shutil.which("tc") is None:
        pytest.skip("tc (iproute2) is needed to slow a link")
    with NetnsLab(2) as lab:
        run_id = f"it-ckpt-cut-{lab.tag}"
        disks, hosts = own_disks(lab, tmp_path)
        profile = build_profile(
            tmp_path / "cut.toml", name="it-ckpt-cut", strategy="custom", orphan_grace=60,
            top="host_lost_seconds = 120\n",
            command="{python} -u tests/integration/ckpt_big_saves.py", defaults={"python": sys.executable},
            workdir=REPO, env={"SAVE_BYTES": str(3 << 20)}, restart="never", hosts=hosts,
            roles={"worker": {"count": 2, "hosts": ["a", "b"]}})
        veth = lab.hosts["a"].veth_ns
        slowed = lab.exec("a", "tc", "qdisc", "add", "dev", veth, "root", "tbf", "rate", "2mbit", "burst", "32kb",
                          "latency", "2s")
        if slowed.returncode != 0:
            pytest.skip(f"tc cannot shape a link here: {slowed.stderr.strip()}")
        proc, run_dir = launch_up(tmp_path, profile, run_id)
        log = tmp_path / "up.log"
        try:
            wait_for(lambda: copy_under_way(10, disks["a"] / "ckpt"), 120, "the copy of worker:0's step 10 off host a",
                     interval=0.1)
            lab.cut("a")
            wait_for(lambda: "checkpoint step 10 of worker:0 not copied off host a" in log.read_text(), 45,
                     "the cut copy's line")
            copies = run_dir / "checkpoints" / "worker-0"
            assert not copies.exists() or list(copies.iterdir()) == [], list(copies.iterdir())
            lab.exec("a", "tc", "qdisc", "del", "dev", veth, "root")
            lab.restore("a")

            def copied() -> dict[str, Any] | None:
                state = json.loads((run_dir / "state.json").read_text())
                done = [c for c in state.get("checkpoints", {}).get("worker:0", []) if c.get("copy")]
                return done[-1] if done else None

            record = wait_for(copied, 120, "step 10 copied once the link is back")
            assert record["step"] == 10
            data = Path(record["copy"]) / "ckpt-10.data-00000-of-00001"
            assert data.read_bytes() == (disks["a"] / "ckpt" / "ckpt-10.data-00000-of-00001").read_bytes()
            for disk in disks.values():
                (disk / "go").write_text("go\n")
            assert finish_up(proc, tmp_path, 120) == 0, log.read_text()[-4000:]
            events = read_events(run_dir)
            assert [e for e in events if e["kind"] == "job"][-1]["state"] == "Succeeded"
            assert pids_with_run_id(run_id) == []
        finally:
            for disk in disks.values():
                disk.mkdir(parents=True, exist_ok=True)
                (disk / "go").write_text("go\n")
            kill_run_processes(run_id)
