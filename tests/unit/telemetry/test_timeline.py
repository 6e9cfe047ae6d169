"""The timeline: one model folded from events for the dashboard's `e` view and `distlaunch events`."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from launcher import events as ev
from launcher.cli import main
from launcher.rundir import RunDir
from launcher.telemetry.timeline import Timeline

RUN = "r-tl"


def _history() -> list[ev.Event]:
    return [
        ev.job_event(RUN, ev.JOB_RUNNING, ts=100.0),
        ev.state_event(RUN, "worker:0", ev.RUNNING, host="gpu1", pid=7, ts=101.0),
        ev.state_event(RUN, "worker:0", ev.RUNNING, host="gpu1", pid=7, ts=101.5),  # repeat: no entry
        ev.metric_event(RUN, "worker:0", step=10, loss=1.0, ts=102.0),
        ev.condition_event(RUN, "worker:0", ev.STALLED, True, "no step for 60s", ts=103.0),
        ev.state_event(RUN, "worker:0", ev.RESTARTING, host="gpu1", exit_code=137, restarts=1,
                       reason="stalled: restarted by on_stall", ts=104.0),
        ev.action_event(RUN, "restart", "ps:0", origin="dashboard", ts=105.0),
        ev.host_event(RUN, "gpu1", "unreachable", "ssh: connection refused", ts=106.0),
        ev.state_event(RUN, "worker:0", ev.FAILED, host="gpu1", exit_code=1, restarts=1, reason="exited with 1",
                       ts=107.0),
        ev.job_event(RUN, ev.JOB_FAILED, "worker:0 failed", ts=108.0),
    ]


def test_timeline_words_each_change_once_newest_first() -> None:
    timeline = Timeline()
    for event in _history():
        timeline.add(event)
    texts = [(e.task, e.text) for e in timeline.newest_first()]
    assert texts == [
        (None, "job Failed: worker:0 failed"),
        ("worker:0", "failed, exit code 1: exited with 1"),
        (None, "host gpu1 unreachable: ssh: connection refused"),
        ("ps:0", "operator: restart ps:0 (from dashboard)"),
        ("worker:0", "restarting, exit code 137, restart 1: stalled: restarted by on_stall"),
        ("worker:0", "stalled raised: no step for 60s"),
        ("worker:0", "running on gpu1, pid 7"),
        (None, "job Running"),
    ]
    assert [e.severity for e in timeline.newest_first(kind=ev.STATE)] == ["error", "warning", "info"]
    assert [e.kind for e in timeline.newest_first(task="ps:0")] == [ev.ACTION]


def test_timeline_is_bounded() -> None:
    timeline = Timeline(limit=3)
    for i in range(10):
        timeline.add(ev.state_event(RUN, f"worker:{i}", ev.RUNNING, ts=float(i)))
    assert [e.task for e in timeline.newest_first()] == ["worker:9", "worker:8", "worker:7"]
    assert timeline.total == 10


def _run_dir(root: Path) -> Path:
    rd = RunDir.create(RUN, root / RUN)
    rd.write_state({"run_id": RUN, "name": "demo", "strategy": "parameter_server", "outcome": "Failed",
                    "launcher_pid": None, "tasks": {"worker:0": {"host": "gpu1"}, "ps:0": {"host": "gpu1"}}})
    for event in _history():
        rd.append(event)
    rd.close()
    return rd.path


def test_events_cli_prints_newest_first_and_filters(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = _run_dir(tmp_path)
    assert main(["events", str(path)]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert len(lines) == 8
    assert "job Failed: worker:0 failed" in lines[0] and "+0m08s" in lines[0]
    assert "job Running" in lines[-1] and "+0m00s" in lines[-1]
    assert main(["events", str(path), "--task", "worker:0", "--kind", "state", "--json"]) == 0
    entries = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert [(e["ts"], e["text"]) for e in entries] == [
        (107.0, "failed, exit code 1: exited with 1"),
        (104.0, "restarting, exit code 137, restart 1: stalled: restarted by on_stall"),
        (101.0, "running on gpu1, pid 7")]


def test_events_cli_names_an_unknown_task(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = _run_dir(tmp_path)
    assert main(["events", str(path), "--task", "worker:9"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "no task 'worker:9'" in err and "ps:0, worker:0" in err



def test_a_failure_says_its_cause_never_exit_code_twice() -> None:
    from launcher.telemetry.timeline import state_text

    failed = ev.state_event(RUN, "worker:0", ev.FAILED, exit_code=1, reason="exit code 1",
                            cause="ValueError: bad value at train.py:3")
    assert state_text(failed) == "failed, exit code 1: ValueError: bad value at train.py:3"  # as the header says
    bare = ev.state_event(RUN, "worker:0", ev.FAILED, exit_code=1, reason="exit code 1", cause="exit code 1")
    assert state_text(bare) == "failed, exit code 1"
    killed = ev.state_event(RUN, "worker:0", ev.FAILED, reason="killed by SIGKILL",
                            cause="killed by SIGKILL (not by distlaunch)")
    assert state_text(killed) == "failed: killed by SIGKILL (not by distlaunch)"


def test_a_stall_said_again_with_its_stacks_is_not_a_second_raise() -> None:
    timeline = Timeline()
    timeline.add(ev.condition_event(RUN, "worker:1", ev.STALLED, True, "step 812 has not advanced for 60s", ts=1.0))
    timeline.add(ev.condition_event(RUN, "worker:1", ev.STALLED, True, "step 812 ... in wait (hang.py:4); stacks in s",
                                    ts=2.0))
    timeline.add(ev.condition_event(RUN, "worker:1", ev.STALLED, False, "step advanced to 813", ts=3.0))
    timeline.add(ev.condition_event(RUN, "worker:1", ev.STALLED, True, "step 900 has not advanced for 60s", ts=4.0))
    assert [e.text for e in timeline.newest_first()][::-1] == [
        "stalled raised: step 812 has not advanced for 60s",
        "stalled still raised: step 812 ... in wait (hang.py:4); stacks in s",
        "stalled cleared: step advanced to 813",
        "stalled raised: step 900 has not advanced for 60s"]


def test_a_slurm_requeue_is_a_timeline_entry() -> None:
    from launcher import events as ev
    from launcher.telemetry.timeline import Timeline

    entry = Timeline().add(ev.requeued_event("r", "41", "Slurm requeued job 41 (BeginTime)", 2, "n1", ts=5.0))
    assert entry is not None and (entry.kind, entry.text, entry.severity) == (
        "requeued", "requeue 2: Slurm requeued job 41 (BeginTime)", "warning")
