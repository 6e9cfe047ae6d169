"""Fault tolerance end to end: restart policies, limits, recovery groups by strategy, manual restart.

Shell-command jobs (strategy = "custom" or a mirrored job of `sleep`s) check the policy machinery
in seconds; the ParameterServerStrategy tests kill real TensorFlow tasks mid-training and check
that training goes on (a worker restarted alone) or resumes from its checkpoint (ps + chief).
"""

from __future__ import annotations

import contextlib
import os
import re
import signal
import subprocess
from pathlib import Path
from typing import Any

import pytest

from tests.integration.jobtools import (
    REPO,
    cli,
    kill_run_processes,
    local_ps_profile,
    pids_with_run_id,
    read_events,
    start_cli,
    wait_for,
    wait_for_event,
)
from tests.profiles import Roles, build_profile


def shell_profile(tmp: Path, roles: Roles | str, *, strategy: str = "custom", top: str = "",
                  restart: str = "on-failure", max_restarts: int = 3) -> Path:
    """A job of plain shell commands on this machine: no TensorFlow, so it runs in seconds. ``roles``
    as the builder takes them, or as the TOML of their tables."""
    return build_profile(tmp / "shell.toml", name="it-faults", strategy=strategy, orphan_grace=30, top=top,
                         command="sleep 600", workdir=REPO, restart=restart, max_restarts=max_restarts, grace=2,
                         roles={} if isinstance(roles, str) else roles, extra=roles if isinstance(roles, str) else "")


def states_of(events: list[dict[str, Any]], task: str) -> list[dict[str, Any]]:
    return [e for e in events if e["kind"] == "state" and e["task"] == task]


def job_states(events: list[dict[str, Any]]) -> list[str]:
    return [e["state"] for e in events if e["kind"] == "job"]


def job_end(events: list[dict[str, Any]]) -> dict[str, Any]:
    return [e for e in events if e["kind"] == "job"][-1]


def running_pid(run_dir: Path, task: str, restarts: int = 0, timeout: float = 60) -> int:
    event = wait_for_event(
        run_dir, lambda e: e["kind"] == "state" and e["task"] == task and e["state"] == "running"
        and e.get("restarts", 0) == restarts, timeout, f"{task} running (restarts {restarts})")
    return int(event["pid"])


def stop_job(run_dir: Path, launcher: subprocess.Popen[bytes], log: Path) -> None:
    """`down` from another process, then the backgrounded `up` must end by itself."""
    down = cli("down", str(run_dir), timeout=60)
    assert down.returncode == 0, down.stdout + down.stderr
    launcher.wait(timeout=30)
    assert launcher.returncode != 0, log.read_text()[-2000:]  # stopped by down is not success


def assert_nothing_left(run_id: str) -> None:
    wait_for(lambda: pids_with_run_id(run_id) == [], 10, f"no process of {run_id} left")


def kill_launcher(launcher: subprocess.Popen[bytes] | None) -> None:
    if launcher is not None and launcher.poll() is None:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(launcher.pid, signal.SIGKILL)
        launcher.wait(timeout=10)


# -- restart policies and limits (shell commands) -------------------------------------------------------


def test_exit_code_policy_treats_3_as_permanent(tmp_path: Path) -> None:
    run_dir, run_id = tmp_path / "run", "it-ft-exit3"
    profile = shell_profile(tmp_path, {"worker": {"command": "exit 3"}},
                            restart="exit-code")
    try:
        up = cli("up", str(profile), "--no-tui", "--run-dir", str(run_dir), "--run-id", run_id, timeout=60)
        assert up.returncode != 0 and up.returncode != 2, up.stdout + up.stderr
        events = read_events(run_dir)
        assert [e["state"] for e in states_of(events, "worker:0")] == ["pending", "starting", "running", "failed"]
        assert states_of(events, "worker:0")[-1]["exit_code"] == 3
        end = job_end(events)
        assert end["state"] == "Failed"
        assert "exit code 3" in end["reason"] and "permanent" in end["reason"], end["reason"]
        assert "Restarting" not in job_states(events)
        assert pids_with_run_id(run_id) == []
    finally:
        kill_run_processes(run_id)


def test_exit_code_policy_retries_a_task_killed_by_a_signal(tmp_path: Path) -> None:
    run_dir, run_id = tmp_path / "run", "it-ft-sig"
    # the first run kills itself with SIGKILL (exit 137); the restarted one finds its marker and exits 0
    once = "test -e {run_dir}/killed-once && exit 0; touch {run_dir}/killed-once; kill -9 $$"
    profile = shell_profile(tmp_path, {"worker": {"command": once}},
                            restart="exit-code")
    try:
        up = cli("up", str(profile), "--no-tui", "--run-dir", str(run_dir), "--run-id", run_id, timeout=60)
        assert up.returncode == 0, up.stdout + up.stderr
        events = read_events(run_dir)
        worker = states_of(events, "worker:0")
        assert [e["state"] for e in worker] == ["pending", "starting", "running", "failed", "restarting",
                                                 "starting", "running", "succeeded"]
        assert worker[3]["exit_code"] == 137
        assert worker[-1]["restarts"] == 1
        assert job_states(events) == ["Created", "Running", "Restarting", "Running", "Succeeded"]
        assert pids_with_run_id(run_id) == []
    finally:
        kill_run_processes(run_id)


def test_max_restarts_fails_the_job_after_backing_off(tmp_path: Path) -> None:
    run_dir, run_id = tmp_path / "run", "it-ft-maxr"
    # min_uptime = 0: quick failures are not a crash loop here, so max_restarts is what ends the job
    profile = shell_profile(tmp_path, {"worker": {"command": "exit 1", "min_uptime": 0}},
                            max_restarts=2)
    try:
        up = cli("up", str(profile), "--no-tui", "--run-dir", str(run_dir), "--run-id", run_id, timeout=60)
        assert up.returncode == 1, up.stdout + up.stderr
        events = read_events(run_dir)
        worker = states_of(events, "worker:0")
        failures = [e for e in worker if e["state"] == "failed"]
        starts = [e for e in worker if e["state"] == "starting"]
        assert len(failures) == 3 and len(starts) == 3
        assert [e["restarts"] for e in starts] == [0, 1, 2]
        # exponential back-off: 1 s before the first restart, 2 s before the second
        assert starts[1]["ts"] - failures[0]["ts"] >= 1.0 - 0.05
        assert starts[2]["ts"] - failures[1]["ts"] >= 2.0 - 0.05
        end = job_end(events)
        assert end["state"] == "Failed" and "max_restarts" in end["reason"] and "worker:0" in end["reason"]
        assert job_states(events).count("Restarting") == 2
        assert pids_with_run_id(run_id) == []
    finally:
        kill_run_processes(run_id)


def test_backoff_limit_is_shared_by_the_whole_job(tmp_path: Path) -> None:
    run_dir, run_id = tmp_path / "run", "it-ft-backoff"
    # worker:0 decides and keeps running; worker:1 and worker:2 fail; each task could restart 5 times,
    # but the job as a whole may restart only once
    command = "test {index} = 0 && exec sleep 600; exit 1"
    profile = shell_profile(tmp_path, {"worker": {"count": 3, "command": command}},
                            top="backoff_limit = 1", max_restarts=5)
    try:
        up = cli("up", str(profile), "--no-tui", "--run-dir", str(run_dir), "--run-id", run_id, timeout=60)
        assert up.returncode == 1, up.stdout + up.stderr
        events = read_events(run_dir)
        end = job_end(events)
        assert end["state"] == "Failed" and "backoff_limit" in end["reason"], end["reason"]
        assert "max_restarts" not in end["reason"]
        restarting = [e for e in events if e["kind"] == "state" and e["state"] == "restarting"]
        assert len(restarting) == 1 and restarting[0]["task"] in ("worker:1", "worker:2")
        assert states_of(events, "worker:0")[-1]["state"] == "stopped"
        assert pids_with_run_id(run_id) == []
    finally:
        kill_run_processes(run_id)


@pytest.mark.slow  # no TensorFlow task, but preflight imports TensorFlow for this strategy
def test_a_task_that_dies_while_its_group_restart_is_pending_is_not_judged_by_its_own_policy(
        tmp_path: Path) -> None:
    """A chief that crashes because its ps died (TF raises UnavailableError, exit 1) is already being
    restarted with the ps: its own exit-code policy must not turn that into a permanent failure."""
    run_dir, run_id = tmp_path / "run", "it-ft-pending"
    # the ps dies once the chief runs: dying at once, its group restart fell due while the launch was
    # still to start the chief on a loaded machine, and the chief it then started was stopped by the
    # restart before it could crash (test_restart_during_launch.py covers a restart due mid-launch)
    ps = ("test -e {run_dir}/ps-died && exec sleep 600; until test -e {run_dir}/chief-up; do sleep 0.05; done; "
          "touch {run_dir}/ps-died; kill -9 $$")
    # the first chief waits until the launcher announced the group restart, then crashes with 3
    launcher_events = "{run_dir}/../../events.jsonl"
    chief = (f"test -e {{run_dir}}/chief-once && exit 0; touch {{run_dir}}/chief-once {{run_dir}}/chief-up; "
             f"until grep -q restarting {launcher_events}; do sleep 0.05; done; exit 3")
    roles: Roles = {"ps": {"command": ps}, "worker": {}, "chief": {"command": chief}}
    profile = shell_profile(tmp_path, roles, strategy="parameter_server", restart="exit-code")
    try:
        up = cli("up", str(profile), "--no-tui", "--run-dir", str(run_dir), "--run-id", run_id, timeout=60)
        events = read_events(run_dir)
        assert up.returncode == 0, job_end(events)
        chief_states = states_of(events, "chief:0")
        assert any(e["state"] == "failed" and e["exit_code"] == 3 for e in chief_states)
        assert chief_states[-1]["state"] == "succeeded" and chief_states[-1]["restarts"] == 1
        assert [e["state"] for e in events if e["kind"] == "job"].count("Restarting") == 1
        assert pids_with_run_id(run_id) == []
    finally:
        kill_run_processes(run_id)


def test_a_start_error_no_restart_can_fix_fails_the_job_at_once(tmp_path: Path) -> None:
    """A new incarnation that cannot start (its workdir vanished after preflight) is not retried,
    although on-failure and max_restarts = 5 would allow it: no restart can bring the workdir back."""
    run_dir, run_id = tmp_path / "run", "it-ft-nostart"
    workdir = tmp_path / "gone"
    workdir.mkdir()
    roles: Roles = {"worker": {"workdir": str(workdir), "command": f"rmdir {workdir}; exit 1"}}
    profile = shell_profile(tmp_path, roles, max_restarts=5)
    try:
        up = cli("up", str(profile), "--no-tui", "--run-dir", str(run_dir), "--run-id", run_id, timeout=60)
        events = read_events(run_dir)
        assert up.returncode == 1, up.stdout[-2000:]
        failures = [e for e in states_of(events, "worker:0") if e["state"] == "failed"]
        assert len(failures) == 2
        assert failures[-1]["permanent"] is True
        assert f"workdir {workdir} does not exist" in failures[-1]["reason"], failures[-1]
        end = job_end(events)
        assert end["state"] == "Failed" and "no restart can fix" in end["reason"], end["reason"]
        assert f"workdir {workdir} does not exist" in end["reason"]
        assert job_states(events).count("Restarting") == 1  # the exit 1 was retried, the start error not
        assert pids_with_run_id(run_id) == []
    finally:
        kill_run_processes(run_id)


@pytest.mark.parametrize("command, words", [
    ("exec $PROGRAM", "not found"),            # the shell's exit 127
    ("exec ./not-executable", "Permission denied"),  # the shell's exit 126
])
def test_a_program_the_shell_cannot_run_is_not_retried(tmp_path: Path, command: str, words: str) -> None:
    """Preflight cannot judge `exec $PROGRAM`; the shell's own "not found" / "Permission denied"
    (exit 127 / 126) at start is final whatever the restart policy."""
    run_dir, run_id = tmp_path / "run", "it-ft-noexec"
    (tmp_path / "not-executable").write_text("#!/bin/sh\nexit 0\n")
    roles: Roles = {"worker": {"workdir": str(tmp_path), "command": command,
                               "env": {"PROGRAM": "no-such-program-anywhere"}}}
    profile = shell_profile(tmp_path, roles, max_restarts=5)
    try:
        up = cli("up", str(profile), "--no-tui", "--run-dir", str(run_dir), "--run-id", run_id, timeout=60)
        events = read_events(run_dir)
        assert up.returncode == 1, up.stdout[-2000:]
        worker = states_of(events, "worker:0")
        assert [e["state"] for e in worker].count("starting") == 1
        assert worker[-1]["state"] == "failed" and worker[-1]["permanent"] is True
        end = job_end(events)
        assert "no restart can fix" in end["reason"] and words in end["reason"], end["reason"]
        assert "Restarting" not in job_states(events)
    finally:
        kill_run_processes(run_id)


def test_a_program_exiting_127_by_itself_is_still_retried(tmp_path: Path) -> None:
    """Exit 127 alone is not the shell's "not found": a program may exit 127 for its own reasons."""
    run_dir, run_id = tmp_path / "run", "it-ft-127"
    command = "test -e {run_dir}/once && exit 0; touch {run_dir}/once; exit 127"
    profile = shell_profile(tmp_path, {"worker": {"command": command}})
    try:
        up = cli("up", str(profile), "--no-tui", "--run-dir", str(run_dir), "--run-id", run_id, timeout=60)
        assert up.returncode == 0, up.stdout[-2000:]
        assert job_states(read_events(run_dir)).count("Restarting") == 1
    finally:
        kill_run_processes(run_id)


# -- restart by hand, and the mirrored worker group -----------------------------------------------------


def test_restart_from_another_process_goes_through_the_restart_machinery(tmp_path: Path) -> None:
    run_dir, run_id, log = tmp_path / "run", "it-ft-manual", tmp_path / "up.log"
    profile = shell_profile(tmp_path, {"ps": {}, "worker": {}})
    launcher = None
    try:
        launcher = start_cli("up", str(profile), "--no-tui", "--run-dir", str(run_dir), "--run-id", run_id, log=log)
        first = running_pid(run_dir, "worker:0")
        ps_pid = running_pid(run_dir, "ps:0")
        wait_for_event(run_dir, lambda e: e["kind"] == "job" and e["state"] == "Running", 30, "job Running")
        asked = cli("restart", str(run_dir), "worker:0", timeout=30)
        assert asked.returncode == 0, asked.stdout + asked.stderr
        second = running_pid(run_dir, "worker:0", restarts=1)
        assert second != first
        with pytest.raises(ProcessLookupError):
            os.kill(first, 0)
        wait_for(lambda: job_states(read_events(run_dir))[-2:] == ["Restarting", "Running"], 20,
                 "job Restarting then Running")
        events = read_events(run_dir)
        worker = [e["state"] for e in states_of(events, "worker:0")]
        # the supervisor announces the restart, then the agent reports the stop it asked for
        assert worker[-4:] == ["restarting", "stopped", "starting", "running"] and "failed" not in worker
        # the timeline can say who asked: the operator's action is in the event stream
        assert [(e["action"], e["target"]) for e in events if e["kind"] == "action"] == [("restart", "worker:0")]
        assert [e["state"] for e in states_of(events, "ps:0")] == ["pending", "starting", "running"]
        os.kill(ps_pid, 0)  # the ps was left alone
        stop_job(run_dir, launcher, log)
        assert_nothing_left(run_id)
    finally:
        kill_launcher(launcher)
        kill_run_processes(run_id)


@pytest.mark.slow  # no TensorFlow task, but preflight imports TensorFlow for this strategy
def test_mirrored_worker_failure_restarts_the_whole_worker_group(tmp_path: Path) -> None:
    run_dir, run_id, log = tmp_path / "run", "it-ft-mwms", tmp_path / "up.log"
    profile = shell_profile(tmp_path, {"worker": 2}, strategy="multi_worker_mirrored")
    launcher = None
    try:
        launcher = start_cli("up", str(profile), "--no-tui", "--run-dir", str(run_dir), "--run-id", run_id, log=log)
        first0 = running_pid(run_dir, "worker:0")
        first1 = running_pid(run_dir, "worker:1")
        os.kill(first1, signal.SIGKILL)
        second0 = running_pid(run_dir, "worker:0", restarts=1)
        second1 = running_pid(run_dir, "worker:1", restarts=1)
        assert second0 != first0 and second1 != first1
        with pytest.raises(ProcessLookupError):
            os.kill(first0, 0)
        events = read_events(run_dir)
        w0 = [e["state"] for e in states_of(events, "worker:0")]
        w1 = [e["state"] for e in states_of(events, "worker:1")]
        assert "failed" in w1 and w1[-3:] == ["restarting", "starting", "running"]
        assert w0[-4:] == ["restarting", "stopped", "starting", "running"] and "failed" not in w0
        restarting = [e for e in events if e["kind"] == "job" and e["state"] == "Restarting"]
        assert len(restarting) == 1 and "worker:0" in restarting[0]["reason"] and "worker:1" in restarting[0]["reason"]
        # no checkpoint was ever seen: the restart says the group starts over, in the saver's log
        said = [e["line"] for e in events if e["kind"] == "log" and e["line"].startswith("distlaunch: no checkpoint")]
        assert len(said) == 1 and said[0].startswith("distlaunch: no checkpoint of worker:0 seen yet: "), said
        assert "worker:1" in said[0] and "start again from step 0" in said[0], said
        wait_for(lambda: job_states(read_events(run_dir))[-1] == "Running", 20, "job back to Running")
        stop_job(run_dir, launcher, log)
        assert_nothing_left(run_id)
    finally:
        kill_launcher(launcher)
        kill_run_processes(run_id)


# -- ParameterServerStrategy with real TensorFlow -------------------------------------------------------


def chief_metrics(run_dir: Path) -> list[dict[str, Any]]:
    return [e for e in read_events(run_dir) if e["kind"] == "metric" and e["task"] == "chief:0"
            and e["step"] is not None]


def latest_checkpoint_step(run_dir: Path) -> int:
    """The step of the checkpoint a restarted chief restores: the one the ``checkpoint`` file names.

    CheckpointManager updates that file only after a save is complete, so a save cut short by the
    kill never counts.
    """
    try:  # TensorFlow renames its ckpt-N_temp folders while the walk goes: read again next poll
        for state in run_dir.rglob("ckpt/checkpoint"):
            for line in state.read_text().splitlines():
                if line.startswith("model_checkpoint_path:"):
                    return int(line.split('"')[1].rsplit("-", 1)[1])
    except FileNotFoundError:
        pass
    return 0


@pytest.mark.slow
def test_killed_worker_is_restarted_alone_and_training_goes_on(tmp_path: Path) -> None:
    run_dir, run_id, log = tmp_path / "run", "it-ft-worker", tmp_path / "up.log"
    profile = local_ps_profile(tmp_path, steps=400, name="it-ft-worker")
    launcher = None
    try:
        launcher = start_cli("up", str(profile), "--no-tui", "--run-dir", str(run_dir), "--run-id", run_id, log=log)
        worker_pid = running_pid(run_dir, "worker:0", timeout=90)
        ps_pid = running_pid(run_dir, "ps:0")
        chief_pid = running_pid(run_dir, "chief:0")
        wait_for(lambda: any(m["step"] >= 40 for m in chief_metrics(run_dir)), 120, "the chief at step 40")
        os.kill(worker_pid, signal.SIGKILL)
        killed_at = max(m["step"] for m in chief_metrics(run_dir))
        running_pid(run_dir, "worker:0", restarts=1, timeout=60)
        restarted_at = len(read_events(run_dir))
        launcher.wait(timeout=180)
        assert launcher.returncode == 0, log.read_text()[-3000:]
        events = read_events(run_dir)
        worker = [e["state"] for e in states_of(events, "worker:0")]
        assert worker[3:8] == ["failed", "restarting", "starting", "running", "stopped"], worker
        # the ps and the chief were never touched: one incarnation each
        assert [e["pid"] for e in states_of(events, "ps:0") if e["state"] == "running"] == [ps_pid]
        assert [e["pid"] for e in states_of(events, "chief:0") if e["state"] == "running"] == [chief_pid]
        later = [e["step"] for e in events[restarted_at:] if e["kind"] == "metric" and e["task"] == "chief:0"
                 and e["step"] is not None]
        assert later and later[-1] >= 400 and min(later) >= killed_at and later == sorted(later)
        assert job_states(events)[-3:] == ["Restarting", "Running", "Succeeded"]
        assert pids_with_run_id(run_id) == []
    finally:
        kill_launcher(launcher)
        kill_run_processes(run_id)


@pytest.mark.slow
def test_killed_ps_restarts_with_the_chief_which_resumes_from_its_checkpoint(tmp_path: Path) -> None:
    run_dir, run_id, log = tmp_path / "run", "it-ft-ps", tmp_path / "up.log"
    profile = local_ps_profile(tmp_path, steps=200, name="it-ft-ps")
    profile.write_text(profile.read_text().replace("--log-every 20", "--log-every 10 --checkpoint-every 20"))
    launcher = None
    try:
        launcher = start_cli("up", str(profile), "--no-tui", "--run-dir", str(run_dir), "--run-id", run_id, log=log)
        ps_pid = running_pid(run_dir, "ps:0", timeout=90)
        worker_pid = running_pid(run_dir, "worker:0")
        wait_for(lambda: latest_checkpoint_step(run_dir) >= 40, 120, "a checkpoint at step 40")
        os.kill(ps_pid, signal.SIGKILL)
        checkpointed = latest_checkpoint_step(run_dir)
        running_pid(run_dir, "ps:0", restarts=1, timeout=60)
        running_pid(run_dir, "chief:0", restarts=1, timeout=60)
        launcher.wait(timeout=240)
        assert launcher.returncode == 0, log.read_text()[-3000:]
        events = read_events(run_dir)
        restarted = next(i for i, e in enumerate(events) if e["kind"] == "state" and e["task"] == "chief:0"
                         and e["state"] == "running" and e["restarts"] == 1)
        after = [e for e in events[restarted:] if e["kind"] == "metric" and e["task"] == "chief:0"]
        assert after, "the restarted chief reported nothing"
        assert after[0]["values"].get("restored_step") == after[0]["step"]
        assert after[0]["step"] >= checkpointed > 0
        steps = [e["step"] for e in after if e["step"] is not None]
        assert min(steps) >= checkpointed and steps == sorted(steps) and steps[-1] >= 200
        restarting = [e["reason"] for e in events if e["kind"] == "job" and e["state"] == "Restarting"]
        assert restarting[0].startswith("ps:0 failed") and "restarting ps:0, chief:0 in" in restarting[0]
        # The new chief may still lose ps:0 on its first steps: the worker (kept) reaches ps:0 over its
        # own gRPC channel, which may still be in its reconnect back-off from while ps:0 was down, and then
        # fails at once; TensorFlow's coordinator fails the chief on an UnavailableError that names /job:ps.
        # Then the chief alone restarts, never ps:0 again, and each such failure is that lost contact.
        assert all(re.fullmatch(r"chief:0 failed \(exit code 1\); restarting chief:0 in \d+s", r)
                   for r in restarting[1:]), restarting
        chief_failures = [e for e in states_of(events, "chief:0") if e["state"] == "failed" and e["restarts"] >= 1]
        assert len(chief_failures) == len(restarting) - 1
        assert all("lost contact with ps:0" in str(e.get("cause")) for e in chief_failures), chief_failures
        # the worker is not part of the ps group: it kept its one incarnation
        assert [e["pid"] for e in states_of(events, "worker:0") if e["state"] == "running"] == [worker_pid]
        assert job_states(events)[-1] == "Succeeded"
        assert pids_with_run_id(run_id) == []
    finally:
        kill_launcher(launcher)
        kill_run_processes(run_id)


# -- detach, attach, down --------------------------------------------------------------------------------


def test_detached_job_is_attached_again_then_downed_from_another_process(tmp_path: Path) -> None:
    run_dir, run_id, log = tmp_path / "run", "it-ft-attach", tmp_path / "attach.log"
    profile = shell_profile(tmp_path, {"worker": 2})
    attach = None
    try:
        up = cli("up", str(profile), "--detach", "--run-dir", str(run_dir), "--run-id", run_id, timeout=90)
        assert up.returncode == 0, up.stdout + up.stderr
        assert f"distlaunch attach {run_id}" in up.stdout
        # `up --detach` returns once the tasks started: their own event files say they run
        pids = {t: running_pid(run_dir / "hosts" / "local" / "tasks" / t.replace(":", "-"), t, timeout=30)
                for t in ("worker:0", "worker:1")}
        for pid in pids.values():
            os.kill(pid, 0)  # `up` returned, the tasks run on

        attach = start_cli("attach", str(run_dir), "--no-tui", log=log)
        # the history first: the job as `up` saw it, before this process existed
        wait_for(lambda: "job Created" in log.read_text() and f"pid {pids['worker:1']}" in log.read_text(), 60,
                 "attach to print the run's history")
        assert attach.poll() is None

        # then it follows: a restart asked from a third process goes through the supervisor, and shows here
        wait_for(lambda: cli("restart", str(run_dir), "worker:1", timeout=30).returncode == 0, 30,
                 "the supervisor to accept a restart")
        new_pid = running_pid(run_dir, "worker:1", restarts=1, timeout=30)
        wait_for(lambda: f"pid {new_pid}" in log.read_text(), 20, "attach to print the restarted worker")

        down = cli("down", str(run_dir), timeout=60)
        assert down.returncode == 0, down.stdout + down.stderr
        attach.wait(timeout=30)
        assert attach.returncode not in (0, 2), log.read_text()[-2000:]
        assert "job Stopped" in log.read_text()  # stopped on purpose by down, not a failure
        assert_nothing_left(run_id)
    finally:
        kill_launcher(attach)
        kill_run_processes(run_id)


@pytest.mark.slow
def test_killed_chief_is_restarted_alone_and_resumes_from_its_checkpoint(tmp_path: Path) -> None:
    run_dir, run_id, log = tmp_path / "run", "it-ft-chief", tmp_path / "up.log"
    profile = local_ps_profile(tmp_path, steps=200, name="it-ft-chief")
    profile.write_text(profile.read_text().replace("--log-every 20", "--log-every 10 --checkpoint-every 20"))
    launcher = None
    try:
        launcher = start_cli("up", str(profile), "--no-tui", "--run-dir", str(run_dir), "--run-id", run_id, log=log)
        chief_pid = running_pid(run_dir, "chief:0", timeout=90)
        ps_pid = running_pid(run_dir, "ps:0")
        worker_pid = running_pid(run_dir, "worker:0")
        wait_for(lambda: latest_checkpoint_step(run_dir) >= 40, 120, "a checkpoint at step 40")
        os.kill(chief_pid, signal.SIGKILL)
        checkpointed = latest_checkpoint_step(run_dir)
        running_pid(run_dir, "chief:0", restarts=1, timeout=60)
        launcher.wait(timeout=240)
        assert launcher.returncode == 0, log.read_text()[-3000:]
        events = read_events(run_dir)
        restarted = next(i for i, e in enumerate(events) if e["kind"] == "state" and e["task"] == "chief:0"
                         and e["state"] == "running" and e["restarts"] == 1)
        after = [e for e in events[restarted:] if e["kind"] == "metric" and e["task"] == "chief:0"]
        assert after and after[0]["values"].get("restored_step") == after[0]["step"] >= checkpointed > 0
        steps = [e["step"] for e in after if e["step"] is not None]
        assert min(steps) >= checkpointed and steps[-1] >= 200
        restarting = [e for e in events if e["kind"] == "job" and e["state"] == "Restarting"]
        assert len(restarting) == 1 and "restarting chief:0 in" in restarting[0]["reason"]
        for task, pid in (("ps:0", ps_pid), ("worker:0", worker_pid)):
            assert [e["pid"] for e in states_of(events, task) if e["state"] == "running"] == [pid]
        assert job_states(events)[-1] == "Succeeded"
        assert pids_with_run_id(run_id) == []
    finally:
        kill_launcher(launcher)
        kill_run_processes(run_id)
