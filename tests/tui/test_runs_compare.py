"""The runs screen's compare view through Pilot: space marks runs, `c` overlays their loss and
steps/s against the step, one colour and one legend line per run; one marked run is refused in a
line; a run without loss is said so; a run still going grows on the chart."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from textual.widgets import DataTable, Static

from launcher import events as ev
from tests.tui.tui_support import wait_until
from tui import runs_compare
from tui.runs_compare import CompareChart, CompareScreen
from tui.runs_view import MARK, RunsApp

CORPUS = Path(__file__).resolve().parents[1] / "data" / "badlines"
T0 = 1_700_000_000.0


def _metrics(run_id: str, steps: range, *, t0: float, loss: bool = True) -> list[ev.Event]:
    return [ev.metric_event(run_id, "chief:0", step=s, loss=(5.0 / s if loss else None), ts=t0 + s * 0.5)
            for s in steps]


def _run(home: Path, run_id: str, profile: str, steps: range, *, t0: float, loss: bool = True,
         ended: bool = True) -> Path:
    """A run dir whose chief reported ``steps`` (with a loss unless ``loss`` is False); without its
    end, a run not ended whose supervisor is gone."""
    path = home / "runs" / run_id
    path.mkdir(parents=True, mode=0o700)
    path.parent.chmod(0o700)
    events: list[ev.Event] = [ev.job_event(run_id, ev.JOB_RUNNING, ts=t0)]
    events += _metrics(run_id, steps, t0=t0, loss=loss)
    if ended:
        events.append(ev.job_event(run_id, ev.JOB_SUCCEEDED, ts=t0 + 1000))
    (path / "events.jsonl").write_text("".join(e.to_json() + "\n" for e in events))
    state = json.loads((CORPUS / "state.json").read_text())
    state.update(run_id=run_id, name=profile, job_state="Succeeded" if ended else "Running", job_reason="")
    (path / "state.json").write_text(json.dumps(state))
    for name in ("events.jsonl", "state.json"):
        (path / name).chmod(0o600)
    return path


def _message(app: RunsApp) -> str:
    return str(app.query_one("#runs-message", Static).render())


async def _compare(pilot, app: RunsApp) -> CompareScreen:  # type: ignore[no-untyped-def]
    """Presses `c` and waits until the compare view read every run and drew its charts."""
    await pilot.press("c")
    await wait_until(pilot, lambda: isinstance(app.screen, CompareScreen))
    screen = app.screen
    assert isinstance(screen, CompareScreen)
    await wait_until(pilot, lambda: screen.passes > 0 and screen.done)
    charts = list(screen.query(CompareChart))
    await wait_until(pilot, lambda: all(chart.up_to_date for chart in charts))
    return screen


def _chart(screen: CompareScreen, which: str) -> dict[str, tuple[list[float], list[float]]]:
    return {name: (xs, ys) for name, xs, ys in screen.query_one(f"#compare-{which}", CompareChart).series}


def _legend(screen: CompareScreen) -> list[str]:
    return str(screen.query_one("#compare-legend", Static).render()).splitlines()


async def test_space_marks_runs_and_c_overlays_both_runs_curves(distlaunch_home: Path) -> None:
    # the list is newest first: r-long (started last) on top, then r-short
    _run(distlaunch_home, "r-short", "mnist-ps", range(1, 41), t0=T0)
    _run(distlaunch_home, "r-long", "resnet-mwms", range(1, 201), t0=T0 + 5000)
    app = RunsApp()
    async with app.run_test(size=(160, 40)) as pilot:
        table = app.query_one(DataTable)
        assert [str(table.get_row_at(i)[1]) for i in range(2)] == ["r-long", "r-short"]
        await pilot.press("space", "down", "space")
        assert [str(table.get_row_at(i)[0]) for i in range(2)] == [MARK, MARK]
        assert "2 marked" in _message(app)
        await pilot.press("space")  # unmarks r-short, then marks it again
        assert str(table.get_row_at(1)[0]) == "" and "1 marked" in _message(app)
        await pilot.press("space")
        screen = await _compare(pilot, app)

        loss = _chart(screen, "loss")
        assert list(loss) == ["r-long", "r-short"]
        assert loss["r-long"][0][0] == 1 and loss["r-long"][0][-1] == 200  # each over its own steps
        assert loss["r-short"][0][-1] == 40 and loss["r-short"][1][-1] == pytest.approx(5.0 / 40)
        rate = _chart(screen, "rate")
        assert list(rate) == ["r-long", "r-short"]
        assert rate["r-short"][1][-1] == pytest.approx(2.0)  # a step every half second
        assert rate["r-long"][0][-1] == 200

        chart = screen.query_one("#compare-loss", CompareChart)
        assert chart.color(0, "r-long") != chart.color(1, "r-short")
        legend = _legend(screen)
        assert legend[0].startswith("━━ r-long  resnet-mwms  steps 1-200  loss 5 → 0.025")
        assert legend[1].startswith("━━ r-short  mnist-ps  steps 1-40  loss 5 → 0.125")

        await pilot.press("enter")  # the list's Enter does nothing under the compare view
        await pilot.press("escape")
        assert app.screen is app.screen_stack[0] and app.return_value is None
        assert table.row_count == 2


async def test_one_marked_run_is_not_compared_and_the_line_says_why(distlaunch_home: Path) -> None:
    _run(distlaunch_home, "r-one", "mnist-ps", range(1, 11), t0=T0)
    _run(distlaunch_home, "r-two", "mnist-ps", range(1, 11), t0=T0 + 100)
    app = RunsApp()
    async with app.run_test(size=(160, 30)) as pilot:
        await pilot.press("c")
        assert "compare needs two marked runs (0 marked)" in _message(app)
        await pilot.press("space", "c")
        await pilot.pause()
        assert "compare needs two marked runs (1 marked)" in _message(app)
        assert not isinstance(app.screen, CompareScreen)


async def test_a_run_without_loss_is_said_so_and_keeps_its_colour(distlaunch_home: Path) -> None:
    _run(distlaunch_home, "r-noloss", "custom-loop", range(1, 31), t0=T0 + 100, loss=False)
    _run(distlaunch_home, "r-loss", "mnist-ps", range(1, 31), t0=T0)
    app = RunsApp()
    async with app.run_test(size=(160, 40)) as pilot:
        await pilot.press("space", "down", "space")
        screen = await _compare(pilot, app)
        assert list(_chart(screen, "loss")) == ["r-loss"]
        assert list(_chart(screen, "rate")) == ["r-noloss", "r-loss"]
        legend = _legend(screen)
        assert legend[0].startswith("━━ r-noloss  custom-loop  steps 1-30  no loss reported")
        assert "no loss reported" not in legend[1]
        loss_chart = screen.query_one("#compare-loss", CompareChart)
        rate_chart = screen.query_one("#compare-rate", CompareChart)
        # r-loss is the first line of the loss chart and the second of steps/s: one colour in both
        assert loss_chart.color(0, "r-loss") == rate_chart.color(1, "r-loss") != rate_chart.color(0, "r-noloss")


async def test_a_run_still_going_grows_on_the_chart(distlaunch_home: Path,
                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(runs_compare, "REFRESH_S", 0.1)
    _run(distlaunch_home, "r-done", "mnist-ps", range(1, 21), t0=T0)
    going = _run(distlaunch_home, "r-going", "mnist-ps", range(1, 11), t0=T0 + 100, ended=False)
    app = RunsApp()
    async with app.run_test(size=(160, 40)) as pilot:
        await pilot.press("space", "down", "space")
        screen = await _compare(pilot, app)
        assert _chart(screen, "loss")["r-going"][0][-1] == 10
        with open(going / "events.jsonl", "a") as fh:
            fh.writelines(e.to_json() + "\n" for e in _metrics("r-going", range(11, 26), t0=T0 + 100))
        await wait_until(pilot, lambda: _chart(screen, "loss")["r-going"][0][-1] == 25)
        assert _legend(screen)[0].startswith("━━ r-going  mnist-ps  steps 1-25")


async def test_at_most_four_runs_are_marked(distlaunch_home: Path) -> None:
    for i in range(5):
        _run(distlaunch_home, f"r-{i}", "mnist-ps", range(1, 5), t0=T0 + 100 * i)
    app = RunsApp()
    async with app.run_test(size=(160, 30)) as pilot:
        await pilot.press("space", *["down", "space"] * 4)
        table = app.query_one(DataTable)
        assert [str(table.get_row_at(i)[0]) for i in range(5)] == [MARK] * 4 + [""]
        assert "at most 4 runs" in _message(app)
        screen = await _compare(pilot, app)
        assert len(_legend(screen)) == 4 and len(_chart(screen, "loss")) == 4
        assert len({screen.query_one("#compare-loss", CompareChart).color(i, name)
                    for i, name in enumerate(_chart(screen, "loss"))}) == 4
