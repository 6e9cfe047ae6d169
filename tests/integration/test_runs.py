"""`distlaunch runs` after real runs on this machine: one succeeded, one failed, one detached, one live."""

from __future__ import annotations

import json
import os
import signal
from pathlib import Path
from typing import Any

from tests.integration.jobtools import cli, kill_run_processes, start_cli, wait_for
from tests.profiles import build_profile


def write_profile(tmp_path: Path, name: str, code: str, max_restarts: int = 0) -> Path:
    return build_profile(tmp_path / f"{name}.toml", name=name, command=f'{{python}} -c "{code}"', restart="on-failure",
                         max_restarts=max_restarts, hosts=())


def runs_json(env: dict[str, str]) -> list[dict[str, Any]]:
    result = cli("runs", "--json", env=env, timeout=60)
    assert result.returncode == 0, result.stderr
    listed: list[dict[str, Any]] = json.loads(result.stdout)
    return listed


def test_runs_lists_succeeded_failed_and_supervised_runs_newest_first(tmp_path: Path) -> None:
    env = {"DISTLAUNCH_HOME": str(tmp_path / "home")}
    ok = write_profile(tmp_path, "quick", "print(1)")
    bad = write_profile(tmp_path, "broken", "import sys; sys.exit(3)", max_restarts=1)
    sleeper = write_profile(tmp_path, "sleeper", "import time; time.sleep(600)")
    ids = ("r1-ok", "r2-failed", "r3-supervised")
    try:
        assert cli("up", str(ok), "--no-tui", "--run-id", ids[0], env=env).returncode == 0
        failed = cli("up", str(bad), "--no-tui", "--run-id", ids[1], env=env)
        assert failed.returncode == 1, failed.stderr[-2000:]
        detached = cli("up", str(sleeper), "--detach", "--run-id", ids[2], env=env)
        assert detached.returncode == 0, detached.stderr[-2000:]

        listed = runs_json(env)
        assert [r["run"] for r in listed] == list(reversed(ids))
        by_id = {r["run"]: r for r in listed}
        assert (by_id[ids[0]]["profile"], by_id[ids[0]]["job_state"], by_id[ids[0]]["live"]) == \
            ("quick", "Succeeded", None)
        assert (by_id[ids[1]]["profile"], by_id[ids[1]]["job_state"], by_id[ids[1]]["restarts"],
                by_id[ids[1]]["live"]) == ("broken", "Failed", 1, None)
        assert "worker:0" in by_id[ids[1]]["job_reason"]
        assert (by_id[ids[2]]["profile"], by_id[ids[2]]["live"]) == ("sleeper", "supervised")
        for r in listed:
            assert (r["hosts"], r["tasks"]) == (["local"], 1)
            assert r["started"] > 0 and r["duration_s"] >= 0
        assert listed[2]["started"] <= listed[1]["started"] <= listed[0]["started"]

        table = cli("runs", env=env, timeout=60)
        assert table.returncode == 0, table.stderr
        lines = table.stdout.splitlines()
        assert lines[0].split() == ["RUN", "PROFILE", "STATE", "STARTED", "DURATION", "HOSTS", "TASKS",
                                    "RESTARTS", "STEP"]
        assert lines[1].startswith(ids[2]) and lines[1].rstrip().endswith("supervised")
        assert lines[2].split()[:3] == [ids[1], "broken", "Failed"] and lines[2].split()[-2:] == ["1", "-"]
        assert lines[3].split()[:3] == [ids[0], "quick", "Succeeded"]
    finally:
        cli("down", ids[2], env=env, timeout=120)
        for run_id in ids:
            kill_run_processes(run_id)


def test_a_run_is_live_while_a_client_follows_it_then_ended(tmp_path: Path) -> None:
    env = {"DISTLAUNCH_HOME": str(tmp_path / "home")}
    sleeper = write_profile(tmp_path, "sleeper", "import time; time.sleep(600)")
    launcher = start_cli("up", str(sleeper), "--no-tui", "--run-id", "r-live", log=tmp_path / "up.log", env=env)
    try:
        wait_for(lambda: [r for r in runs_json(env) if r["live"] == "live"], 120, "the run to be listed live",
                 interval=0.5)
        launcher.send_signal(signal.SIGINT)
        launcher.wait(timeout=120)
        listed = runs_json(env)
        assert listed[0]["run"] == "r-live" and listed[0]["live"] is None
        told = (tmp_path / "up.log").read_text()
        assert ("distlaunch: stopped by SIGINT (Ctrl-C): tearing the job down "
                "(Ctrl-C again after 2 s abandons the wait)") in told
    finally:
        if launcher.poll() is None:
            launcher.kill()
        kill_run_processes("r-live")


def test_a_killed_client_leaves_the_run_supervised_and_a_killed_supervisor_lost(tmp_path: Path) -> None:
    env = {"DISTLAUNCH_HOME": str(tmp_path / "home")}
    sleeper = write_profile(tmp_path, "sleeper", "import time; time.sleep(600)")
    launcher = start_cli("up", str(sleeper), "--no-tui", "--run-id", "r-lost", log=tmp_path / "up.log", env=env)
    try:
        # a run is live from the supervisor's first state.json, Running only once every task started
        wait_for(lambda: [r for r in runs_json(env) if (r["live"], r["job_state"]) == ("live", "Running")],
                 120, "the run to be listed live and Running", interval=0.5)
        launcher.send_signal(signal.SIGKILL)  # the client only: the job stays supervised
        launcher.wait(timeout=30)
        wait_for(lambda: [r for r in runs_json(env) if (r["live"], r["job_state"]) == ("supervised", "Running")],
                 30, "the run to be listed supervised")
        state = json.loads(next((tmp_path / "home").rglob("r-lost/state.json")).read_text())
        os.kill(int(state["supervisor_pid"]), signal.SIGKILL)
        wait_for(lambda: not os.path.exists(f"/proc/{state['supervisor_pid']}/cmdline")
                 or not Path(f"/proc/{state['supervisor_pid']}/cmdline").read_bytes(), 30, "the supervisor to die")
        listed = runs_json(env)
        assert (listed[0]["run"], listed[0]["job_state"], listed[0]["live"]) == ("r-lost", "Running", "lost")
        lines = cli("runs", env=env, timeout=60).stdout.splitlines()
        assert lines[1].startswith("r-lost") and lines[1].rstrip().endswith("lost")
    finally:
        cli("down", "r-lost", env=env, timeout=120)
        kill_run_processes("r-lost")
