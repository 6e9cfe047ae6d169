"""The step-time split in the dashboard: the table's stacked bar and verdict, the selected task's
split over time, and `P` (profile) refused in a replay."""

from __future__ import annotations

from launcher import events as ev
from launcher.telemetry.columns import split_cell, step_cell
from launcher.telemetry.jobview import JobView
from tests.tui.tui_support import RUN, T0, MemorySource, load, make_app, recorded_job, wait_until
from tui.actions import NOT_IN_REPLAY
from tui.charts import split_detail
from tui.header import header_text


def split(input: float, compute: float, peers: float, other: float) -> dict[str, float]:
    return {"step_time/input": input, "step_time/compute": compute, "step_time/peers": peers,
            "step_time/other": other, "step_time/seconds_per_step": 0.031}


async def test_table_and_detail_show_where_the_step_time_goes() -> None:
    events = recorded_job(steps=3, fail_worker=False)
    now = [T0 + 5]
    app = make_app(events, clock=lambda: now[0])
    async with app.run_test(size=(220, 50)) as pilot:
        await load(pilot, app, len(events))
        assert app.widgets.table.get_cell("worker:0", "split").plain == "—"
        source = app.state.source
        assert isinstance(source, MemorySource)
        source.push(ev.metric_event(RUN, "worker:0", step=40, loss=0.1, ts=T0 + 4,
                                    values=split(0.02, 0.04, 0.94, 0.0)))
        source.push(ev.metric_event(RUN, "worker:1", step=40, loss=0.1, ts=T0 + 4,
                                    values=split(0.71, 0.07, 0.21, 0.01)))
        await wait_until(pilot, lambda: app.widgets.table.get_cell("worker:0", "split").plain.endswith("wait worker:1"))
        bar = app.widgets.table.get_cell("worker:0", "split").plain[:8]
        assert bar.count("p") >= 7, bar  # peers fills the bar: drawn as magenta blocks
        assert app.widgets.table.get_cell("worker:1", "split").plain.endswith("input")
        await pilot.press("down", "down", "down", "down")  # to worker:1 (chief, ps:0, ps:1, worker:0, worker:1)
        await wait_until(pilot, lambda: "worker:1 step time" in str(app.widgets.sparklines.split.render()))
        detail = str(app.widgets.sparklines.split.render())
        assert "input-bound" in detail and "71%" in detail and "31.0 ms/step" in detail


async def test_profile_key_is_refused_in_a_replay() -> None:
    events = recorded_job(steps=3, fail_worker=False)
    app = make_app(events, control=None)
    async with app.run_test(size=(160, 40)) as pilot:
        await load(pilot, app, len(events))
        await pilot.press("P")
        await wait_until(pilot, lambda: any(NOT_IN_REPLAY in str(n.message) for n in app._notifications))


def test_a_step_that_counts_calls_and_a_missing_split_say_so() -> None:
    """Issue 46: the table's step cell and the header mark a step that counts train calls; the
    split cell and the detail of a task whose calls were none timed say it instead of a blank."""
    view = JobView()
    view.apply(ev.state_event(RUN, "worker:0", ev.RUNNING, host="local", pid=1, ts=T0))
    view.apply(ev.metric_event(RUN, "worker:0", step=2, loss=0.5, ts=T0 + 1,
                               values={"step_is_calls": 1.0, "step_time/untimed_calls": 2.0}))
    task = view.tasks["worker:0"]
    assert step_cell(task)[0] == "2c"
    assert "step (calls) 2" in header_text(view, T0 + 2, title="t", strategy="multi_worker_mirrored",
                                           hosts_total=1, live=True, stream_ended=False).plain
    assert split_cell(task, view.step_times, T0 + 2)[0] == "- no step timed"
    detail = split_detail("worker:0", view.step_times, T0 + 2).plain
    assert "worker:0 step time: no step timed in 2 train calls" in detail, detail
    view.apply(ev.metric_event(RUN, "worker:0", step=9, loss=0.5, ts=T0 + 3, values={}))
    assert step_cell(view.tasks["worker:0"])[0] == "9"
