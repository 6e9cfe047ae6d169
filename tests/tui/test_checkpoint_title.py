"""Issue 54 §1: the dashboard says where the selected task's last checkpoint is (the table's `ckpt`
column has its step and age; the log pane's title its host:directory and copies)."""

from __future__ import annotations

from launcher import events as ev
from tests.tui.tui_support import RUN, T0, load, make_app, recorded_job


async def test_the_log_title_names_the_selected_tasks_last_checkpoint() -> None:
    events = [*recorded_job(steps=3, fail_worker=False),
              ev.checkpoint_event(RUN, "chief:0", "/data/ckpt", step=2, files=["ckpt-1.index"], host="hostA",
                                  api="checkpoint_manager", ts=T0 + 5)]
    app = make_app(events)
    async with app.run_test(size=(200, 50)) as pilot:
        await load(pilot, app, len(events))
        assert app.state.selected_task == "chief:0"
        title = str(app.widgets.log_pane.query_one("#log-title").render())
        assert "checkpoint 2 at hostA:/data/ckpt" in title, title
        await pilot.press("down")
        assert "checkpoint" not in str(app.widgets.log_pane.query_one("#log-title").render())
