"""Roles on their own partitions: `distlaunch up` submits a heterogeneous Slurm job (ps in partition
cpu, the chief and a worker in partition debug) to a real two-node cluster (tests/slurm.py, nodes
n1 and n2 on this machine), each role's tasks run as `srun --het-group` steps on their component's
node, TF_CONFIG names addresses that resolve (Slurm's NodeAddr), the job succeeds, and `down` from
the login node ends a running one and leaves nothing."""

from __future__ import annotations

import json
import os
import shlex
import subprocess
from pathlib import Path
from typing import Any

import pytest

from tests.integration.jobtools import PYTHON, REPO, cli, kill_run_processes, pids_with_run_id, start_cli, wait_for
from tests.profiles import build_profile, ps_mnist_command, table
from tests.slurm import SlurmCluster

pytest_plugins = ["tests.slurm"]
pytestmark = [pytest.mark.slow]


def het_profile(tmp: Path, name: str, steps: int) -> Path:
    return build_profile(tmp / f"{name}.toml", name=name, orphan_grace=30, command=ps_mnist_command(steps),
                         defaults={"python": PYTHON}, workdir=REPO, env={"TF_CPP_MIN_LOG_LEVEL": "2"}, grace=5,
                         hosts=(), roles={"ps": {"slurm": {"partition": "cpu"}}, "worker": 1, "chief": {}},
                         extra=table("slurm", {"partition": "debug"}))


def status_json(cluster: SlurmCluster, run: str) -> dict[str, Any] | None:
    done = cli("status", run, "--json", env=cluster.env, timeout=60)
    if done.returncode != 0:
        return None
    data: dict[str, Any] = json.loads(done.stdout)
    return data


def running_hosts(cluster: SlurmCluster, run: str) -> dict[str, dict[str, str]] | None:
    """task -> the host and address of its running incarnation, once every task runs."""
    data = status_json(cluster, run)
    if data is None or data["job"]["state"] != "Running":
        return None
    events = [json.loads(line) for line in (Path(data["dir"]) / "events.jsonl").read_text().splitlines()]
    running = {e["task"]: e for e in events if e["kind"] == "state" and e["state"] == "running"}
    if set(running) != {"ps:0", "worker:0", "chief:0"}:
        return None
    return {task: {"host": e["host"], "pid": e["pid"]} for task, e in running.items()}


def slurm_node_of(pid: int) -> str:
    """The Slurm node a task's process runs in, as its step's environment says (the nodes of the
    test cluster are one machine: only Slurm tells them apart)."""
    env = dict(item.split(b"=", 1) for item in Path(f"/proc/{pid}/environ").read_bytes().split(b"\0") if b"=" in item)
    return f"{env.get(b'SLURMD_NODENAME', b'').decode()} {env.get(b'SLURM_JOB_PARTITION', b'').decode()}"


def components(cluster: SlurmCluster) -> list[str]:
    """squeue's lines for every component: ``ID+K STATE PARTITION NODES``."""
    done = subprocess.run(["squeue", "-h", "-o", "%i %T %P %N"], capture_output=True, text=True, timeout=30,
                          env=cluster.env)
    return sorted(done.stdout.split("\n")[:-1])


def nothing_left(cluster: SlurmCluster, run_id: str) -> None:
    wait_for(lambda: [c for c in components(cluster) if "COMPLET" not in c] == [], 90, "squeue to show no job")
    wait_for(lambda: pids_with_run_id(run_id) == [], 30, "no process of the run")


def test_each_role_runs_in_its_own_component_and_the_job_succeeds(tmp_path: Path,
                                                                 two_partition_cluster: SlurmCluster) -> None:
    cluster, run_id, log = two_partition_cluster, "it-het-ok", tmp_path / "up.log"
    profile = het_profile(tmp_path, "it-het", steps=300)
    script = cli("export", "sbatch", str(profile), env=cluster.env, timeout=60)
    assert script.returncode == 0 and "#SBATCH hetjob" in script.stdout, script
    up = start_cli("up", str(profile), "--no-tui", "--run-id", run_id, log=log, env=cluster.env)
    try:
        placed = wait_for(lambda: running_hosts(cluster, run_id), 240, f"every task to run ({log})", interval=1.0)
        assert placed["ps:0"]["host"] == "n2", placed
        assert placed["worker:0"]["host"] == placed["chief:0"]["host"] == "n1", placed
        # and they really run there: each task in a step of its own component
        assert slurm_node_of(placed["ps:0"]["pid"]) == "n2 cpu"
        assert slurm_node_of(placed["worker:0"]["pid"]) == slurm_node_of(placed["chief:0"]["pid"]) == "n1 debug"
        lines = components(cluster)
        assert len(lines) == 2 and lines[0].endswith("debug n1") and lines[1].endswith("cpu n2"), lines
        assert lines[0].split()[0].endswith("+0") and lines[1].split()[0].endswith("+1"), lines
        assert up.wait(timeout=300) == 0, log.read_text()[-3000:]
        data = status_json(cluster, run_id)
        assert data is not None and data["job"]["state"] == "Succeeded", data
        events = [json.loads(line) for line in (Path(data["dir"]) / "events.jsonl").read_text().splitlines()]
        steps = [e.get("step") for e in events if e["kind"] == "metric" and e.get("task") == "chief:0"]
        assert steps and max(s for s in steps if s is not None) >= 280, steps[-5:]
        nothing_left(cluster, run_id)
    finally:
        if up.poll() is None:
            up.kill()
            up.wait(timeout=30)
        kill_run_processes(run_id)


def test_down_from_the_login_node_ends_a_running_heterogeneous_job(tmp_path: Path,
                                                                   two_partition_cluster: SlurmCluster) -> None:
    cluster, run_id = two_partition_cluster, "it-het-down"
    up = cli("up", str(het_profile(tmp_path, "it-het-down", steps=1_000_000)), "--detach", "--run-id", run_id,
             env=cluster.env, timeout=90)
    assert up.returncode == 0, up.stderr
    try:
        wait_for(lambda: running_hosts(cluster, run_id), 240, "every task to run", interval=1.0)
        down = cli("down", run_id, env=cluster.env, timeout=180)
        assert down.returncode == 0, down.stderr
        data = status_json(cluster, run_id)
        assert data is not None and data["job"]["state"] == "Stopped", data
        nothing_left(cluster, run_id)
    finally:
        kill_run_processes(run_id)


def attach_steps(run_id: str) -> list[int]:
    """Processes running `attach RUN` under slurmstepd: a client's relay through a step of the job."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            argv = (entry / "cmdline").read_bytes().split(b"\0")
            parent = int((entry / "stat").read_text().rsplit(")", 1)[1].split()[1])
            parent_name = Path(f"/proc/{parent}/comm").read_text().strip()
        except (OSError, ValueError, IndexError):
            continue
        if b"attach" in argv and run_id.encode() in argv and parent_name == "slurmstepd":
            found.append(int(entry.name))
    return found


def test_attach_from_another_machine_follows_the_supervisor_through_a_step(
        tmp_path: Path, two_partition_cluster: SlurmCluster) -> None:
    """The login node is another machine here: another hostname (a UTS namespace) and no view of the
    supervisor's control socket (a tmpfs over the control dir in a mount namespace). `attach`
    then follows the run through `srun --overlap --het-group=0` on the batch host, Slurm's n1."""
    cluster, run_id = two_partition_cluster, "it-het-relay"
    up = cli("up", str(het_profile(tmp_path, "it-het-relay", steps=1500)), "--detach", "--run-id", run_id,
             env=cluster.env, timeout=90)
    assert up.returncode == 0, up.stderr
    log = tmp_path / "attach.log"
    try:
        wait_for(lambda: running_hosts(cluster, run_id), 240, "every task to run", interval=1.0)
        control = Path(os.environ["DISTLAUNCH_HOME"]) / "control"
        assert control.is_dir()
        script = (f"hostname login-elsewhere && mount -t tmpfs none {shlex.quote(str(control))} && "
                  f"exec {shlex.quote(PYTHON)} -m launcher.cli attach {run_id} --no-tui")
        attach = subprocess.Popen(["unshare", "--uts", "--mount", "sh", "-c", script], cwd=REPO,
                                  env={**os.environ, **cluster.env}, stdout=log.open("wb"), stderr=subprocess.STDOUT)
        try:
            wait_for(lambda: attach_steps(run_id), 60, f"attach to run in a step of the job ({log})", interval=0.5)
            assert attach.wait(timeout=300) == 0, log.read_text()[-3000:]
        finally:
            if attach.poll() is None:
                attach.kill()
                attach.wait(timeout=30)
        assert "Succeeded" in log.read_text(), log.read_text()[-3000:]
        nothing_left(cluster, run_id)
    finally:
        kill_run_processes(run_id)
