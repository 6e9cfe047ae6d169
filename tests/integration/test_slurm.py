"""Jobs inside a real Slurm allocation (a private one-node cluster, tests/slurm.py): hosts from
SLURM_JOB_NODELIST, tasks started as `srun --overlap` steps (no SSH), nothing left after the job,
after `down`, or after the allocation ends; `down` where the allocation ended under it."""

from __future__ import annotations

import contextlib
import json
import os
import re
import shutil
import signal
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from launcher.transport.slurm import step_trouble
from tests.integration.jobtools import (
    PYTHON,
    REPO,
    cli,
    kill_run_processes,
    pids_with_run_id,
    read_events,
    wait_for,
    wait_for_event,
)
from tests.profiles import build_profile, ps_mnist_command, table
from tests.slurm import SlurmCluster

pytest_plugins = ["tests.slurm"]
pytestmark = [pytest.mark.slow]


def slurm_profile(tmp: Path, steps: int) -> Path:
    return build_profile(tmp / "slurm.toml", name="it-slurm", orphan_grace=30, command=ps_mnist_command(steps),
                         defaults={"python": PYTHON}, workdir=REPO, env={"TF_CPP_MIN_LOG_LEVEL": "2"}, grace=5,
                         hosts=(), roles={"ps": {}, "worker": 2, "chief": {}}, extra=table("slurm", {}))


def salloc_up(cluster: SlurmCluster, profile: Path, run_dir: Path, run_id: str,
              log: Path) -> subprocess.Popen[bytes]:
    """`salloc -N1 distlaunch up ...` in the background: the launcher runs inside the allocation."""
    return subprocess.Popen(["salloc", "-N1", PYTHON, "-m", "launcher.cli", "up", str(profile), "--no-tui",
                             "--run-dir", str(run_dir), "--run-id", run_id],
                            stdout=log.open("wb"), stderr=subprocess.STDOUT, cwd=REPO, env=cluster.env,
                            start_new_session=True)


@contextlib.contextmanager
def allocation(cluster: SlurmCluster) -> Iterator[str]:
    """An allocation of its own (`salloc --no-shell`): it outlives the launcher, so a `down` after
    the supervisor's exit always finds it running; cancelled at the end. Yields its job id."""
    granted = subprocess.run(["salloc", "-N1", "--no-shell"], capture_output=True, text=True, timeout=60,
                             env=cluster.env)
    found = re.search(r"Granted job allocation (\d+)", granted.stderr)
    assert granted.returncode == 0 and found, granted.stderr
    try:
        yield found.group(1)
    finally:
        subprocess.run(["scancel", found.group(1)], capture_output=True, timeout=60, env=cluster.env)


def up_in(cluster: SlurmCluster, job: str, profile: Path, run_dir: Path, run_id: str,
          log: Path) -> subprocess.Popen[bytes]:
    """`distlaunch up` in the background inside allocation ``job``, as in an sbatch script."""
    env = {**cluster.env, "SLURM_JOB_ID": job, "SLURM_JOB_NODELIST": cluster.node}
    return subprocess.Popen([PYTHON, "-m", "launcher.cli", "up", str(profile), "--no-tui", "--run-dir",
                             str(run_dir), "--run-id", run_id], stdout=log.open("wb"), stderr=subprocess.STDOUT,
                            cwd=REPO, env=env, start_new_session=True)


def stop_launcher(up: subprocess.Popen[bytes], run_dir: Path) -> None:
    """Last-resort cleanup: salloc, and the launcher it started (salloc gives its command a
    process group of its own, so killing salloc's group does not reach it)."""
    if up.poll() is None:
        os.killpg(up.pid, signal.SIGKILL)
        up.wait(timeout=30)
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            argv = (entry / "cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        if b"launcher.cli" in argv and str(run_dir).encode() in argv:
            with contextlib.suppress(ProcessLookupError):
                os.kill(int(entry.name), signal.SIGKILL)


def ancestors(pid: int) -> list[str]:
    names = []
    while pid > 1:
        stat = Path(f"/proc/{pid}/stat").read_text()
        names.append(stat[stat.index("(") + 1: stat.rindex(")")])
        pid = int(stat[stat.rindex(")") + 2:].split()[1])
    return names


def running_pids(run_dir: Path) -> dict[str, int]:
    return {e["task"]: e["pid"] for e in read_events(run_dir) if e["kind"] == "state" and e["state"] == "running"}


def wait_running(run_dir: Path, log: Path) -> None:
    wait_for_event(run_dir, lambda e: e["kind"] == "job" and e["state"] == "Running", 240,
                   f"the job to run ({log})")


def test_a_job_succeeds_inside_salloc_with_tasks_under_slurmstepd(tmp_path: Path,
                                                                  slurm_cluster: SlurmCluster) -> None:
    run_dir, run_id, log = tmp_path / "run", "it-slurm-ok", tmp_path / "up.log"
    up = salloc_up(slurm_cluster, slurm_profile(tmp_path, steps=200), run_dir, run_id, log)
    try:
        wait_running(run_dir, log)
        pids = running_pids(run_dir)
        assert set(pids) == {"ps:0", "worker:0", "worker:1", "chief:0"}
        for task, pid in pids.items():
            chain = ancestors(pid)
            assert "slurmstepd" in chain, f"{task}: {chain}"
            assert "sshd" not in chain
        assert up.wait(timeout=300) == 0, log.read_text()[-3000:]
        final = {e["task"]: e["state"] for e in read_events(run_dir) if e["kind"] == "state"}
        assert final == {"chief:0": "succeeded", "ps:0": "stopped", "worker:0": "stopped",
                         "worker:1": "stopped"}
        state = json.loads((run_dir / "state.json").read_text())
        assert {h["config"]["transport"] for h in state["hosts"].values()} == {"slurm"}
        assert pids_with_run_id(run_id) == []
        assert slurm_cluster.squeue() == []  # the allocation ended with the job
    finally:
        stop_launcher(up, run_dir)
        kill_run_processes(run_id)


def test_down_stops_every_step_of_the_run(tmp_path: Path, slurm_cluster: SlurmCluster) -> None:
    run_dir, run_id, log = tmp_path / "run", "it-slurm-down", tmp_path / "up.log"
    up = salloc_up(slurm_cluster, slurm_profile(tmp_path, steps=100000), run_dir, run_id, log)
    try:
        wait_running(run_dir, log)
        # from outside the allocation: the run's state names the job, srun --jobid reaches it
        status = cli("status", str(run_dir), env=slurm_cluster.env)
        assert status.returncode == 0 and "worker:1" in status.stdout, status.stdout + status.stderr
        wait_for_event(run_dir, lambda e: e["kind"] == "log" and e["task"] == "chief:0", 240,
                       "output from chief:0")
        logs = cli("logs", str(run_dir), "chief:0", env=slurm_cluster.env)
        assert logs.returncode == 0 and logs.stdout.strip(), logs.stderr
        down = cli("down", str(run_dir), timeout=180, env=slurm_cluster.env)
        assert down.returncode == 0, down.stdout + down.stderr
        assert pids_with_run_id(run_id) == []
        assert up.wait(timeout=120) is not None
        wait_for(lambda: slurm_cluster.squeue() == [], 60, "the allocation to end")
    finally:
        stop_launcher(up, run_dir)
        kill_run_processes(run_id)


def test_the_end_of_the_allocation_leaves_nothing(tmp_path: Path, slurm_cluster: SlurmCluster) -> None:
    run_dir, run_id, log = tmp_path / "run", "it-slurm-scancel", tmp_path / "up.log"
    up = salloc_up(slurm_cluster, slurm_profile(tmp_path, steps=100000), run_dir, run_id, log)
    try:
        wait_running(run_dir, log)
        jobs = slurm_cluster.squeue()
        assert len(jobs) == 1
        subprocess.run(["scancel", jobs[0].split()[0]], check=True, env=slurm_cluster.env, timeout=60)
        wait_for(lambda: pids_with_run_id(run_id) == [], 60, "every task to end with the allocation")
        try:
            code = up.wait(timeout=120)
        except subprocess.TimeoutExpired:
            raise AssertionError("launcher still running: " + log.read_text()[-3000:]) from None
        assert code != 0, log.read_text()[-2000:]
    finally:
        stop_launcher(up, run_dir)
        kill_run_processes(run_id)


def test_outside_an_allocation_check_says_so_in_one_line(tmp_path: Path, slurm_cluster: SlurmCluster) -> None:
    profile = slurm_profile(tmp_path, steps=10)
    offline = cli("check", "--no-remote", str(profile), env=slurm_cluster.env)
    assert offline.returncode == 0 and "not inside a Slurm allocation" in offline.stdout
    check = cli("check", str(profile), env=slurm_cluster.env)
    assert check.returncode == 2
    errors = [line for line in check.stderr.splitlines() if line.startswith("distlaunch: error")]
    assert len(errors) == 1 and "not inside a Slurm allocation" in errors[0] and "salloc" in errors[0]


def test_export_sbatch_runs_the_job_as_a_batch_job(tmp_path: Path, slurm_cluster: SlurmCluster) -> None:
    profile = slurm_profile(tmp_path, steps=20)
    script = tmp_path / "job.sbatch"
    export = cli("export", "sbatch", str(profile), "-o", str(script), env=slurm_cluster.env)
    assert export.returncode == 0, export.stderr
    text = script.read_text()
    assert "#SBATCH --nodes=1" in text and "#SBATCH --job-name=it-slurm" in text
    batch = subprocess.run(["sbatch", "--wait", "--chdir", str(tmp_path), str(script)], capture_output=True,
                           text=True, timeout=300, env=slurm_cluster.env)
    outputs = list(tmp_path.glob("distlaunch-it-slurm-*.out"))
    assert batch.returncode == 0, batch.stderr + "".join(p.read_text()[-2000:] for p in outputs)
    assert len(outputs) == 1 and "job Succeeded" in outputs[0].read_text()
    assert slurm_cluster.squeue() == []


def test_export_sbatch_needs_a_slurm_table(tmp_path: Path) -> None:
    profile = build_profile(tmp_path / "p.toml", name=None, command="{python} t.py", hosts=(), roles={"worker": {}})
    result = cli("export", "sbatch", str(profile))
    assert result.returncode == 2 and "has no [slurm] table" in result.stderr
    assert "Traceback" not in result.stderr


def test_a_killed_task_is_restarted_in_a_new_step(tmp_path: Path, slurm_cluster: SlurmCluster) -> None:
    # an allocation that outlives the launcher, so `down` always sweeps inside it (one that `up`
    # holds may end with the supervisor before or during that sweep: the next test makes it so)
    run_dir, run_id, log = tmp_path / "run", "it-slurm-restart", tmp_path / "up.log"
    with allocation(slurm_cluster) as job:
        up = up_in(slurm_cluster, job, slurm_profile(tmp_path, steps=100000), run_dir, run_id, log)
        try:
            wait_running(run_dir, log)
            victim = running_pids(run_dir)["worker:1"]
            os.kill(victim, signal.SIGKILL)  # a crash: exit 137, restarted under on-failure
            again = wait_for_event(run_dir, lambda e: e["kind"] == "state" and e["task"] == "worker:1"
                                   and e["state"] == "running" and e.get("restarts") == 1, 240,
                                   f"worker:1 to run again ({log})")
            assert again["pid"] != victim and "slurmstepd" in ancestors(again["pid"])
            down = cli("down", str(run_dir), timeout=180, env=slurm_cluster.env)
            said = down.stdout + down.stderr
            assert down.returncode == 0, said
            assert "stopped on 1 host(s); no process of the run is left" in down.stdout, said
            assert slurm_cluster.squeue() == [f"{job} RUNNING"]  # the sweep ran inside it
            assert pids_with_run_id(run_id) == []
        finally:
            stop_launcher(up, run_dir)
            kill_run_processes(run_id)


@pytest.mark.parametrize("srun_says", ["real", "revoked"])
def test_down_after_the_allocation_ended_says_nothing_can_be_left(tmp_path: Path, slurm_cluster: SlurmCluster,
                                                                  srun_says: str) -> None:
    """The allocation ends after `down` found it running and before its sweep's step: an `srun`
    first on down's PATH cancels the job, then runs the real srun ("real": slurmctld refuses the
    step) or answers as slurmd does to a step of a job it is ending ("revoked": CI's exit 168,
    "Job credential revoked"). Slurm then says the job ended, so down exits 0 and says why."""
    run_dir, run_id, log = tmp_path / "run", f"it-slurm-ended-{srun_says}", tmp_path / "up.log"
    with allocation(slurm_cluster) as job:
        up = up_in(slurm_cluster, job, slurm_profile(tmp_path, steps=100000), run_dir, run_id, log)
        try:
            wait_running(run_dir, log)
            real = shutil.which("srun", path=slurm_cluster.env.get("PATH"))
            then = (f'exec {real} "$@"' if srun_says == "real" else
                    "echo 'srun: error: Application launch failed: Job credential revoked' >&2; exit 168")
            wrapper = tmp_path / "bin" / "srun"
            wrapper.parent.mkdir()
            wrapper.write_text(f"#!/bin/sh\nscancel {job} >/dev/null 2>&1\n{then}\n")
            wrapper.chmod(0o755)
            env = {**slurm_cluster.env, "PATH": f"{wrapper.parent}:{slurm_cluster.env.get('PATH', '')}"}
            down = cli("down", str(run_dir), timeout=180, env=env)
            said = down.stdout + down.stderr
            assert down.returncode == 0, said
            assert f"host {slurm_cluster.node} (Slurm job {job}): the allocation ended (squeue: the job is " in said
            assert "so nothing of the run can be left there: Slurm" in said
            assert "stopped on 1 host(s) (1 of them in a Slurm allocation that ended" in down.stdout, said
            assert pids_with_run_id(run_id) == []
        finally:
            stop_launcher(up, run_dir)
            kill_run_processes(run_id)


def test_only_srun_and_slurmstepd_lines_say_a_step_failed() -> None:
    assert step_trouble("srun: error: vm: task 0: Exited with exit code 3\noops\n") is None
    assert step_trouble("no such process\n") is None
    revoked = "srun: error: Application launch failed: Job credential revoked"
    assert step_trouble(revoked + "\n") == revoked
    cancelled = ("slurmstepd-vm: error: *** STEP 1.0 ON vm CANCELLED AT 2026-11-26T06:44:56 ***\n"
                 "srun: error: vm: task 0: Terminated\n")
    assert step_trouble(cancelled) == "srun: error: vm: task 0: Terminated"
