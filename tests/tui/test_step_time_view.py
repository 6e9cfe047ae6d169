"""The step-time split in the dashboard: the table's stacked bar and verdict, the selected task's
split over time, and `P` (profile) refused in a replay."""

from __future__ import annotations

from launcher import events as ev
from tests.tui.tui_support import RUN, T0, MemorySource, load, make_app, recorded_job, wait_until
from tui.actions import NOT_IN_REPLAY


def split(input: float, compute: float, peers: float, other: float) -> dict[str, float]:
    return {"step_time/input": input, "step_time/compute": compute, "step_time/peers": peers,
            "step_time/other": other, "step_time/seconds_per_step": 0.031}


async def test_table_and_detail_show_where_the_step_time_goes() -> None:
    events = recorded_job(steps=3, fail_worker=False)
    now = [T0 + 5]
    app = make_app(events, clock=lambda: now[0])
    async with app.run_test(size=(220, 50)) as pilot:
        await load(pilot, app, len(events))
        assert app.table.get_cell("worker:0", "split").plain == "—"
        source = app.source
        assert isinstance(source, MemorySource)
        source.push(ev.metric_event(RUN, "worker:0", step=40, loss=0.1, ts=T0 + 4,
                                    values=split(0.02, 0.04, 0.94, 0.0)))
        source.push(ev.metric_event(RUN, "worker:1", step=40, loss=0.1, ts=T0 + 4,
                                    values=split(0.71, 0.07, 0.21, 0.01)))
        await wait_until(pilot, lambda: app.table.get_cell("worker:0", "split").plain.endswith("wait worker:1"))
        bar = app.table.get_cell("worker:0", "split").plain[:8]
        assert bar.count("p") >= 7, bar  # peers fills the bar: drawn as magenta blocks
        assert app.table.get_cell("worker:1", "split").plain.endswith("input")
        await pilot.press("down", "down", "down", "down")  # to worker:1 (chief, ps:0, ps:1, worker:0, worker:1)
        await wait_until(pilot, lambda: "worker:1 step time" in str(app.sparklines.split.render()))
        detail = str(app.sparklines.split.render())
        assert "input-bound" in detail and "71%" in detail and "31.0 ms/step" in detail


async def test_profile_key_is_refused_in_a_replay() -> None:
    events = recorded_job(steps=3, fail_worker=False)
    app = make_app(events, control=None)
    async with app.run_test(size=(160, 40)) as pilot:
        await load(pilot, app, len(events))
        await pilot.press("P")
        await wait_until(pilot, lambda: any(NOT_IN_REPLAY in str(n.message) for n in app._notifications))
