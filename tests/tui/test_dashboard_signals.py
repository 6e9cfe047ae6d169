"""Signals to `distlaunch up` while its dashboard runs in a real terminal (tmux): SIGTERM tears the
job down and the app quits; the terminal going away (SIGHUP) ends the dashboard only, and the job
stays supervised by its own process."""

from __future__ import annotations

import json
import os
import secrets
import shlex
import shutil
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from tests.integration.jobtools import (
    REPO,
    cli,
    kill_run_processes,
    pids_with_run_id,
    read_events,
    wait_for,
    wait_for_event,
)
from tests.integration.test_signals import actions, sleeper_profile

pytestmark = pytest.mark.slow


def _tmux(socket: str, *args: str) -> str:
    return subprocess.run(["tmux", "-L", socket, *args], capture_output=True, text=True, timeout=20).stdout


def _dashboard_in_tmux(tmp: Path, run_id: str) -> tuple[str, Path, int]:
    """`up` with its dashboard in a fresh tmux server; returns its socket, the run dir and the
    pid of `up` (the supervisor's parent: it forked it) once the job is Running."""
    if shutil.which("tmux") is None:
        if os.environ.get("DISTLAUNCH_REQUIRE_SSHD") == "1":
            pytest.fail("tmux is required here (apt-get install tmux)")
        pytest.skip("tmux not installed")
    socket, run_dir = f"dl-{secrets.token_hex(4)}", tmp / "run"
    profile = sleeper_profile(tmp, "tuisig")
    command = (f"cd {shlex.quote(str(REPO))} && DISTLAUNCH_HOME={shlex.quote(str(tmp / 'home'))} "
               f"{shlex.quote(sys.executable)} -m launcher.cli up {shlex.quote(str(profile))} --run-id {run_id} "
               f"--run-dir {shlex.quote(str(run_dir))}; echo EXIT=$?; sleep 300")
    _tmux(socket, "new-session", "-d", "-s", "sig", "-x", "120", "-y", "36", command)
    wait_for_event(run_dir, lambda e: e["kind"] == "job" and e["state"] == "Running", 120, "the job to run")
    wait_for(lambda: "worker:1" in _tmux(socket, "capture-pane", "-p", "-t", "sig"), 60, "the dashboard")
    state = json.loads((run_dir / "state.json").read_text())
    stat = Path(f"/proc/{state['supervisor_pid']}/stat").read_text()
    return socket, run_dir, int(stat[stat.rindex(")") + 2:].split()[1])


def test_sigterm_with_the_dashboard_tears_down_and_quits(tmp_path: Path) -> None:
    run_id = f"tui-term-{secrets.token_hex(2)}"
    socket, run_dir, launcher = _dashboard_in_tmux(tmp_path, run_id)
    try:
        os.kill(launcher, signal.SIGTERM)
        wait_for(lambda: "EXIT=" in _tmux(socket, "capture-pane", "-p", "-t", "sig"), 60, "up to end")
        screen = _tmux(socket, "capture-pane", "-p", "-t", "sig")
        assert "EXIT=143" in screen and "Traceback" not in screen, screen
        job = [e for e in read_events(run_dir) if e["kind"] == "job"][-1]
        assert (job["state"], job["reason"]) == ("Stopped", "stopped by SIGTERM")
        assert actions(run_dir) == [("teardown", "SIGTERM")]
        assert pids_with_run_id(run_id) == []
    finally:
        _tmux(socket, "kill-server")
        kill_run_processes(run_id)


def test_the_terminal_going_away_leaves_the_job_supervised(tmp_path: Path) -> None:
    run_id = f"tui-hup-{secrets.token_hex(2)}"
    socket, run_dir, client = _dashboard_in_tmux(tmp_path, run_id)
    try:
        supervisor = json.loads((run_dir / "state.json").read_text())["supervisor_pid"]
        _tmux(socket, "kill-server")  # the terminal is gone: SIGHUP to `up`, whose dashboard it was
        wait_for(lambda: not os.path.exists(f"/proc/{client}"), 60, "up to exit")
        assert actions(run_dir) == []  # nothing was asked of the job
        wait_for(lambda: json.loads((run_dir / "state.json").read_text()).get("clients") == 0, 30,
                 "the supervisor to see its client go")
        state = json.loads((run_dir / "state.json").read_text())
        assert state["outcome"] is None and os.path.exists(f"/proc/{supervisor}")
        last = {e["task"]: e["state"] for e in read_events(run_dir) if e["kind"] == "state"}
        assert last == {"worker:0": "running", "worker:1": "running"}
        assert len(pids_with_run_id(run_id)) >= 4  # the supervisor, the host agent and both tasks go on
        status = cli("status", str(run_dir), timeout=60)
        assert "supervised: no client" in status.stdout.splitlines()[0], status.stdout
        log = tmp_path / "home" / "distlaunch.log"
        assert not log.exists() or "Traceback" not in log.read_text()
        down = cli("down", str(run_dir), timeout=120)
        assert down.returncode == 0, down.stdout + down.stderr
        wait_for(lambda: not pids_with_run_id(run_id), 30, "no process of the run to be left")
    finally:
        _tmux(socket, "kill-server")
        kill_run_processes(run_id)
