"""The dashboard's job header names the task that failed first once the job has failed."""

from __future__ import annotations

from launcher import events as ev
from tests.tui.tui_support import RUN, T0, load, make_app, recorded_job, wait_until


async def test_header_shows_the_root_cause_of_a_failed_job() -> None:
    events = recorded_job(steps=2)  # worker:1 fails at the end
    events.append(ev.state_event(RUN, "worker:0", ev.FAILED, host="gpu1", exit_code=1,
                                 reason="exit code 1", ts=T0 + 20))
    app = make_app(events)
    async with app.run_test(size=(200, 50)) as pilot:
        await load(pilot, app, len(events))
        assert "root cause" not in str(app.widgets.header.render())  # failed tasks, but the job goes on
        app.state.source.push(ev.job_event(RUN, ev.JOB_FAILED, "worker:0 failed", ts=T0 + 21))
        await load(pilot, app, len(events) + 1)
        assert "root cause: worker:1 failed first (exited with 1)" in str(app.widgets.header.render())


async def test_header_points_at_the_culprit_and_the_task_detail_shows_the_cause() -> None:
    events = recorded_job(steps=2)
    events.append(ev.state_event(RUN, "worker:0", ev.FAILED, host="gpu1", exit_code=1, reason="exit code 1",
                                 cause="lost contact with ps:0", culprit="ps:0", exited_at=T0 + 1, ts=T0 + 20))
    events.append(ev.job_event(RUN, ev.JOB_FAILED, "worker:0 failed", ts=T0 + 21))
    app = make_app(events)
    async with app.run_test(size=(200, 50)) as pilot:
        await load(pilot, app, len(events))
        assert "root cause: ps:0 (worker:0 failed first: exit code 1: lost contact with ps:0)" in \
            str(app.widgets.header.render())
        for _ in range(3):
            await pilot.press("down")
        assert app.state.selected_task == "worker:0"
        await wait_until(pilot, lambda: "failed: lost contact with ps:0" in
                         str(app.widgets.log_pane.query_one("#log-title").render()))
