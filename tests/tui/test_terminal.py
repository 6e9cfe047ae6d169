"""The dashboard in a real terminal: tmux runs it, keys go in with send-keys, the screen comes
back with capture-pane."""

from __future__ import annotations

import shlex
import shutil
import subprocess
import sys
import time
import uuid
from collections.abc import Callable
from pathlib import Path

import pytest

from launcher import events as ev
from tests.tui.tui_support import RUN, T0, recorded_job

pytestmark = pytest.mark.skipif(shutil.which("tmux") is None, reason="tmux is not installed")
ROOT = Path(__file__).resolve().parents[2]

DRIVER = """
import sys
from pathlib import Path
from tui.app import run_dashboard
from tui.replay import ReplaySource
result = run_dashboard(ReplaySource(Path(sys.argv[1]), speed=0), None, title="tmux-run",
                       strategy="parameter_server", hosts_total=2, live=False)
Path(sys.argv[2]).write_text(result.action)
"""


def wait_for(what: Callable[[], bool], timeout: float = 20.0) -> None:
    deadline = time.monotonic() + timeout
    while not what():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.1)


def test_replay_in_tmux_shows_the_job_and_quits_on_q(tmp_path: Path) -> None:
    events = [*recorded_job(steps=5), ev.job_event(RUN, ev.JOB_FAILED, reason="worker:1 failed", ts=T0 + 9)]
    run_file = tmp_path / "events.jsonl"
    run_file.write_text("".join(e.to_json() + "\n" for e in events), encoding="utf-8")
    driver = tmp_path / "driver.py"
    driver.write_text(DRIVER, encoding="utf-8")
    result = tmp_path / "result.txt"
    session = f"distlaunch-tui-{uuid.uuid4().hex[:8]}"
    command = " ".join(shlex.quote(part) for part in (sys.executable, str(driver), str(run_file), str(result)))
    subprocess.run(["tmux", "new-session", "-d", "-s", session, "-x", "100", "-y", "30",
                    "-c", str(ROOT), "-e", f"PYTHONPATH={ROOT}", "-e", "TERM=xterm-256color", command],
                   check=True, timeout=10)
    try:
        def screen() -> str:
            return subprocess.run(["tmux", "capture-pane", "-p", "-t", session], capture_output=True,
                                  text=True, timeout=10).stdout

        wait_for(lambda: "worker:1" in screen() and "Failed" in screen())
        text = screen()
        assert "tmux-run" in text and "failed" in text and "step 50" in text
        subprocess.run(["tmux", "send-keys", "-t", session, "p"], check=True, timeout=10)
        wait_for(lambda: "embedding" in screen())
        subprocess.run(["tmux", "send-keys", "-t", session, "q"], check=True, timeout=10)
        wait_for(result.exists)
        assert result.read_text() == "quit"
    finally:
        subprocess.run(["tmux", "kill-session", "-t", session], capture_output=True, timeout=10)
