"""`distlaunch status` reads a run's picture from its run dir, with or without a launcher."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from launcher import events as ev
from launcher.cli import main
from launcher.rundir import RunDir


def _finished_run(root: Path) -> Path:
    rd = RunDir.create("r-status", root / "r-status")
    rd.write_state({"run_id": "r-status", "name": "demo", "strategy": "parameter_server", "outcome": "Succeeded",
                    "launcher_pid": None, "tasks": {
                        "ps:0": {"host": "local", "address": "localhost", "port": 2222, "pid": 11, "state": "pending"},
                        "chief:0": {"host": "local", "address": "localhost", "port": 2223, "pid": 12,
                                    "state": "pending"}}})
    for event in (
        ev.job_event("r-status", ev.JOB_RUNNING, ts=1.0),
        ev.state_event("r-status", "chief:0", ev.RUNNING, host="local", pid=12, ts=1.0),
        ev.state_event("r-status", "ps:0", ev.RUNNING, host="local", pid=11, ts=1.0),
        ev.metric_event("r-status", "chief:0", step=40, loss=0.5, ts=2.0),
        ev.state_event("r-status", "chief:0", ev.SUCCEEDED, host="local", exit_code=0, ts=3.0),
        ev.state_event("r-status", "ps:0", ev.STOPPED, host="local", exit_code=143, restarts=1,
                       reason="stopped on request", ts=3.5),
        ev.job_event("r-status", ev.JOB_SUCCEEDED, "chief:0 exited 0", ts=3.0),
    ):
        rd.append(event)
    rd.close()
    return rd.path


def test_status_json_folds_the_events(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = _finished_run(tmp_path)
    assert main(["status", str(path), "--json"]) == 0
    summary = json.loads(capsys.readouterr().out)
    assert summary["job"] == {"state": "Succeeded", "reason": "chief:0 exited 0", "root_cause": ""}
    assert summary["launcher_alive"] is False
    chief, ps = summary["tasks"]["chief:0"], summary["tasks"]["ps:0"]
    assert (chief["state"], chief["step"], chief["loss"], chief["exit_code"]) == ("succeeded", 40, 0.5, 0)
    assert chief["pid"] == 12  # a finished task keeps its last pid from state.json
    assert (ps["state"], ps["restarts"], ps["reason"]) == ("stopped", 1, "stopped on request")


def test_status_table(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = _finished_run(tmp_path)
    assert main(["status", str(path)]) == 0
    out = capsys.readouterr().out
    assert "job Succeeded: chief:0 exited 0" in out
    row = next(line for line in out.splitlines() if line.startswith("chief:0"))
    assert row.split() == ["chief:0", "local", "localhost:2223", "succeeded", "12", "0", "40", "0.5000",
                           "none", "yet", "40", "-"]


def test_status_says_a_step_that_counts_calls_and_why_a_split_is_missing(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = _finished_run(tmp_path)
    with (path / "events.jsonl").open("a") as f:
        f.write(ev.metric_event("r-status", "chief:0", step=2, loss=0.25, ts=2.5, values={
            "step_is_calls": 1.0, "step_time/untimed_calls": 2.0}).to_json() + "\n")
    assert main(["status", str(path), "--json"]) == 0
    chief = json.loads(capsys.readouterr().out)["tasks"]["chief:0"]
    assert chief["step"] == 2 and chief["step_is_calls"] is True and chief["step_time"] is None
    assert chief["step_time_missing"].startswith("no step timed in 2 train calls"), chief
    assert main(["status", str(path)]) == 0
    row = next(line for line in capsys.readouterr().out.splitlines() if line.startswith("chief:0"))
    assert " 2 (calls)  0.2500  none yet    2        - (no step timed in 2 train calls" in row, row


def test_status_of_an_unknown_run_is_a_user_error(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["status", "no-such-run"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "no run 'no-such-run'" in err[0]
