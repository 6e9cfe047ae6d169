"""`distlaunch up` with [slurm] outside an allocation submits the job (sbatch) and watches it on a
real Slurm cluster (tests/slurm.py): PENDING with Slurm's reason while another job holds the node,
then Running and Succeeded; `--detach` then `attach`; `down` of a pending and of a running job
leaves no job in squeue and no process; sbatch's refusals are one line, exit 2."""

from __future__ import annotations

import json
import os
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.integration.jobtools import PYTHON, REPO, cli, kill_run_processes, pids_with_run_id, start_cli, wait_for
from tests.profiles import build_profile, table
from tests.slurm import SlurmCluster

pytest_plugins = ["tests.slurm"]
pytestmark = [pytest.mark.slow]


def sleeper_profile(tmp: Path, seconds: float, name: str = "it-submit", extra: str = "") -> Path:
    return build_profile(tmp / "submit.toml", name=name, orphan_grace=30, strategy="custom",
                         command=f"{{python}} -c 'import time; time.sleep({seconds})'",
                         defaults={"python": PYTHON}, workdir=REPO, grace=3, hosts=(),
                         roles={"chief": {}}, extra=table("slurm", {}) + extra)


def sbatch(cluster: SlurmCluster, *args: str) -> str:
    done = subprocess.run(["sbatch", "--parsable", *args], capture_output=True, text=True, timeout=60,
                          env=cluster.env)
    assert done.returncode == 0, done.stderr
    return done.stdout.strip().split(";")[0]


def job_state(cluster: SlurmCluster, job: str) -> str:
    done = subprocess.run(["squeue", "-h", "-j", job, "--states=all", "-o", "%T"], capture_output=True, text=True,
                          timeout=30, env=cluster.env)
    return done.stdout.strip()


def queued(cluster: SlurmCluster) -> list[str]:
    """Jobs squeue still shows as not ended."""
    return [line for line in cluster.squeue() if not line.endswith(("COMPLETED", "CANCELLED", "FAILED"))]


@pytest.fixture
def holder(slurm_cluster: SlurmCluster) -> Iterator[str]:
    """A job holding the whole node, so the next one waits (PENDING); cancelled at the end."""
    job = sbatch(slurm_cluster, "--exclusive", "-N1", "--output=/dev/null", "--wrap", "sleep 600")
    wait_for(lambda: job_state(slurm_cluster, job) == "RUNNING", 60, "the holding job to run")
    try:
        yield job
    finally:
        subprocess.run(["scancel", job], capture_output=True, timeout=30, env=slurm_cluster.env)


def status_json(cluster: SlurmCluster, run: str) -> dict[str, object]:
    done = cli("status", run, "--json", env=cluster.env, timeout=60)
    assert done.returncode == 0, done.stderr
    data = json.loads(done.stdout)
    assert isinstance(data, dict)
    return data


def nothing_left(cluster: SlurmCluster, run_id: str) -> None:
    wait_for(lambda: queued(cluster) == [], 90, "squeue to show no job")
    wait_for(lambda: pids_with_run_id(run_id) == [], 30, "no process of the run")


def test_up_submits_waits_pending_then_runs_to_success(tmp_path: Path, slurm_cluster: SlurmCluster,
                                                       holder: str) -> None:
    run_id, log = "it-submit-ok", tmp_path / "up.log"
    up = start_cli("up", str(sleeper_profile(tmp_path, 2)), "--no-tui", "--run-id", run_id, log=log,
                   env=slurm_cluster.env)
    try:
        def pending() -> dict[str, object] | None:
            done = cli("status", run_id, "--json", env=slurm_cluster.env, timeout=60)
            if done.returncode != 0:  # `up` has not made the run yet
                return None
            data = json.loads(done.stdout)
            job, slurm = data["job"], data["slurm"]
            assert isinstance(job, dict) and isinstance(slurm, dict)
            return data if job["state"] == "Pending" and slurm["state"] == "PENDING" and slurm["reason"] else None

        data = wait_for(pending, 60, f"status --json to say Pending ({log})", interval=0.5)
        assert data["supervision"] == "pending"
        job_id = data["slurm"]["job_id"]
        assert job_state(slurm_cluster, job_id) == "PENDING"
        wait_for(lambda: "PENDING (" in log.read_text(), 30, "the pending line in --no-tui output")
        runs = cli("runs", env=slurm_cluster.env, timeout=60)
        assert f"pending: Slurm job {job_id} PENDING (" in runs.stdout, runs.stdout
        subprocess.run(["scancel", holder], capture_output=True, timeout=30, env=slurm_cluster.env)
        assert up.wait(timeout=180) == 0, log.read_text()[-3000:]
        text = log.read_text()
        assert "RUNNING" in text and "Succeeded" in text, text[-3000:]
        assert text.index("PENDING (") < text.index("RUNNING") < text.rindex("Succeeded")
        final = status_json(slurm_cluster, run_id)
        assert final["job"]["state"] == "Succeeded"  # type: ignore[index]
        assert final["slurm"]["job_id"] == job_id  # type: ignore[index]
        lines = (Path(str(final["dir"])) / "events.jsonl").read_text().splitlines()
        kinds = [json.loads(line)["kind"] for line in lines]
        assert kinds.count("slurm") >= 2 and "state" in kinds  # one run: the pending job and its tasks
        nothing_left(slurm_cluster, run_id)
    finally:
        if up.poll() is None:
            up.kill()
            up.wait(timeout=30)
        kill_run_processes(run_id)


def test_detach_then_down_of_a_pending_job_cancels_it(tmp_path: Path, slurm_cluster: SlurmCluster,
                                                      holder: str) -> None:
    run_id = "it-submit-pending-down"
    up = cli("up", str(sleeper_profile(tmp_path, 60)), "--detach", "--run-id", run_id, env=slurm_cluster.env,
             timeout=90)
    assert up.returncode == 0, up.stderr
    shown_run, job_id = up.stdout.split()
    assert shown_run == run_id and job_state(slurm_cluster, job_id) == "PENDING"
    # the job carries its run: an sbatch whose answer is lost is found again by it
    said = subprocess.run(["squeue", "-h", "-j", job_id, "-o", "%k"], capture_output=True, text=True, timeout=30,
                          env=slurm_cluster.env)
    assert said.stdout.strip() == f"distlaunch-run:{run_id}", said
    attach = start_cli("attach", run_id, "--no-tui", log=tmp_path / "attach.log", env=slurm_cluster.env)
    try:
        wait_for(lambda: "PENDING (" in (tmp_path / "attach.log").read_text(), 30, "attach to show the pending job")
        down = cli("down", run_id, env=slurm_cluster.env, timeout=120)
        assert down.returncode == 0, down.stderr
        assert "cancelled before the run started" in down.stdout
        assert job_state(slurm_cluster, job_id) in ("CANCELLED", "")
        data = status_json(slurm_cluster, run_id)
        assert data["job"]["state"] == "Stopped" and data["supervision"] is None  # type: ignore[index]
        assert attach.wait(timeout=30) != 0  # the wait ended with the job, not with a timeout
        assert "Stopped" in (tmp_path / "attach.log").read_text()
    finally:
        if attach.poll() is None:
            attach.kill()
            attach.wait(timeout=30)
    subprocess.run(["scancel", holder], capture_output=True, timeout=30, env=slurm_cluster.env)
    nothing_left(slurm_cluster, run_id)


def test_down_from_the_login_node_ends_a_running_submitted_job(tmp_path: Path, slurm_cluster: SlurmCluster) -> None:
    run_id, log = "it-submit-run-down", tmp_path / "attach.log"
    up = cli("up", str(sleeper_profile(tmp_path, 300)), "--detach", "--run-id", run_id, env=slurm_cluster.env,
             timeout=90)
    assert up.returncode == 0, up.stderr
    job_id = up.stdout.split()[1]
    attach = start_cli("attach", run_id, "--no-tui", log=log, env=slurm_cluster.env)
    try:
        wait_for(lambda: "chief:0" in log.read_text() and "running" in log.read_text(), 120,
                 f"attach to show the running task ({log})", interval=0.5)
        assert status_json(slurm_cluster, run_id)["supervision"] in ("live", "supervised")
        started = time.monotonic()
        down = cli("down", run_id, env=slurm_cluster.env, timeout=240)
        assert down.returncode == 0, down.stderr + down.stdout
        assert time.monotonic() - started < 180
        assert job_state(slurm_cluster, job_id) in ("CANCELLED", "COMPLETED", "FAILED", "")  # ended
        assert status_json(slurm_cluster, run_id)["job"]["state"] == "Stopped"  # type: ignore[index]
        assert attach.wait(timeout=60) != 0 or "Stopped" in log.read_text()
        nothing_left(slurm_cluster, run_id)
    finally:
        if attach.poll() is None:
            attach.kill()
            attach.wait(timeout=30)
        subprocess.run(["scancel", job_id], capture_output=True, timeout=30, env=slurm_cluster.env)
        kill_run_processes(run_id)


def test_sbatch_refusals_are_one_line_and_leave_no_run(tmp_path: Path, slurm_cluster: SlurmCluster) -> None:
    bad = sleeper_profile(tmp_path, 1, extra="")
    bad.write_text(bad.read_text().replace("[slurm]\n", '[slurm]\npartition = "nosuch"\n'))
    refused = cli("up", str(bad), "--no-tui", "--run-id", "it-submit-bad", env=slurm_cluster.env, timeout=90)
    assert refused.returncode == 2, refused.stderr
    line, = refused.stderr.strip().splitlines()[-1:]
    assert "sbatch refused the job" in line and "partition" in line and "Traceback" not in refused.stderr
    assert not (Path(os.environ["DISTLAUNCH_HOME"]) / "runs" / "it-submit-bad").exists()
    no_sbatch = {**slurm_cluster.env, "PATH": str(Path(PYTHON).parent)}
    missing = cli("up", str(bad), "--no-tui", env=no_sbatch, timeout=60)
    assert missing.returncode == 2 and "sbatch is not on PATH" in missing.stderr, missing.stderr
    assert len(missing.stderr.strip().splitlines()) == 1
    # a value from the launcher's environment in what the batch script says: refused, nothing submitted
    secret = sleeper_profile(tmp_path, 1)
    secret.write_text(secret.read_text().replace("[slurm]\n", '[slurm]\nsbatch_args = ["--mail-user=${env:DL_TOK}"]\n'))
    kept = cli("up", str(secret), "--no-tui", "--run-id", "it-submit-secret",
               env={**slurm_cluster.env, "DL_TOK": "s3cr3t-77"}, timeout=60)
    assert kept.returncode == 2 and "would hold a secret" in kept.stderr and "s3cr3t-77" not in kept.stderr, \
        kept.stderr
    assert len(kept.stderr.strip().splitlines()) == 1 and queued(slurm_cluster) == []
    assert not (Path(os.environ["DISTLAUNCH_HOME"]) / "runs" / "it-submit-secret").exists()


def test_a_batch_job_whose_run_is_not_waiting_for_it_starts_nothing(tmp_path: Path,
                                                                    slurm_cluster: SlurmCluster) -> None:
    """The batch script's `up` only continues the run it was submitted for: a job queued by an sbatch
    whose answer was lost (the run dir gone since) must not start a run nobody watches."""
    profile = sleeper_profile(tmp_path, 1)
    run_dir = tmp_path / "gone-run"
    env = {**slurm_cluster.env, "DISTLAUNCH_AWAIT_SUBMITTED_S": "2"}  # the wait for a record that never comes
    done = subprocess.run(["salloc", "-N1", PYTHON, "-m", "launcher.cli", "up", str(profile), "--no-tui",
                           "--run-id", "it-submit-orphan", "--run-dir", str(run_dir), "--continue-submitted"],
                          capture_output=True, text=True, cwd=REPO, env=env, timeout=120)
    assert done.returncode == 2, done.stdout[-2000:] + done.stderr[-2000:]
    assert "is not waiting for Slurm job" in done.stderr and "nothing started" in done.stderr, done.stderr
    assert not (run_dir / "events.jsonl").exists() and pids_with_run_id("it-submit-orphan") == []
