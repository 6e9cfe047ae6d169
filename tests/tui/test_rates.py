"""Steps/s in the dashboard is over a window ending at the dashboard's clock, not at the last step."""

from __future__ import annotations

from launcher import events as ev
from tests.tui.tui_support import T0, load, make_app, recorded_job, wait_until


async def test_rate_column_goes_to_zero_once_the_step_stops_without_any_new_event() -> None:
    events = recorded_job(steps=10, fail_worker=False)  # 10 steps/s up to T0 + 11
    now = [T0 + 11]
    app = make_app(events, clock=lambda: now[0])
    async with app.run_test(size=(160, 40)) as pilot:
        await load(pilot, app, len(events))
        assert app.state.view.tasks["chief:0"].state == ev.RUNNING
        assert app.widgets.table.get_cell("chief:0", "rate").plain == "10.0"
        assert "10.0" in str(app.widgets.header.render())
        now[0] = T0 + 40  # the steps stopped: no event comes, only the refresh timer runs
        await wait_until(pilot, lambda: app.widgets.table.get_cell("chief:0", "rate").plain == "0.0")
        assert app.widgets.table.get_cell("worker:0", "rate").plain == "0.0"
        rate_label = app.widgets.sparklines.query_one("#rate-label")
        await wait_until(pilot, lambda: "chief:0 steps/s 0.0" in str(rate_label.render()))
        assert "10.0" not in str(app.widgets.header.render())
