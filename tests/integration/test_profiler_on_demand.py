"""autolog's profiler server listens only once a capture asks for it (issue 59, item 2): every
task used to start one by default, and any local user could ask it for a trace into a folder of
their choosing (the task made it and wrote there, as you). Here a real TensorFlow task trains with
autolog on: its recorded profiler port refuses connections until `distlaunch profile` asks, then
the capture is taken."""

from __future__ import annotations

import json
import re
import socket
from pathlib import Path

import pytest

from tests.integration.jobtools import REPO, cli, kill_run_processes, task_step, wait_for, write_profile

pytestmark = pytest.mark.slow

SCRIPT = "tests/data/steptime/no_optimizer.py"


def _listens(port: int) -> bool:
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=2):
            return True
    except OSError:
        return False


def test_the_profiler_server_listens_only_once_a_capture_asks(tmp_path: Path) -> None:
    run_id = "it-profiler-on-demand"
    profile = write_profile(tmp_path / "job.toml", f"""
name = "{run_id}"
strategy = "custom"
[defaults]
command = "{{python}} {SCRIPT}"
workdir = "{REPO}"
env = {{ TF_CPP_MIN_LOG_LEVEL = "2", SLOW_TASKS = "worker:0", SLEEP_MS = "20", STEPS = "100000" }}
restart = "never"
grace_seconds = 5
[hosts.local]
address = "localhost"
transport = "local"
[roles.worker]
count = 1
hosts = ["local"]
""")
    run_dir = tmp_path / "run"
    try:
        up = cli("up", str(profile), "--detach", "--run-dir", str(run_dir), "--run-id", run_id, timeout=240)
        assert up.returncode == 0, up.stdout[-2000:] + up.stderr[-2000:]

        # a batch every 20 ms (SLOW_TASKS): the one worker does not train flat out through the test
        wait_for(lambda: task_step(run_dir, "worker:0") >= 20, 180, "worker:0 training", interval=0.5)
        port = json.loads((run_dir / "state.json").read_text())["tasks"]["worker:0"]["profiler_port"]
        assert isinstance(port, int)
        assert not _listens(port), "the profiler server listens although no capture asked for it"
        result = cli("profile", run_id, "--seconds", "1", timeout=180)
        assert result.returncode == 0, result.stdout + result.stderr
        assert re.search(r"^worker:0: \d+ step\(s\) captured", result.stdout, re.MULTILINE), result.stdout
    finally:
        cli("down", run_id, timeout=120)
        kill_run_processes(run_id)
