"""The runs screen (`distlaunch runs --tui`, `distlaunch` alone in a terminal) through Pilot: every
run under the state root with its state, step and why; Enter on an ended run replays it, on one
still going attaches to it."""

from __future__ import annotations

import json
from pathlib import Path

from textual.widgets import DataTable

from tui.runs_view import RunsApp, RunsChoice

CORPUS = Path(__file__).resolve().parents[1] / "data" / "badlines"


def _run(home: Path, run_id: str, *, ended: bool) -> Path:
    """A run dir of the corpus' good events under ``run_id``; without its end, a run whose
    supervisor is gone (``lost``)."""
    path = home / "runs" / run_id
    path.mkdir(parents=True, mode=0o700)
    path.parent.chmod(0o700)
    lines = [line.replace(b"badlines-run", run_id.encode())
             for line in (CORPUS / "events.good.jsonl").read_bytes().splitlines() if line.strip()]
    if not ended:
        lines = [line for line in lines if b'"state":"Failed"' not in line]
    (path / "events.jsonl").write_bytes(b"\n".join(lines) + b"\n")
    state = json.loads((CORPUS / "state.json").read_text())
    state["run_id"] = run_id
    if not ended:
        state["job_state"] = "Running"
    (path / "state.json").write_text(json.dumps(state))
    for name in ("events.jsonl", "state.json"):
        (path / name).chmod(0o600)
    return path


async def test_the_runs_are_listed_and_enter_replays_an_ended_one(distlaunch_home: Path) -> None:
    ended = _run(distlaunch_home, "r-ended", ended=True)
    app = RunsApp()
    async with app.run_test(size=(160, 20)) as pilot:
        table = app.query_one(DataTable)
        assert table.row_count == 1
        cells = [str(c) for c in table.get_row_at(0)]
        assert cells[1] == "r-ended" and cells[3] == "Failed" and cells[6] == "50"
        assert "worker:0 failed" in cells[8]
        await pilot.press("enter")
    assert app.return_value == RunsChoice("r-ended", ended, "replay")


async def test_a_run_still_going_is_attached_to_and_r_reads_the_list_again(distlaunch_home: Path) -> None:
    app = RunsApp()
    async with app.run_test(size=(160, 20)) as pilot:
        table = app.query_one(DataTable)
        assert table.row_count == 0
        assert "no runs yet" in str(app.query_one("#runs-note").render())
        going = _run(distlaunch_home, "r-going", ended=False)
        await pilot.press("r")
        assert table.row_count == 1
        cells = [str(c) for c in table.get_row_at(0)]
        assert cells[1] == "r-going" and cells[3].startswith("Running (") and cells[3].endswith(")")
        await pilot.press("enter")
    assert app.return_value == RunsChoice("r-going", going, "attach")


async def test_q_leaves_without_a_choice(distlaunch_home: Path) -> None:
    _run(distlaunch_home, "r-ended", ended=True)
    app = RunsApp()
    async with app.run_test(size=(160, 20)) as pilot:
        await pilot.press("q")
    assert app.return_value is None
