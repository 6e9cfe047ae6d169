"""Issue 54 §1: each task's last checkpoint and the work at risk, folded from `checkpoint` events by
the JobView that the dashboard, `status` and replay share."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from launcher import events as ev
from launcher.cli import main
from launcher.commands import status
from launcher.rundir import RunDir
from launcher.telemetry import columns
from launcher.telemetry.jobview import JobView

RUN = "r-ckpt"
T0 = 2000.0


def _events() -> list[ev.Event]:
    return [
        ev.state_event(RUN, "worker:0", ev.RUNNING, host="a", pid=10, ts=T0),
        ev.state_event(RUN, "worker:1", ev.RUNNING, host="b", pid=11, ts=T0),
        ev.metric_event(RUN, "worker:0", step=100, loss=0.5, ts=T0 + 1),
        ev.checkpoint_event(RUN, "worker:0", "/data/ckpt", step=100, epoch=2,
                            files=["checkpoint", "ckpt-1.index", "ckpt-1.data-00000-of-00001"], nbytes=2048,
                            seconds=0.25, api="checkpoint_manager", host="a", ts=T0 + 2),
        ev.metric_event(RUN, "worker:0", step=160, loss=0.4, ts=T0 + 3),
        ev.metric_event(RUN, "worker:1", step=150, loss=0.4, ts=T0 + 3),
    ]


def _view(events: list[ev.Event]) -> JobView:
    view = JobView()
    for event in events:
        view.apply(event)
    return view


def test_the_last_checkpoint_and_the_steps_since_it_are_the_tasks() -> None:
    view = _view(_events())
    task = view.tasks["worker:0"]
    assert task.checkpoint is not None and (task.checkpoint.step, task.checkpoint.epoch) == (100, 2)
    assert task.checkpoint_where() == "a:/data/ckpt"
    assert task.steps_at_risk == 60
    assert columns.checkpoint_cell(task, T0 + 2 + 125) == ("100 2m05s", "")
    assert columns.risk_text({"steps_at_risk": task.steps_at_risk}) == "60"


def test_a_task_without_a_checkpoint_has_none_yet_and_every_step_at_risk() -> None:
    view = _view(_events())
    task = view.tasks["worker:1"]
    assert task.checkpoint is None and task.steps_at_risk == 150
    assert columns.checkpoint_cell(task, T0 + 5) == ("none yet", "dim")
    assert columns.risk_text({"steps_at_risk": task.steps_at_risk}) == "150"


def test_a_newer_checkpoint_replaces_the_last_and_forgets_the_copies_of_the_one_before() -> None:
    view = _view(_events())
    view.tasks["worker:0"].checkpoint_copies.append("c:/spare/ckpt")
    view.apply(ev.checkpoint_event(RUN, "worker:0", "/data/ckpt", step=150, files=["ckpt-2.index"], host="a",
                                   ts=T0 + 4))
    task = view.tasks["worker:0"]
    assert task.checkpoint is not None and task.checkpoint.step == 150
    assert task.checkpoint_copies == [] and task.steps_at_risk == 10


def test_a_restated_checkpoint_adds_its_copies_and_another_with_copies_replaces_the_last() -> None:
    view = _view(_events())
    first = view.tasks["worker:0"].checkpoint
    assert first is not None
    copy = "launcher:/runs/r/checkpoints/worker-0/100"
    view.apply(ev.checkpoint_event(RUN, "worker:0", "/data/ckpt", step=100, epoch=2, host="a", ts=T0 + 2,
                                   copies=[copy]))
    view.apply(ev.checkpoint_event(RUN, "worker:0", "/data/ckpt", step=100, epoch=2, host="a", ts=T0 + 2,
                                   copies=["c:/data/ckpt", copy]))
    task = view.tasks["worker:0"]
    assert task.checkpoint is first and task.checkpoint_copies == [copy, "c:/data/ckpt"]
    # an older checkpoint placed for a restart (the newest did not survive its host) is the last now
    view.apply(ev.checkpoint_event(RUN, "worker:0", "/data/ckpt", step=50, host="a", ts=T0 + 1,
                                   copies=["c:/data/ckpt"]))
    assert task.checkpoint is not None and task.checkpoint.step == 50
    assert task.checkpoint_copies == ["c:/data/ckpt"] and task.steps_at_risk == 110


def test_a_replay_of_the_events_file_gives_the_same_checkpoints() -> None:
    live = _view(_events())
    replayed = _view([ev.Event.from_json(e.to_json()) for e in _events()])
    for task_id, task in live.tasks.items():
        again = replayed.tasks[task_id]
        assert (again.checkpoint.to_dict() if again.checkpoint else None) == (
            task.checkpoint.to_dict() if task.checkpoint else None)
        assert again.steps_at_risk == task.steps_at_risk


def test_status_json_has_each_tasks_last_checkpoint_and_its_steps_at_risk(
        tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(status, "wall_clock", lambda: T0 + 12)
    rd = RunDir.create(RUN, tmp_path / RUN)
    rd.write_state({"run_id": RUN, "name": "ck", "strategy": "multi_worker_mirrored", "supervisor_pid": None,
                    "tasks": {t: {"host": h, "address": "localhost", "port": 2222 + i, "pid": None, "state": "pending"}
                              for i, (t, h) in enumerate((("worker:0", "a"), ("worker:1", "b")))}})
    for event in _events():
        rd.append(event)
    rd.close()
    assert main(["status", "--json", str(rd.path)]) == 0
    tasks = json.loads(capsys.readouterr().out)["tasks"]
    assert tasks["worker:0"]["checkpoint"] == {
        "step": 100, "epoch": 2, "host": "a", "directory": "/data/ckpt",
        "files": ["checkpoint", "ckpt-1.index", "ckpt-1.data-00000-of-00001"], "bytes": 2048, "seconds": 0.25,
        "api": "checkpoint_manager", "ts": T0 + 2, "age_s": 10.0, "copies": []}
    assert tasks["worker:0"]["steps_at_risk"] == 60
    assert tasks["worker:1"]["checkpoint"] is None and tasks["worker:1"]["steps_at_risk"] == 150
    assert main(["status", str(rd.path)]) == 0
    rows = {line.split()[0]: line for line in capsys.readouterr().out.splitlines() if line.startswith("worker:")}
    assert "100 10s ago a:/data/ckpt  60" in rows["worker:0"]
    assert "none yet" in rows["worker:1"]


def test_status_shows_where_the_copies_of_the_last_checkpoint_are(
        tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(status, "wall_clock", lambda: T0 + 12)
    rd = RunDir.create(RUN, tmp_path / RUN)
    rd.write_state({"run_id": RUN, "name": "ck", "strategy": "multi_worker_mirrored", "supervisor_pid": None,
                    "tasks": {"worker:0": {"host": "a", "address": "localhost", "port": 2222, "pid": None,
                                           "state": "pending"}}})
    copy = f"launcher:{rd.path}/checkpoints/worker-0/100"
    for event in [*_events()[:5], ev.checkpoint_event(RUN, "worker:0", "/data/ckpt", step=100, epoch=2, host="a",
                                                      ts=T0 + 2, copies=[copy])]:
        rd.append(event)
    rd.close()
    assert main(["status", "--json", str(rd.path)]) == 0
    point = json.loads(capsys.readouterr().out)["tasks"]["worker:0"]["checkpoint"]
    assert point["copies"] == [copy] and point["step"] == 100 and point["age_s"] == 10.0
    assert main(["status", str(rd.path)]) == 0
    assert f"(copies: {copy})" in capsys.readouterr().out
