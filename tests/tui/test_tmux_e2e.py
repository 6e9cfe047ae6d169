"""End to end in a real terminal: `distlaunch up cluster_profiles/local.toml` inside tmux."""

from __future__ import annotations

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

pytestmark = pytest.mark.slow


def _tmux(socket: str, *args: str) -> str:
    return subprocess.run(["tmux", "-L", socket, *args], capture_output=True, text=True, timeout=20).stdout


def _chief_step(screen: str) -> int | None:
    for line in screen.splitlines():
        cells = line.split()
        if cells[:1] == ["chief:0"] and len(cells) > 5 and cells[5].isdigit():
            return int(cells[5])
    return None


def test_dashboard_in_tmux_shows_rising_steps_and_leaves_nothing(tmp_path: Path) -> None:
    if shutil.which("tmux") is None:
        if os.environ.get("DISTLAUNCH_REQUIRE_SSHD") == "1":
            pytest.fail("tmux is required here (apt-get install tmux)")
        pytest.skip("tmux not installed")
    socket, run_id = f"dl-{secrets.token_hex(4)}", f"it-tmux-{secrets.token_hex(2)}"
    command = (f"cd {shlex.quote(str(REPO))} && DISTLAUNCH_HOME={shlex.quote(str(tmp_path))} "
               f"{shlex.quote(sys.executable)} -m launcher.cli up cluster_profiles/local.toml --run-id {run_id}; "
               "echo EXIT=$?; sleep 300")
    _tmux(socket, "new-session", "-d", "-s", "e2e", "-x", "120", "-y", "36", command)
    try:
        steps: list[int] = []

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
        assert "EXIT=0" in _tmux(socket, "capture-pane", "-p", "-t", "e2e")
        assert pids_with_run_id(run_id) == []
    finally:
        _tmux(socket, "kill-server")
        kill_run_processes(run_id)
