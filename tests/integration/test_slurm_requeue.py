"""A submitted run survives its Slurm job's requeue, and leaves before its time limit (issue 57 §2).

On the real one-node cluster of tests/slurm.py, `up` submits from outside an allocation and follows
the run in --no-tui lines. The task (tests/data/slurm/resumable_steps.py) keeps its step in a
checkpoint file, saves it on SIGTERM and resumes from it:

- `scontrol requeue` mid-training: one run throughout (its id, events, restart counts), a
  `requeued` event with Slurm's words and a `Restarting` job event, the login node's `up` back in
  the queue view, the second allocation resuming from the first one's checkpoint, and Succeeded;
- `time_limit_action = "requeue"`: the job requeues itself before its time limit, then succeeds;
- `time_limit_action = "stop"`: the run ends `Stopped: time limit` before Slurm would kill it.
"""

from __future__ import annotations

import json
import re
import subprocess
from pathlib import Path
from typing import Any

import pytest

from tests.integration.jobtools import PYTHON, REPO, cli, kill_run_processes, pids_with_run_id, start_cli, wait_for
from tests.profiles import build_profile, table
from tests.slurm import SlurmCluster

pytest_plugins = ["tests.slurm"]
pytestmark = [pytest.mark.slow]

SCRIPT = REPO / "tests" / "data" / "slurm" / "resumable_steps.py"
#: seconds between two `status --json` polls: the job's 0.1 s steps leave seconds to spare
STATUS_POLL_S = 2.0


def resumable_profile(tmp: Path, name: str, steps: int, slurm: dict[str, Any] | None = None) -> Path:
    return build_profile(tmp / "job.toml", name=name, orphan_grace=30, strategy="custom",
                         command=f"{{python}} {SCRIPT}", defaults={"python": PYTHON}, workdir=REPO, grace=5,
                         env={"CKPT": str(tmp / "ckpt"), "STEPS": str(steps)}, hosts=(), roles={"chief": {}},
                         extra=table("slurm", slurm or {}))


def status_json(cluster: SlurmCluster, run: str) -> dict[str, Any] | None:
    done = cli("status", run, "--json", env=cluster.env, timeout=60)
    if done.returncode != 0:
        return None
    data: dict[str, Any] = json.loads(done.stdout)
    return data


def events_of(cluster: SlurmCluster, run: str) -> list[dict[str, Any]]:
    data = status_json(cluster, run)
    assert data is not None
    lines = (Path(str(data["dir"])) / "events.jsonl").read_text().splitlines()
    return [json.loads(line) for line in lines]


def chief_log(cluster: SlurmCluster, run: str) -> str:
    return "\n".join(e["line"] for e in events_of(cluster, run) if e["kind"] == "log" and e["task"] == "chief:0")


def nothing_left(cluster: SlurmCluster, run_id: str) -> None:
    wait_for(lambda: not [line for line in cluster.squeue() if not line.endswith(("COMPLETED", "CANCELLED",
                                                                                    "FAILED", "TIMEOUT"))],
             90, "squeue to show no job")
    wait_for(lambda: pids_with_run_id(run_id) == [], 30, "no process of the run")


def release(cluster: SlurmCluster, job: str) -> None:
    """Slurm holds a requeued job for 120 s (PENDING, BeginTime); this cluster lets it go 2 s on.
    Not at once: slurmd refuses a credential of the job made within the second its old one was
    revoked ("Job credential revoked"), and the job would fail, not run again."""
    def held() -> bool:
        done = subprocess.run(["squeue", "-h", "-j", job, "-o", "%T|%r"], capture_output=True, text=True,
                              timeout=30, env=cluster.env)
        return done.stdout.strip() == "PENDING|BeginTime"

    wait_for(held, 120, f"job {job} to wait in the queue again", interval=0.5)
    done = subprocess.run(["scontrol", "update", f"JobId={job}", "StartTime=now+2"], capture_output=True, text=True,
                          timeout=30, env=cluster.env)
    assert done.returncode == 0, done.stderr


def stepped(cluster: SlurmCluster, run: str, at_least: int) -> dict[str, Any] | None:
    """The run's status once it runs at ``at_least`` steps. Each call is a `status --json` (a Python
    and Slurm's commands, ~0.3 s of CPU): polled every STATUS_POLL_S, not faster."""
    data = status_json(cluster, run)
    if data is None or data["job"]["state"] != "Running":
        return None
    return data if (data["tasks"].get("chief:0", {}).get("step") or 0) >= at_least else None


def test_a_requeued_job_continues_the_same_run_from_its_checkpoint(tmp_path: Path, slurm_cluster: SlurmCluster
                                                                  ) -> None:
    run_id, log = "it-requeue", tmp_path / "up.log"
    up = start_cli("up", str(resumable_profile(tmp_path, run_id, steps=150)), "--no-tui", "--run-id", run_id,
                   log=log, env=slurm_cluster.env)
    try:
        data = wait_for(lambda: stepped(slurm_cluster, run_id, 20), 120, f"step 20 in the first allocation ({log})",
                        interval=STATUS_POLL_S)
        job = data["slurm"]["job_id"]
        done = subprocess.run(["scontrol", "requeue", job], capture_output=True, text=True, timeout=30,
                              env=slurm_cluster.env)
        assert done.returncode == 0, done.stderr
        release(slurm_cluster, job)
        assert up.wait(timeout=300) == 0, log.read_text()[-3000:]
        said = log.read_text()
        assert f"Slurm requeued job {job}" in said and said.rindex("requeued") < said.rindex("Succeeded"), said[-3000:]
        events = events_of(slurm_cluster, run_id)
        assert {e["run"] for e in events} == {run_id}
        requeued = [e for e in events if e["kind"] == "requeued"]
        assert len(requeued) == 1 and requeued[0]["job_id"] == job and requeued[0]["requeues"] == 1, requeued
        jobs = [(e["state"], e["reason"]) for e in events if e["kind"] == "job"]
        states = [state for state, _ in jobs]
        assert states[-1] == "Succeeded" and "Restarting" in states, jobs
        assert states.index("Restarting") < len(states) - 1 - states[::-1].index("Running"), jobs  # ran again
        log_lines = chief_log(slurm_cluster, run_id)
        resumed = [int(n) for n in re.findall(r"resumed from step (\d+)", log_lines)]
        assert resumed[0] == 0 and len(resumed) == 2 and resumed[1] >= 20, log_lines[-2000:]  # its checkpoint
        assert "done at step 150" in log_lines
        final = status_json(slurm_cluster, run_id)
        assert final is not None and final["slurm"]["job_id"] == job and final["slurm"]["requeues"] == 1, final
        assert final["tasks"]["chief:0"]["restarts"] == 0  # a requeue is no failure: no restart counted
        recorded = json.loads((Path(str(final["dir"])) / "state.json").read_text())
        assert recorded["job_restarts"] == 0 and recorded["tasks"]["chief:0"]["incarnation"] == 1, recorded["tasks"]
        nothing_left(slurm_cluster, run_id)
    finally:
        if up.poll() is None:
            up.kill()
            up.wait(timeout=30)
        kill_run_processes(run_id)


def test_the_time_limit_requeues_the_job_before_it_kills_the_tasks(tmp_path: Path, slurm_cluster: SlurmCluster
                                                                   ) -> None:
    run_id, log = "it-limit-requeue", tmp_path / "up.log"
    # a minute's limit, acted on 45 s before: ~15 s per allocation, fewer than the 200 steps of 0.1 s
    profile = resumable_profile(tmp_path, run_id, steps=200, slurm={
        "time": "00:01:00", "time_limit_action": "requeue", "time_limit_margin_seconds": 45})
    up = start_cli("up", str(profile), "--no-tui", "--run-id", run_id, log=log, env=slurm_cluster.env)
    try:
        data = wait_for(lambda: stepped(slurm_cluster, run_id, 1), 120, f"the first allocation ({log})",
                        interval=STATUS_POLL_S)
        release(slurm_cluster, data["slurm"]["job_id"])  # requeued by its time limit
        assert up.wait(timeout=300) == 0, log.read_text()[-3000:]
        events = events_of(slurm_cluster, run_id)
        requeued = [e for e in events if e["kind"] == "requeued"]
        assert requeued and all(e["reason"].startswith("time limit: Slurm ends job ") for e in requeued), requeued
        assert [e["state"] for e in events if e["kind"] == "job"][-1] == "Succeeded"
        log_lines = chief_log(slurm_cluster, run_id)
        resumed = [int(n) for n in re.findall(r"resumed from step (\d+)", log_lines)]
        assert len(resumed) == len(requeued) + 1 and resumed[1] > 0, log_lines[-2000:]
        assert "stopped at step" in log_lines and "done at step 200" in log_lines  # its checkpoint before the stop
        nothing_left(slurm_cluster, run_id)
    finally:
        if up.poll() is None:
            up.kill()
            up.wait(timeout=30)
        kill_run_processes(run_id)


def test_the_time_limit_stops_the_run_before_slurm_kills_it(tmp_path: Path, slurm_cluster: SlurmCluster) -> None:
    run_id, log = "it-limit-stop", tmp_path / "up.log"
    profile = resumable_profile(tmp_path, run_id, steps=100000, slurm={
        "time": "00:01:00", "time_limit_action": "stop", "time_limit_margin_seconds": 50})
    up = start_cli("up", str(profile), "--no-tui", "--run-id", run_id, log=log, env=slurm_cluster.env)
    try:
        assert up.wait(timeout=180) == 143, log.read_text()[-3000:]  # Stopped: neither success nor failure
        events = events_of(slurm_cluster, run_id)
        end = [e for e in events if e["kind"] == "job"][-1]
        assert end["state"] == "Stopped" and end["reason"].startswith("time limit: Slurm ends job "), end
        assert not [e for e in events if e["kind"] == "requeued"]
        assert "stopped at step" in chief_log(slurm_cluster, run_id)
        nothing_left(slurm_cluster, run_id)
    finally:
        if up.poll() is None:
            up.kill()
            up.wait(timeout=30)
        kill_run_processes(run_id)


def test_a_preempted_job_is_requeued_and_resumes_never_failed(tmp_path: Path, preempting_cluster: SlurmCluster
                                                             ) -> None:
    """A job of partition low, preempted by one of partition high (PreemptMode=REQUEUE, GraceTime=15):
    Slurm's SIGTERM comes while the job still runs, with its PreemptTime set; the run takes it for a
    requeue (the tasks checkpoint and stop), waits in the queue while the high job runs, then
    resumes from that checkpoint and succeeds."""
    cluster, run_id, log = preempting_cluster, "it-preempted", tmp_path / "up.log"
    up = start_cli("up", str(resumable_profile(tmp_path, run_id, steps=200, slurm={"partition": "low"})),
                   "--no-tui", "--run-id", run_id, log=log, env=cluster.env)
    high = ""
    try:
        data = wait_for(lambda: stepped(cluster, run_id, 20), 120, f"step 20 in the first allocation ({log})",
                        interval=STATUS_POLL_S)
        job = data["slurm"]["job_id"]
        done = subprocess.run(["sbatch", "--parsable", "-p", "high", "--exclusive", "--output=/dev/null", "--wrap",
                               "sleep 3"], capture_output=True, text=True, timeout=60, env=cluster.env)
        assert done.returncode == 0, done.stderr
        high = done.stdout.strip()
        release(cluster, job)
        assert up.wait(timeout=300) == 0, log.read_text()[-3000:]
        events = events_of(cluster, run_id)
        requeued = [e for e in events if e["kind"] == "requeued"]
        assert len(requeued) == 1 and requeued[0]["job_id"] == job, requeued
        states = [e["state"] for e in events if e["kind"] == "job"]
        assert "Failed" not in states and states[-1] == "Succeeded", states
        log_lines = chief_log(cluster, run_id)
        resumed = [int(n) for n in re.findall(r"resumed from step (\d+)", log_lines)]
        assert len(resumed) == 2 and resumed[1] >= 20, log_lines[-2000:]  # the checkpoint before the stop
        assert "stopped at step" in log_lines and "done at step 200" in log_lines
        final = status_json(cluster, run_id)
        assert final is not None and final["tasks"]["chief:0"]["restarts"] == 0, final
        nothing_left(cluster, run_id)
    finally:
        if up.poll() is None:
            up.kill()
            up.wait(timeout=30)
        if high:
            subprocess.run(["scancel", high], capture_output=True, timeout=30, env=cluster.env)
        kill_run_processes(run_id)
