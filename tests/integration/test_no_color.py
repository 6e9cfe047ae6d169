"""NO_COLOR: the headless printer colours job and task states on a terminal, and not with NO_COLOR set."""

from __future__ import annotations

import os
import pty
import subprocess
import time
from pathlib import Path

from tests.integration.jobtools import PYTHON, REPO, kill_run_processes
from tests.profiles import profile_toml

PROFILE = profile_toml(name="colors", command="{python} -c 'print(1)'", hosts=())


def up_in_a_terminal(tmp_path: Path, run_id: str, env: dict[str, str]) -> bytes:
    """`up --no-tui` with stdout on a real pseudo-terminal; everything it wrote there."""
    (tmp_path / "p.toml").write_text(PROFILE, encoding="utf-8")
    primary, secondary = pty.openpty()
    proc = subprocess.Popen([PYTHON, "-m", "launcher.cli", "up", str(tmp_path / "p.toml"), "--no-tui",
                             "--run-dir", str(tmp_path / run_id), "--run-id", run_id],
                            stdin=subprocess.DEVNULL, stdout=secondary, stderr=subprocess.DEVNULL, cwd=REPO,
                            env={**os.environ, "TERM": "xterm-256color", **env})
    os.close(secondary)
    out = b""
    deadline = time.monotonic() + 120
    try:
        while time.monotonic() < deadline:
            try:
                chunk = os.read(primary, 65536)
            except OSError:  # EIO: the child closed the terminal
                break
            if not chunk:
                break
            out += chunk
        assert proc.wait(timeout=60) == 0, out.decode(errors="replace")
    finally:
        os.close(primary)
        if proc.poll() is None:
            proc.kill()
        kill_run_processes(run_id)
    return out


def test_states_are_coloured_on_a_terminal(tmp_path: Path) -> None:
    out = up_in_a_terminal(tmp_path, "color-on", {"NO_COLOR": ""})  # empty NO_COLOR does not count
    assert b"job \x1b[1;32mSucceeded\x1b[0m" in out
    assert b"\x1b[32msucceeded\x1b[0m" in out


def test_no_color_turns_every_colour_off(tmp_path: Path) -> None:
    out = up_in_a_terminal(tmp_path, "color-off", {"NO_COLOR": "1"})
    assert b"job Succeeded" in out
    assert b"\x1b[" not in out
