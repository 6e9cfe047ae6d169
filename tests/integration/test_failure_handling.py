"""How a failing job ends: a crash loop is named, and nothing starts once the job has ended."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.integration.jobtools import cli, kill_run_processes, pids_with_run_id, read_events
from tests.integration.test_fault_tolerance import job_end, job_states, shell_profile, states_of
from tests.profiles import Roles


def test_a_crash_loop_ends_the_job_with_its_reason(tmp_path: Path) -> None:
    """exit 3 right after every start: named a crash loop after 3 starts, not after all 11 allowed."""
    run_dir, run_id = tmp_path / "run", "it-crashloop"
    profile = shell_profile(tmp_path, {"worker": {"command": "exit 3", "min_uptime": 30}}, max_restarts=10)
    try:
        up = cli("up", str(profile), "--no-tui", "--run-dir", str(run_dir), "--run-id", run_id, timeout=120)
        assert up.returncode == 1, up.stdout[-2000:]
        events = read_events(run_dir)
        starts = [e for e in states_of(events, "worker:0") if e["state"] == "starting"]
        assert len(starts) == 3
        end = job_end(events)
        assert end["state"] == "Failed"
        assert end["reason"].startswith("crash loop: exit 3 within "), end["reason"]
        assert " s of start, 3 times" in end["reason"] and "min_uptime = 30 s" in end["reason"]
        assert "worker:0" in end["reason"]
        assert pids_with_run_id(run_id) == []
    finally:
        kill_run_processes(run_id)


def test_failures_slower_than_min_uptime_are_not_a_crash_loop(tmp_path: Path) -> None:
    """The same exit code every time, but each run outlived min_uptime: max_restarts decides."""
    run_dir, run_id = tmp_path / "run", "it-nocrashloop"
    command = "sleep 0.6; exit 3"
    profile = shell_profile(tmp_path, {"worker": {"command": command, "min_uptime": 0.5}}, max_restarts=3)
    try:
        up = cli("up", str(profile), "--no-tui", "--run-dir", str(run_dir), "--run-id", run_id, timeout=120)
        assert up.returncode == 1, up.stdout[-2000:]
        events = read_events(run_dir)
        end = job_end(events)
        assert "crash loop" not in end["reason"] and "max_restarts" in end["reason"], end["reason"]
        assert len([e for e in states_of(events, "worker:0") if e["state"] == "starting"]) == 4
    finally:
        kill_run_processes(run_id)


# the ps fails once the chief runs; the ps+chief group restart first stops the chief, which on
# SIGTERM lets worker:0 fail for good (ending the job) and itself exits only once the launcher has
# published the job's end. The restart, still under way then, must not start ps:0 and chief:0 again.
CHIEF = """import pathlib, signal, sys, time
run_dir = pathlib.Path(sys.argv[1])
launcher_events = run_dir.parent.parent / "events.jsonl"
def on_term(*_):
    (run_dir / "chief-term").touch()
    while '"Failed"' not in launcher_events.read_text():
        time.sleep(0.05)
    sys.exit(143)
signal.signal(signal.SIGTERM, on_term)
(run_dir / "chief-up").touch()
while True:
    time.sleep(1)
"""
PS = "until test -e {run_dir}/chief-up; do sleep 0.05; done; exit 1"
WORKER = "until test -e {run_dir}/chief-term; do sleep 0.05; done; exit 1"


@pytest.mark.slow  # no TensorFlow task, but preflight imports TensorFlow for this strategy
def test_nothing_starts_after_the_jobs_end_event(tmp_path: Path) -> None:
    run_dir, run_id = tmp_path / "run", "it-end-race"
    (tmp_path / "chief.py").write_text(CHIEF)
    roles: Roles = {"ps": {"command": PS}, "worker": {"restart": "never", "command": WORKER},
                    "chief": {"grace_seconds": 60,
                              "command": f"exec {{python}} {tmp_path}/chief.py {{run_dir}}"}}  # exec: dash would fork
    profile = shell_profile(tmp_path, roles, strategy="parameter_server")
    try:
        up = cli("up", str(profile), "--no-tui", "--run-dir", str(run_dir), "--run-id", run_id, timeout=180)
        assert up.returncode == 1, up.stdout[-3000:]
        events = read_events(run_dir)
        end_index = max(i for i, e in enumerate(events) if e["kind"] == "job")
        end = events[end_index]
        assert end["state"] == "Failed" and "worker:0" in end["reason"], end
        assert "Restarting" in job_states(events)  # the race was there: a restart was under way
        late = [e for e in events[end_index:] if e["kind"] == "state" and e["state"] in ("starting", "running")]
        assert not late, late
        started_after = [e for e in events if e["kind"] == "state" and e["state"] == "starting"
                         and e["ts"] > end["ts"]]
        assert not started_after, started_after
        # the agents' own files too: a start the launcher no longer followed still counts
        for agent_events in (run_dir / "hosts").glob("*/tasks/*/events.jsonl"):
            for line in agent_events.read_text().splitlines():
                event = json.loads(line)
                assert not (event["kind"] == "state" and event["state"] == "starting"
                            and event["ts"] > end["ts"]), (agent_events, event)
        assert [e["state"] for e in states_of(events, "ps:0")].count("starting") == 1
        assert pids_with_run_id(run_id) == []
    finally:
        kill_run_processes(run_id)


def test_the_report_names_the_ps_that_failed_first_and_repeats_no_line(tmp_path: Path) -> None:
    """ps:0 dies (exit 1) on every start, the workers then fail with gRPC-like errors: the report
    and `status` name ps:0 as the first failure, and no task output line is printed twice."""
    run_dir, run_id = tmp_path / "run", "it-report"
    ps = "echo ps: serving; echo ps: fatal: out of memory >&2; exit 1"
    # the workers fail once the ps agent has recorded its task's end (only a final event has exited_at)
    worker = ("until grep -qs exited_at {run_dir}/tasks/ps-0/events.jsonl; do sleep 0.05; done; "
              "echo UnavailableError: ps:0 unreachable >&2; echo UnavailableError: ps:0 unreachable >&2; exit 1")
    roles: Roles = {"ps": {"command": ps}, "worker": {"count": 2, "command": worker}}
    profile = shell_profile(tmp_path, roles, max_restarts=2)
    try:
        up = cli("up", str(profile), "--no-tui", "--run-dir", str(run_dir), "--run-id", run_id, timeout=120)
        assert up.returncode == 1, up.stdout[-3000:]
        lines = [line.split(" ", 1)[1] for line in up.stdout.splitlines() if " " in line]
        assert "root cause: ps:0 failed first (exit code 1)" in lines, up.stdout
        report = lines[lines.index("root cause: ps:0 failed first (exit code 1)") + 1:]
        assert report[0] == "last output of ps:0:"  # stdout and stderr are read apart: either order
        assert sorted(report[1:3]) == ["  ps:0 | ps: fatal: out of memory", "  ps:0 | ps: serving"]
        assert "  worker:1 | UnavailableError: ps:0 unreachable" in report
        task_lines = [line for line in lines if " | " in line]
        assert len(task_lines) == len(set(task_lines)), up.stdout
        status = cli("status", str(run_dir), timeout=60)
        assert "root cause: ps:0 failed first (exit code 1)" in status.stdout, status.stdout
        assert pids_with_run_id(run_id) == []
    finally:
        kill_run_processes(run_id)
