"""A restart that was scheduled when the run's supervisor died is carried out by the supervisor
that `attach` starts to adopt the run."""

from __future__ import annotations

import json
import os
import signal
import time
from pathlib import Path
from typing import Any

from tests.integration.jobtools import cli, kill_run_processes, read_events, start_cli, wait_for
from tests.profiles import build_profile


def _state(run_dir: Path) -> dict[str, Any]:
    try:
        data: dict[str, Any] = json.loads((run_dir / "state.json").read_text())
    except (OSError, ValueError):
        return {}
    return data


def _starts(run_dir: Path) -> int:
    return sum(1 for e in read_events(run_dir)
               if e["kind"] == "state" and e["task"] == "worker:0" and e["state"] == "starting")


def test_a_pending_restart_survives_a_killed_supervisor_and_attach(tmp_path: Path) -> None:
    profile = build_profile(tmp_path / "flaky.toml", name="flaky", strategy="custom", command="sleep 0.3; exit 1",
                            workdir=tmp_path, restart="on-failure", max_restarts=3,
                            defaults={"min_uptime": 0},  # quick failures are the point here, not a crash loop
                            grace=2, roles={"worker": {}})
    run_dir, run_id = tmp_path / "run", "it-detach-restart"
    up = start_cli("up", str(profile), "--no-tui", "--run-dir", str(run_dir), "--run-id", run_id,
                   log=tmp_path / "up.log")
    try:
        # the third failure waits 4 s before its restart: time enough to detach in between
        def long_pending() -> list[dict[str, Any]]:
            pending = _state(run_dir).get("pending_restarts") or []
            return [p for p in pending if p["due"] - time.time() > 2.0]

        wait_for(long_pending, 60, "a restart scheduled seconds ahead")
        state = _state(run_dir)
        os.kill(int(state["supervisor_pid"]), signal.SIGKILL)
        assert up.wait(timeout=30) == 137  # its client says the supervisor went away
        assert state["pending_restarts"][0]["tasks"] == ["worker:0"]
        before = _starts(run_dir)

        attached = cli("attach", str(run_dir), "--no-tui", timeout=120)
        assert "a new one takes it over" in attached.stderr
        # the restart it had pending ran, the policy went on to its end: no hang in Restarting
        assert attached.returncode == 1, attached.stdout[-2000:] + attached.stderr[-2000:]
        assert _starts(run_dir) == 4 and before == 3
        jobs = [e for e in read_events(run_dir) if e["kind"] == "job"]
        assert jobs[-1]["state"] == "Failed"
        assert _state(run_dir)["pending_restarts"] == []
    finally:
        up.kill()
        kill_run_processes(run_id)
