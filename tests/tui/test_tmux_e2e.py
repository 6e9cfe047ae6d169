"""End to end in a real terminal: `distlaunch up cluster_profiles/local.toml` inside tmux, with the
task filter (`/`), the hosts view (`h`) and the timeline (`e`) driven while the job runs."""

from __future__ import annotations

import json
import os
import re
import secrets
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.integration.jobtools import REPO, kill_run_processes, pids_with_run_id, wait_for
from tui.task_table import COLUMN_INDEX, COLUMNS

pytestmark = pytest.mark.slow


def _tmux(socket: str, *args: str) -> str:
    return subprocess.run(["tmux", "-L", socket, *args], capture_output=True, text=True, timeout=20).stdout


STEP_START = sum(column.width for column in COLUMNS[:COLUMN_INDEX["step"]])
STEP_END = STEP_START + COLUMNS[COLUMN_INDEX["step"]].width
TASK_ROW = re.compile(r"^ ((?:chief|ps|worker|evaluator):\d+) ")


def _chief_step(screen: str) -> int | None:
    for line in screen.splitlines():
        if line.startswith(" chief:0 "):  # each cell starts with a one-cell gap
            cell = line[STEP_START:STEP_END].strip()
            return int(cell) if cell.isdigit() else None
    return None


def _rows(screen: str) -> list[str]:
    """The task ids of the table's rows on screen, top to bottom."""
    return [m.group(1) for m in map(TASK_ROW.match, screen.splitlines()) if m]


def test_dashboard_in_tmux_shows_rising_steps_and_leaves_nothing(tmp_path: Path) -> None:
    if shutil.which("tmux") is None:
        if os.environ.get("DISTLAUNCH_REQUIRE_SSHD") == "1":
            pytest.fail("tmux is required here (apt-get install tmux)")
        pytest.skip("tmux not installed")
    socket, run_id = f"dl-{secrets.token_hex(4)}", f"it-tmux-{secrets.token_hex(2)}"
    command = (f"cd {shlex.quote(str(REPO))} && DISTLAUNCH_HOME={shlex.quote(str(tmp_path))} "
               f"{shlex.quote(sys.executable)} -m launcher.cli up cluster_profiles/local.toml --run-id {run_id} "
               # a fresh outputs folder: the job's own would resume at step 300 from an earlier run
               f"--set outputs={shlex.quote(json.dumps(str(tmp_path / 'outputs')))} "
               "-- --steps 300; "  # 300 steps, not the demo's 45 s
               "echo EXIT=$?; sleep 300")
    _tmux(socket, "new-session", "-d", "-s", "e2e", "-x", "120", "-y", "36", command)
    def screen() -> str:
        return _tmux(socket, "capture-pane", "-p", "-t", "e2e")

    def press(*keys: str) -> None:
        _tmux(socket, "send-keys", "-t", "e2e", *keys)

    try:
        steps: list[int] = []
        wait_for(lambda: _chief_step(screen()) is not None, 240, "the chief's first step")
        # `/` filters the rows as the user types; escape brings them all back
        press("/")
        wait_for(lambda: "filter tasks by id" in screen(), 30, "the filter input")
        press("-l", "ps")
        wait_for(lambda: _rows(screen()) == ["ps:0"], 30, "the filter to leave only ps:0")
        press("Escape")
        wait_for(lambda: _rows(screen()) == ["chief:0", "ps:0", "worker:0", "worker:1"], 30,
                 "every row back after escape")
        # `h`: the hosts view lists the one host with its tasks; `h` again goes back
        press("h")
        wait_for(lambda: re.search(r"local\s+\d/4 tasks running", screen()) and "tasks' CPU" in screen(), 30,
                 "the hosts view")
        assert "no GPU" in screen()
        press("h")
        # `e`: the timeline shows the chief starting, newest entries first
        press("e")
        wait_for(lambda: re.search(r"chief:0\s+state\s+running on local, pid \d+", screen()), 30, "the timeline")
        lines = screen().splitlines()
        running = next(i for i, line in enumerate(lines) if re.search(r"chief:0\s+state\s+running", line))
        starting = next(i for i, line in enumerate(lines) if re.search(r"chief:0\s+state\s+starting", line))
        assert running < starting, "newest first"
        press("e")
        wait_for(lambda: _chief_step(screen()) is not None, 30, "the task table back")

        def screen_until_done() -> bool:
            screen = _tmux(socket, "capture-pane", "-p", "-t", "e2e")
            step = _chief_step(screen)
            if step is not None and (not steps or step != steps[-1]):
                steps.append(step)
            return "job Succeeded" in screen or "job Failed" in screen

        wait_for(screen_until_done, 240, "the header to show the job's end", interval=0.5)
        screen = _tmux(socket, "capture-pane", "-p", "-t", "e2e")
        assert "job Succeeded" in screen, screen
        assert steps and steps[-1] >= 300, f"step column never reached 300: {steps}"
        wait_for(lambda: re.search(r"ps:0\s+local\s+stopped", _tmux(socket, "capture-pane", "-p", "-t", "e2e")),
                 60, "the ps row to show stopped")
        _tmux(socket, "send-keys", "-t", "e2e", "q")
        wait_for(lambda: "EXIT=" in _tmux(socket, "capture-pane", "-p", "-t", "e2e"), 60, "the CLI to exit")
        left = _tmux(socket, "capture-pane", "-p", "-J", "-t", "e2e")
        assert "EXIT=0" in left
        # the screen gone, one line says what --no-tui would have ended with (issue 56)
        assert re.search(rf"run {run_id}: job Succeeded: chief:0 exited 0 \(step 3\d\d, loss [\d.e+-]+\); "
                         rf"`distlaunch status {run_id}` for more", left), left
        assert pids_with_run_id(run_id) == []
    finally:
        _tmux(socket, "kill-server")
        kill_run_processes(run_id)
