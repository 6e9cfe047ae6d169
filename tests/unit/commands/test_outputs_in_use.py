"""The outputs check `up` makes before any task starts: only a live run of the user's is a conflict,
and the runs that cannot be live are passed over on their raw state (tests/integration/
test_outputs_in_use.py runs two real jobs)."""

from __future__ import annotations

import json
import os
from pathlib import Path

from launcher.commands.outputsuse import outputs_in_use
from launcher.runstate import HostRecord, RunState

HOST = {"transport": "ssh", "address": "10.0.0.7"}


def _run(root: Path, run_id: str, state: RunState | dict) -> None:
    folder = root / run_id
    folder.mkdir(parents=True)
    path = folder / "state.json"
    path.write_text(json.dumps(state.to_json() if isinstance(state, RunState) else state))
    path.chmod(0o600)


def _state(run_id: str, **fields: object) -> RunState:
    return RunState(run_id, hosts={"a": HostRecord(dict(HOST), "/b", "python3", "/out/job")}, **fields)  # type: ignore[arg-type]


def test_only_a_run_whose_supervisor_lives_holds_the_outputs(tmp_path: Path) -> None:
    _run(tmp_path, "live", _state("live", supervisor_pid=os.getpid()))
    _run(tmp_path, "ended", _state("ended", supervisor_pid=os.getpid(), outcome="Succeeded"))
    _run(tmp_path, "never-supervised", _state("never-supervised"))
    problems = outputs_in_use("new", {"x": ("10.0.0.7", "/out/job/")}, root=tmp_path)
    assert len(problems) == 1 and "in use by run live" in problems[0] and problems[0].startswith("host x:")


def test_runs_that_cannot_be_live_are_passed_over_without_reading_them_whole(tmp_path: Path, monkeypatch) -> None:
    # a user's hundreds of old runs: typing each one's records cost every `up` up to a second
    for i in range(5):
        _run(tmp_path, f"old-{i}", _state(f"old-{i}", supervisor_pid=os.getpid(), outcome="Failed"))
    _run(tmp_path, "never-supervised", _state("never-supervised"))
    _run(tmp_path, "live", _state("live", supervisor_pid=os.getpid()))
    read_whole: list[str] = []
    real = RunState.from_json

    def counted(data: dict) -> RunState:
        read_whole.append(data["run_id"])
        return real(data)

    monkeypatch.setattr(RunState, "from_json", staticmethod(counted))
    assert outputs_in_use("new", {"x": ("10.0.0.7", "/out/job")}, root=tmp_path) != []
    assert read_whole == ["live"]
