"""The dashboard in a real terminal (tmux): the bell when the job ends, and NO_COLOR."""

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

from tests.integration.jobtools import REPO, kill_run_processes, wait_for

PROFILE = """
name = "bell"
[defaults]
command = "{{python}} -c 'import time; time.sleep(2)'"
[roles.worker]
count = 1
[notify]
bell = {bell}
"""

GREY_256 = set(range(232, 256)) | {0, 7, 8, 15, 16, 59, 102, 145, 188, 231}
BASIC_COLORS = set(range(31, 37)) | set(range(41, 47)) | set(range(91, 97)) | set(range(101, 107))


def _tmux(socket: str, *args: str) -> str:
    return subprocess.run(["tmux", "-L", socket, *args], capture_output=True, text=True, timeout=20).stdout


def colours(screen: str) -> tuple[set[str], set[str]]:
    """(grey, chromatic) colour codes in the SGR sequences of a captured screen."""
    grey: set[str] = set()
    chromatic: set[str] = set()
    for params in re.findall(r"\x1b\[([0-9;]*)m", screen):
        codes = [int(p) for p in params.split(";") if p]
        i = 0
        while i < len(codes):
            code = codes[i]
            if code in (38, 48) and i + 2 < len(codes) and codes[i + 1] == 5:
                (grey if codes[i + 2] in GREY_256 else chromatic).add(f"{code};5;{codes[i + 2]}")
                i += 3
            elif code in (38, 48) and i + 4 < len(codes) and codes[i + 1] == 2:
                r, g, b = codes[i + 2:i + 5]
                (grey if r == g == b else chromatic).add(f"{code};2;{r};{g};{b}")
                i += 5
            else:
                if code in BASIC_COLORS:
                    chromatic.add(str(code))
                i += 1
    return grey, chromatic


def run_dashboard_in_tmux(tmp_path: Path, *, bell: bool, env: str) -> tuple[bool, str]:
    """Run a short job's dashboard in a background tmux window until the job ends and `q` leaves it.

    Returns (whether the window rang the bell, the screen with its escape sequences at the job's end)."""
    if shutil.which("tmux") is None:
        if os.environ.get("DISTLAUNCH_REQUIRE_SSHD") == "1":
            pytest.fail("tmux is required here (apt-get install tmux)")
        pytest.skip("tmux not installed")
    profile = tmp_path / "p.toml"
    profile.write_text(PROFILE.format(bell="true" if bell else "false"), encoding="utf-8")
    socket, run_id = f"dl-{secrets.token_hex(4)}", f"bell-{secrets.token_hex(2)}"
    command = (f"cd {shlex.quote(str(REPO))} && env -u NO_COLOR {env} DISTLAUNCH_HOME={shlex.quote(str(tmp_path))} "
               f"{shlex.quote(sys.executable)} -m launcher.cli up {shlex.quote(str(profile))} --run-id {run_id}; "
               "echo EXIT=$?; sleep 300")
    # window 0 stays current: tmux flags a bell only in a window that is not
    _tmux(socket, "new-session", "-d", "-s", "t", "-x", "120", "-y", "36", "sleep 300")
    _tmux(socket, "new-window", "-d", "-t", "t", command)
    try:
        wait_for(lambda: "job Succeeded" in _tmux(socket, "capture-pane", "-p", "-t", "t:1"), 120,
                 "the header to show the job's end", interval=0.3)
        screen = _tmux(socket, "capture-pane", "-p", "-e", "-t", "t:1")
        _tmux(socket, "send-keys", "-t", "t:1", "q")
        wait_for(lambda: "EXIT=0" in _tmux(socket, "capture-pane", "-p", "-t", "t:1"), 60, "the CLI to exit 0")
        flags = _tmux(socket, "list-windows", "-t", "t", "-F", "#{window_index} #{window_bell_flag}")
        return "1 1" in flags.splitlines(), screen
    finally:
        _tmux(socket, "kill-server")
        kill_run_processes(run_id)


def test_bell_rings_when_the_job_ends_and_no_color_greys_the_dashboard(tmp_path: Path) -> None:
    rang, screen = run_dashboard_in_tmux(tmp_path, bell=True, env="NO_COLOR=1")
    assert rang
    grey, chromatic = colours(screen)
    assert grey and not chromatic, chromatic


def test_bell_false_keeps_quiet_and_colours_stay_without_no_color(tmp_path: Path) -> None:
    rang, screen = run_dashboard_in_tmux(tmp_path, bell=False, env="")
    assert not rang
    _, chromatic = colours(screen)
    assert chromatic  # the same check finds colour when NO_COLOR is not set
