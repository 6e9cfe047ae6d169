"""`distlaunch profile` never captures a task the capture would crash (issue 46 §2): a
MultiWorkerMirrored worker other than the collective leader (by the profile's strategy, or by what
autolog saw), one line each, the others captured; and a task that ended while a capture ran is
said to have ended (launcher/tfprofiler/safety.py). No TensorFlow here: the capture is faked."""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

import pytest

from launcher import events as ev
from launcher.autolog.profilersafety import PROFILER_UNSAFE
from launcher.commands import profile as command
from launcher.runstate import RunState
from launcher.tfprofiler.analysis import TaskProfile
from launcher.tfprofiler.capture import Target
from launcher.tfprofiler.safety import collective_leader, ended_since, events_size, refusals
from tests.integration.profilerun import fake_run

TWO = ["worker:0", "worker:1"]
THREE = ["worker:0", "worker:1", "worker:2"]


def state(strategy: str, tasks: list[str]) -> RunState:
    return RunState.from_json({"run_id": "r1", "strategy": strategy, "tasks": {t: {} for t in tasks}})


def write_events(run_dir: Path, *events: ev.Event) -> None:
    with (run_dir / "events.jsonl").open("a") as out:
        for event in events:
            out.write(event.to_json() + "\n")
    (run_dir / "events.jsonl").chmod(0o600)


def test_the_leader_is_the_chief_else_worker_0() -> None:
    assert collective_leader(TWO) == "worker:0"
    assert collective_leader(["worker:0", "chief:0", "evaluator:0"]) == "chief:0"


def test_a_multi_worker_mirrored_worker_other_than_the_leader_is_not_captured(tmp_path: Path) -> None:
    got = refusals(state("multi_worker_mirrored", THREE), tmp_path, THREE)
    assert sorted(got) == ["worker:1", "worker:2"]
    line = got["worker:1"]
    assert line.startswith("not capturing worker:1: TensorFlow's profiler crashes a MultiWorkerMirrored task other "
                           "than the collective leader (worker:0)")
    assert "`distlaunch status r1`" in line and "`distlaunch profile r1 worker:0`" in line and "\n" not in line
    with_chief = ["chief:0", "worker:0", "worker:1", "evaluator:0"]
    assert sorted(refusals(state("multi_worker_mirrored", with_chief), tmp_path, with_chief)) == TWO


def test_other_strategies_are_captured_unless_autolog_said_otherwise(tmp_path: Path) -> None:
    pss = ["chief:0", "ps:0", "worker:0", "worker:1"]
    assert refusals(state("parameter_server", pss), tmp_path, pss) == {}
    assert refusals(state("custom", TWO), tmp_path, TWO) == {}
    # a "custom" job that builds MultiWorkerMirroredStrategy: autolog's value says so for worker:1
    write_events(tmp_path, ev.metric_event("r1", "worker:0", step=3, values={"other": 1.0}),
                 ev.metric_event("r1", "worker:1", values={PROFILER_UNSAFE: 1.0}),
                 ev.metric_event("r1", "worker:2", values={PROFILER_UNSAFE: 0.0}))
    assert sorted(refusals(state("custom", THREE), tmp_path, THREE)) == ["worker:1"]
    assert refusals(state("custom", TWO), tmp_path, ["worker:0"]) == {}  # only the tasks chosen


def test_a_task_that_ended_since_the_capture_began_is_said_to_have_ended(tmp_path: Path) -> None:
    write_events(tmp_path, ev.state_event("r1", "worker:1", ev.FAILED, exit_code=1, reason="before"))
    offset = events_size(tmp_path)
    write_events(tmp_path, ev.state_event("r1", "worker:1", ev.FAILED, exit_code=-11,
                                          reason="worker:1 killed by SIGSEGV"),
                 ev.state_event("r1", "worker:0", ev.RUNNING))
    got = ended_since(tmp_path, offset, TWO, wait_s=0.3)
    assert got == {"worker:1": "it ended while the capture ran (failed, exit code -11: worker:1 killed by SIGSEGV)"}
    assert ended_since(tmp_path / "none", 0, TWO, wait_s=0.0) == {}


def args(*targets: str, json_out: bool = False) -> argparse.Namespace:
    return argparse.Namespace(targets=list(targets), seconds="1", json=json_out)


@pytest.fixture
def mwms_run(distlaunch_home: Path, tmp_path: Path) -> Path:
    run_dir = fake_run(distlaunch_home, "mw", tmp_path / "outputs", {"worker:0": 40001, "worker:1": 40002})
    saved = json.loads((run_dir / "state.json").read_text())
    saved["strategy"] = "multi_worker_mirrored"
    (run_dir / "state.json").write_text(json.dumps(saved))
    write_events(run_dir, ev.state_event("mw", "worker:1", ev.RUNNING))
    return run_dir


def test_a_named_task_that_would_crash_is_one_line_exit_1_and_no_capture(
        mwms_run: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setattr(command, "capture", lambda *a: pytest.fail("captured a task it would crash"))
    assert command.run_profile(args("mw", "worker:1")) == 1
    out, err = capsys.readouterr()
    assert out == "" and err.startswith("distlaunch: not capturing worker:1: ") and len(err.splitlines()) == 1, err
    assert not (tmp_path / "outputs").exists()  # no capture folder for nothing


def fake_capture(files: dict[str, Path], reasons: dict[str, str], seen: list[list[str]], then: Any = None) -> Any:
    def capture(state: Any, targets: list[Target], folder: Path, seconds: float) -> Any:
        seen.append([t.task for t in targets])
        if then is not None:
            then()
        return dict(files), dict(reasons), [], []
    return capture


def test_by_default_the_others_are_captured_and_the_spared_one_said(
        mwms_run: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    seen: list[list[str]] = []
    monkeypatch.setattr(command, "capture", fake_capture({"worker:0": tmp_path / "w0.xplane.pb"}, {}, seen))
    monkeypatch.setattr(command, "analyze", lambda task, path, strategy: TaskProfile(task, str(path), steps=5))
    assert command.run_profile(args("mw", json_out=True)) == 0  # every task the default choice may capture
    out, err = capsys.readouterr()
    assert seen == [["worker:0"]]
    answer = json.loads(out)
    assert [t["task"] for t in answer["tasks"]] == ["worker:0"] and answer["missing"] == []
    assert list(answer["refused"]) == ["worker:1"]
    lines = err.splitlines()
    assert lines[0] == "... capturing worker:0 for 1 s" and len(lines) == 2, err
    assert lines[1].startswith("distlaunch: not capturing worker:1: ")
    assert command.run_profile(args("mw", "worker:0", "worker:1")) == 1  # named, and spared: exit 1


def test_a_task_that_died_during_the_capture_is_one_line_saying_so(
        mwms_run: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    def dies() -> None:
        write_events(mwms_run, ev.state_event("mw", "worker:0", ev.FAILED, exit_code=-6,
                                              reason="worker:0 killed by SIGABRT"))

    client = {"worker:0": "TensorFlow's profiler client: UNAVAILABLE: Socket closed; a task that ..."}
    monkeypatch.setattr(command, "capture", fake_capture({}, client, [], then=dies))
    assert command.run_profile(args("mw", "worker:0")) == 1
    out, err = capsys.readouterr()
    assert out == "" and "internal error" not in err and "UNAVAILABLE" not in err
    assert err.splitlines()[1:] == ["distlaunch: no capture from worker:0 (127.0.0.1:40001): it ended while the "
                                    "capture ran (failed, exit code -6: worker:0 killed by SIGABRT)"]
