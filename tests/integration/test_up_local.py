"""`distlaunch up` on this machine with real TensorFlow: success, teardown, orphans, bad ports."""

from __future__ import annotations

import json
import math
import os
import signal
import socket
from pathlib import Path

import pytest

from tests.integration.jobtools import (
    REPO,
    cli,
    describe_pids,
    kill_run_processes,
    local_ps_profile,
    pids_with_run_id,
    read_events,
    start_cli,
    supervisor_pid,
    wait_for,
    wait_for_event,
)

pytestmark = pytest.mark.slow


def test_shipped_local_profile_trains_and_leaves_nothing(tmp_path: Path) -> None:
    run_dir, run_id = tmp_path / "run", "it-shipped-local"
    try:
        result = cli("up", str(REPO / "cluster_profiles/local.toml"), "--no-tui",
                     "--run-dir", str(run_dir), "--run-id", run_id,
                     "--set", f"outputs={json.dumps(str(tmp_path / 'outputs'))}",
                     "--", "--steps", "300",  # the demo trains 45 s; 300 steps are enough here
                     timeout=300)
        assert result.returncode == 0, result.stdout[-2000:] + result.stderr[-2000:]
        events = read_events(run_dir)
        running = {e["task"] for e in events if e["kind"] == "state" and e["state"] == "running"}
        assert running == {"ps:0", "worker:0", "worker:1", "chief:0"}
        steps = [e["step"] for e in events if e["kind"] == "metric" and e["task"] == "chief:0"
                 and e["step"] is not None]
        losses = [e["loss"] for e in events if e["kind"] == "metric" and e["loss"] is not None]
        assert len(steps) >= 3 and steps == sorted(steps) and steps[-1] >= 300
        assert losses and all(math.isfinite(x) for x in losses)
        final = {e["task"]: e for e in events if e["kind"] == "state"}
        assert final["chief:0"]["state"] == "succeeded"
        assert all(final[t]["state"] == "stopped" for t in ("ps:0", "worker:0", "worker:1"))
        jobs = [e["state"] for e in events if e["kind"] == "job"]
        assert jobs[0] == "Created" and "Running" in jobs and jobs[-1] == "Succeeded"
        assert (run_dir / "state.json").exists() and (run_dir / "logs" / "chief-0.log").exists()
        assert list((tmp_path / "outputs" / "ckpt").glob("*.index"))  # the checkpoint went to {outputs}
        assert pids_with_run_id(run_id) == []
        # the progress lines name step, loss and steps/s
        assert "steps/s" in result.stdout and "job Succeeded" in result.stdout
    finally:
        kill_run_processes(run_id)


def test_killed_supervisor_leaves_no_task_after_orphan_grace(tmp_path: Path) -> None:
    run_dir, run_id = tmp_path / "run", "it-orphans"
    profile = local_ps_profile(tmp_path, steps=1_000_000, orphan_grace=3, ports=True)
    launcher = start_cli("up", str(profile), "--no-tui", "--run-dir", str(run_dir), "--run-id", run_id,
                         log=tmp_path / "up.log")
    try:
        wait_for_event(run_dir, lambda e: e["kind"] == "metric" and e["task"] == "chief:0", 180,
                       "the chief's first metric")
        assert len(pids_with_run_id(run_id)) >= 7  # the supervisor, 3 wrappers + 3 tasks, the agent
        os.kill(supervisor_pid(run_dir), signal.SIGKILL)  # the job's supervisor, not `up`, its client
        assert launcher.wait(timeout=10) == 137
        try:
            wait_for(lambda: not pids_with_run_id(run_id), 3 + 30, "every task to stop after the grace")
        except AssertionError as exc:
            agent_log = run_dir / "hosts" / "local" / "agent.log"
            tail = agent_log.read_text()[-3000:] if agent_log.exists() else "(no agent.log)"
            raise AssertionError(f"{exc}; left: {describe_pids(pids_with_run_id(run_id))}; agent.log: {tail}") from None
        stops = [e for e in read_events(run_dir / "hosts" / "local" / "tasks" / "chief-0")
                 if e["kind"] == "state" and e["state"] == "stopped"]
        assert stops and "launcher lost" in stops[-1]["reason"]
    finally:
        launcher.kill() if launcher.poll() is None else None
        kill_run_processes(run_id)


def test_busy_port_is_refused_by_check_and_up_before_anything_starts(tmp_path: Path) -> None:
    holder = socket.socket()
    holder.bind(("0.0.0.0", 0))
    holder.listen()
    busy = holder.getsockname()[1]
    try:
        profile = local_ps_profile(tmp_path, ports={"ps": busy})
        checked = cli("check", str(profile))
        assert checked.returncode == 2
        problems = [ln for ln in checked.stderr.splitlines() if "error" in ln]
        assert len(problems) == 1 and str(busy) in problems[0] and "ps:0" in problems[0]
        run_dir = tmp_path / "run"
        up = cli("up", str(profile), "--no-tui", "--run-dir", str(run_dir), "--run-id", "it-busy")
        assert up.returncode == 2, up.stderr
        assert "Traceback" not in up.stderr and str(busy) in up.stderr
        assert not [e for e in read_events(run_dir) if e["kind"] == "state"]
        assert pids_with_run_id("it-busy") == []
    finally:
        holder.close()
