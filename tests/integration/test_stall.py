"""Stalled tasks: marked within stall_seconds + 5 s, shown in --no-tui and status, and with
on_stall = "restart" recovered through the normal restart machinery. Plain Python tasks that
report steps with `launcher.report`: no TensorFlow needed to hang."""

from __future__ import annotations

import json
import signal
import time
from pathlib import Path
from typing import Any

from launcher.telemetry.steprate import RATE_WINDOW_S
from tests.integration.jobtools import cli, kill_run_processes, read_events, start_cli, wait_for, wait_for_event
from tests.profiles import build_profile

STALLING = """
import os, sys, time
from launcher import report
report.configure(min_interval=0)
marker = os.path.join(os.getcwd(), "stalled-once")
stall = not os.path.exists(marker) or os.environ.get("ALWAYS_STALL")
for step in range(1, 6):
    report.report(step=step, loss=1.0 / step)
    time.sleep(0.1)
if stall:
    open(marker, "w").close()
    print("hanging now", flush=True)
    time.sleep(600)
print("done", flush=True)
"""


def profile(tmp_path: Path, on_stall: str, defaults: dict[str, Any] | None = None, script: str = STALLING) -> Path:
    (tmp_path / "stall.py").write_text(script)
    return build_profile(tmp_path / "job.toml", name="stall", strategy="custom", command="{python} stall.py",
                         workdir=tmp_path, defaults={"stall_seconds": 3, "on_stall": on_stall, **(defaults or {})},
                         grace=2, role_hosts=False)


def test_a_task_that_stops_advancing_is_marked_stalled_in_time_and_shown(tmp_path: Path) -> None:
    run_dir, run_id = tmp_path / "run", "it-stall-warn"
    log = tmp_path / "up.log"
    launcher = start_cli("up", str(profile(tmp_path, "warn")), "--no-tui", "--run-dir", str(run_dir),
                         "--run-id", run_id, log=log)
    try:
        stalled = wait_for_event(run_dir, lambda e: e["kind"] == "condition" and e.get("condition") == "stalled",
                                 60, "a stalled condition")
        assert stalled["task"] == "worker:0" and stalled["active"] is True
        assert "step 5" in stalled["reason"]
        last_metric = max(e["ts"] for e in read_events(run_dir) if e["kind"] == "metric")
        assert stalled["ts"] - last_metric <= 3 + 5, stalled["ts"] - last_metric
        status = cli("status", str(run_dir), timeout=60)
        assert status.returncode == 0, status.stderr
        assert "worker:0 stalled: step 5 has not advanced" in status.stdout, status.stdout
        summary = json.loads(cli("status", str(run_dir), "--json", timeout=60).stdout)
        assert "stalled" in summary["tasks"]["worker:0"]["conditions"]
        wait_for(lambda: "worker:0     stalled: step 5" in log.read_text(), 30, "the --no-tui stall line")
        # warn only: the task keeps running, nothing is restarted
        states = [e["state"] for e in read_events(run_dir) if e["kind"] == "state"]
        assert "restarting" not in states
    finally:
        with_down = cli("down", str(run_dir), timeout=120)
        assert with_down.returncode == 0, with_down.stderr
        if launcher.poll() is None:
            launcher.send_signal(signal.SIGINT)
        launcher.wait(60)
        kill_run_processes(run_id)


def test_on_stall_restart_recovers_the_job(tmp_path: Path) -> None:
    run_dir, run_id = tmp_path / "run", "it-stall-restart"
    try:
        result = cli("up", str(profile(tmp_path, "restart")), "--no-tui", "--run-dir", str(run_dir),
                     "--run-id", run_id, timeout=180)
        assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-2000:]
        events = read_events(run_dir)
        restarting = [e for e in events if e["kind"] == "state" and e["state"] == "restarting"]
        assert restarting and "stall" in restarting[0]["reason"], restarting
        assert [e["state"] for e in events if e["kind"] == "job"][-1] == "Succeeded"
        assert "stalled" in result.stdout
    finally:
        kill_run_processes(run_id)


def test_a_task_that_keeps_stalling_fails_the_job_after_max_restarts(tmp_path: Path) -> None:
    run_dir, run_id = tmp_path / "run", "it-stall-max"
    try:
        result = cli("up", str(profile(tmp_path, "restart", {"max_restarts": 1, "env": {"ALWAYS_STALL": "1"}})),
                     "--no-tui", "--run-dir", str(run_dir), "--run-id", run_id, timeout=180)
        assert result.returncode != 0
        job = [e for e in read_events(run_dir) if e["kind"] == "job"][-1]
        assert job["state"] == "Failed" and "stalled" in job["reason"] and "max_restarts = 1" in job["reason"], job
    finally:
        kill_run_processes(run_id)


STEPPING = """
import os, sys, time
step = 0
while not os.path.exists("hang"):
    step += 1
    print(f"step {step} loss {1.0 / step:.4f}", flush=True)
    time.sleep(0.1)
print("hanging now", flush=True)
time.sleep(600)
"""


def test_status_json_rate_drops_to_zero_once_the_step_stops(tmp_path: Path) -> None:
    """`status --json` reads a live run's steps/s over a window ending now: > 0 while `step N loss X`
    lines come, 0 within the window after they stopped (the task still runs, hung)."""
    metrics = "[metrics]\nstep = 'step (\\d+)'\nloss = 'loss ([-+0-9.eE]+)'"  # after every other table
    job = profile(tmp_path, "warn", script=STEPPING)
    job.write_text(job.read_text() + metrics)
    run_dir, run_id = tmp_path / "run", "it-rate-hang"
    launcher = start_cli("up", str(job), "--no-tui", "--run-dir", str(run_dir), "--run-id", run_id,
                         log=tmp_path / "up.log")

    def rate() -> float | None:
        status = cli("status", str(run_dir), "--json", timeout=60)
        assert status.returncode == 0, status.stderr
        value: float | None = json.loads(status.stdout)["tasks"]["worker:0"]["steps_per_s"]
        return value

    try:
        wait_for_event(run_dir, lambda e: e["kind"] == "metric" and (e.get("step") or 0) >= 10, 60, "step 10")
        before = rate()
        assert before is not None and before > 0, before
        (tmp_path / "hang").touch()
        wait_for_event(run_dir, lambda e: e["kind"] == "log" and e.get("line") == "hanging now", 30, "the hang")
        last_metric = max(e["ts"] for e in read_events(run_dir) if e["kind"] == "metric")
        wait_for(lambda: rate() in (0.0, None), RATE_WINDOW_S + 20, "steps/s 0 after the hang", interval=1.0)
        assert time.time() - last_metric <= RATE_WINDOW_S + 10  # within the window (and a slow status)
        assert rate() == 0.0  # the task still runs: its rate is known, and nil
        states = [e["state"] for e in read_events(run_dir) if e["kind"] == "state"]
        assert states[-1] == "running"
    finally:
        cli("down", str(run_dir), timeout=120)
        if launcher.poll() is None:
            launcher.send_signal(signal.SIGINT)
        launcher.wait(60)
        kill_run_processes(run_id)
