"""The dashboard's job header names the task that failed first once the job has failed."""

from __future__ import annotations

from launcher import events as ev
from tests.tui.tui_support import RUN, T0, load, make_app, recorded_job


async def test_header_shows_the_root_cause_of_a_failed_job() -> None:
    events = recorded_job(steps=2)  # worker:1 fails at the end
    events.append(ev.state_event(RUN, "worker:0", ev.FAILED, host="gpu1", exit_code=1,
                                 reason="exit code 1", ts=T0 + 20))
    app = make_app(events)
    async with app.run_test(size=(200, 50)) as pilot:
        await load(pilot, app, len(events))
        assert "root cause" not in str(app.header.render())  # failed tasks, but the job goes on
        app.source.push(ev.job_event(RUN, ev.JOB_FAILED, "worker:0 failed", ts=T0 + 21))
        await load(pilot, app, len(events) + 1)
        assert "root cause: worker:1 failed first (exited with 1)" in str(app.header.render())
