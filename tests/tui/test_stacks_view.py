"""The stacks view (`k` / `K`) and the stall line, driven through Pilot with a JobControl that answers
with captures as the host agents return them (tests/tui/stacks_fixtures.py)."""

from __future__ import annotations

import threading
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import pytest

from launcher.events import Event
from tests.tui.stacks_fixtures import (
    HOSTS,
    odd_one_out,
    one_stopped,
    stall_events,
    write_capture,
)
from tests.tui.tui_support import T0, RecordingControl, load, make_app, wait_until
from tui.app import DashboardApp
from tui.stacks_data import NO_CAPTURE
from tui.stacks_view import StacksScreen

SIZE = (120, 40)
pytestmark = pytest.mark.usefixtures("utc_clock")  # the view says when the stacks were taken


@asynccontextmanager
async def dashboard(control: RecordingControl | None, events: list[Event] | None = None,
                    **kwargs: Any) -> AsyncIterator[tuple[DashboardApp, Any]]:
    """The dashboard of the stalled eight-worker job (or of `events`), every event shown."""
    events = stall_events() if events is None else events
    app = make_app(events, control=control, hosts_total=2, **kwargs)
    async with app.run_test(size=SIZE) as pilot:
        await load(pilot, app, len(events))
        yield app, pilot


async def open_stacks(pilot, key: str, shown: int = 1) -> StacksScreen:
    await pilot.press(key)
    await wait_until(pilot, lambda: isinstance(pilot.app.screen, StacksScreen))
    screen = pilot.app.screen
    await wait_until(pilot, lambda: screen.captures >= shown)
    return screen


def captured(control: RecordingControl) -> list[tuple[str, ...]]:
    return [call for call in control.calls if call[0] == "capture_stacks"]


async def test_whole_job_groups_identical_stacks_with_the_odd_one_first() -> None:
    control = RecordingControl(odd_one_out())
    async with dashboard(control) as (_app, pilot):
        screen = await open_stacks(pilot, "K")
        assert captured(control) == [("capture_stacks", "*", "")]
        assert screen.title_text.startswith("stacks of 8 tasks, taken ")
        assert "(2 groups); suspect: worker:1 — its stack differs from the other 7 worker tasks " \
               "(in wait_for_peer (hang.py:4))" in screen.title_text
        body = screen.body_text.splitlines()
        labels = [line.strip() for line in body if line.startswith(" worker")]
        assert labels[0].startswith("worker:1  SUSPECT")
        assert labels[1] == "worker:0, worker:2-7 (7)"
        # the suspect's stack, newest frame last, as Python prints it; its own frame marked
        first_group = body[:body.index(" worker:0, worker:2-7 (7) ")]
        assert '    File "/home/ada/job/hang.py", line 4, in wait_for_peer  <- innermost frame of your code' \
            in first_group
        assert first_group.index('    File "/home/ada/job/hang.py", line 20, in train') < \
            first_group.index('    File "/home/ada/job/hang.py", line 4, in wait_for_peer  <- innermost frame of '
                              'your code')
        # each member of the big group has its own line with host, pid, state and wchan
        for task in ("worker:0", "worker:7"):
            host, pid = HOSTS[task]
            assert f"  {task} on {host} pid {pid} (sleeping, wchan futex_wait_queue) via py-spy" in body


async def test_a_stopped_task_is_the_suspect_and_says_why_it_has_no_stacks() -> None:
    async with dashboard(RecordingControl(one_stopped())) as (_app, pilot):
        screen = await open_stacks(pilot, "K")
        assert "suspect: worker:3 — it is stopped (wchan do_signal_stop)" in screen.title_text
        body = screen.body_text.splitlines()
        assert body[0].strip().startswith("worker:3  SUSPECT")
        assert body[1] == "  worker:3 on node1 pid 4103 (stopped, wchan do_signal_stop) via faulthandler: a stopped " \
                          "process cannot run faulthandler's handler; install py-spy on node1 to read it"
        assert " worker:0-2, worker:4-7 (7) " in body


async def test_k_captures_the_selected_task_and_a_widens_to_the_whole_job() -> None:
    control = RecordingControl(odd_one_out())
    async with dashboard(control) as (app, pilot):
        await pilot.press("down")  # worker:1
        await wait_until(pilot, lambda: app.state.selected_task == "worker:1")
        screen = await open_stacks(pilot, "k")
        assert captured(control) == [("capture_stacks", "worker:1", "")]
        assert screen.title_text.startswith("stacks of 1 task, ")
        assert "showing task worker:1" in str(screen.query_one("#stacks-hint").render())
        await pilot.press("a")
        await wait_until(pilot, lambda: screen.captures >= 2)
        assert captured(control)[-1] == ("capture_stacks", "*", "")
        assert screen.title_text.startswith("stacks of 8 tasks, ")
        assert "showing the whole job" in str(screen.query_one("#stacks-hint").render())
        await pilot.press("escape")
        await wait_until(pilot, lambda: not isinstance(app.screen, StacksScreen))


async def test_r_captures_again_without_blocking_the_screen() -> None:
    control = RecordingControl(odd_one_out())
    async with dashboard(control) as (_app, pilot):
        screen = await open_stacks(pilot, "K")
        control.gate = threading.Event()  # the next capture hangs until the test lets it finish
        control.stacks = one_stopped()
        await pilot.press("r")
        await wait_until(pilot, lambda: len(captured(control)) == 2)
        assert screen.title_text == "capturing the stacks of the whole job..."
        await pilot.press("pagedown", "end", "home")  # the screen still answers keys
        assert screen.capturing and screen.captures == 1
        await pilot.press("a")  # only the selected task: taken once the capture under way is done
        assert len(captured(control)) == 2
        control.gate.set()
        await wait_until(pilot, lambda: screen.captures == 3)
        assert captured(control)[1:] == [("capture_stacks", "*", ""), ("capture_stacks", "worker:0", "")]
        assert screen.title_text.startswith("stacks of 1 task, ")


async def test_a_failed_capture_is_said_in_the_view() -> None:
    class Unreachable(RecordingControl):
        def capture_stacks(self, tasks=None, native=False, timeout=10.0):
            raise TimeoutError("node2 did not answer in 10 s")

    async with dashboard(Unreachable()) as (_app, pilot):
        screen = await open_stacks(pilot, "K")
        assert screen.title_text == "capture failed: node2 did not answer in 10 s"


async def test_the_palette_and_the_help_offer_the_stacks_view() -> None:
    from tui.commands import DashboardCommands

    control = RecordingControl(odd_one_out())
    async with dashboard(control) as (app, pilot):
        provider = DashboardCommands(app.screen)
        hits = [hit async for hit in provider.search("stacks of the whole job")]
        assert hits and hits[0].help == "key: K"
        await hits[0].command()
        await wait_until(pilot, lambda: isinstance(app.screen, StacksScreen) and app.screen.captures == 1)
        assert captured(control) == [("capture_stacks", "*", "")]
        await pilot.press("escape")
        await pilot.press("question_mark")
        await pilot.pause()
        help_text = str(app.screen.query_one("#help-text").render())
        assert "Stacks of the selected task" in help_text


async def test_replay_shows_the_capture_stored_at_the_stall(tmp_path: Path) -> None:
    write_capture(tmp_path, odd_one_out())
    async with dashboard(None, live=False, hold_open=False, run_dir=tmp_path) as (app, pilot):
        await pilot.press("down")
        await wait_until(pilot, lambda: app.state.selected_task == "worker:1")
        screen = await open_stacks(pilot, "k")
        assert screen.title_text.splitlines() == [
            "stacks of 1 task, taken 22:13:31 (1 group)",
            "no live job: showing the capture of 22:13:31"]
        assert "wait_for_peer  <- innermost frame of your code" in screen.body_text
        await pilot.press("a")
        await wait_until(pilot, lambda: screen.captures == 2)
        assert screen.title_text.startswith("stacks of 8 tasks, taken 22:13:31 (2 groups); suspect: worker:1")


async def test_replay_without_a_capture_says_so(tmp_path: Path) -> None:
    replay = {"live": False, "hold_open": False, "run_dir": tmp_path}
    async with dashboard(None, stall_events(with_stacks=False), **replay) as (_app, pilot):
        screen = await open_stacks(pilot, "K")
        assert screen.title_text == f"no live job; {NO_CAPTURE}"
        assert screen.body_text == ""


async def test_the_stall_line_says_where_the_task_hangs() -> None:
    async with dashboard(RecordingControl()) as (app, pilot):
        header = app.widgets.header.render()
        assert "worker:1 stalled at step 5 in wait_for_peer (hang.py:4)" in str(header)
        await pilot.press("down")
        await wait_until(pilot, lambda: app.state.selected_task == "worker:1")
        app.dashboard.flush()
        log_title = app.widgets.log_pane.query_one("#log-title")
        assert "STALLED at step 5 in wait_for_peer (hang.py:4)" in str(log_title.render())


async def test_before_the_capture_the_stall_line_gives_the_reason() -> None:
    async with dashboard(RecordingControl(), stall_events(with_stacks=False)) as (app, _pilot):
        assert "worker:1 stalled: step 5 has not advanced for 5s" in str(app.widgets.header.render())


def test_the_stall_line_goes_with_the_stall() -> None:
    from launcher import events as ev
    from launcher.telemetry.jobview import JobView
    from tests.tui.tui_support import RUN
    from tui.stacks_data import stall_line

    view = JobView()
    for event in stall_events():
        view.apply(event)
    assert stall_line(view.tasks["worker:1"]) == "stalled at step 5 in wait_for_peer (hang.py:4)"
    assert view.last_stacks is not None and view.last_stacks.get("suspect") == "worker:1"
    view.apply(ev.metric_event(RUN, "worker:1", step=6, loss=0.1, ts=T0 + 20))
    view.apply(ev.condition_event(RUN, "worker:1", ev.STALLED, False, "step advanced to 6", ts=T0 + 20))
    assert stall_line(view.tasks["worker:1"]) == "" and view.tasks["worker:1"].stall_stacks is None
    # a capture that arrives while the task is not stalled says nothing about a stall
    view.apply(stall_events()[-2])
    assert view.tasks["worker:1"].stall_stacks is None
    # one taken on request (`distlaunch stacks`) belongs to no task: the view's latest all the same
    view.apply(ev.stacks_event(RUN, None, "stacks/20231114T221400.000Z.json", ts=T0 + 40))
    assert view.last_stacks is not None and view.last_stacks.get("path") == "stacks/20231114T221400.000Z.json"


async def test_an_ended_job_shows_the_stored_capture(tmp_path: Path) -> None:
    from launcher import events as ev
    from tests.tui.tui_support import RUN

    write_capture(tmp_path, one_stopped())
    control = RecordingControl(odd_one_out())
    events = [*stall_events(), ev.job_event(RUN, ev.JOB_FAILED, ts=T0 + 30)]
    async with dashboard(control, events, run_dir=tmp_path) as (_app, pilot):
        screen = await open_stacks(pilot, "K")
        assert captured(control) == []
        assert "no live job: showing the capture of 22:13:31" in screen.title_text
        assert "suspect: worker:3" in screen.title_text


async def test_s_switches_a_live_job_to_the_capture_kept_at_its_stall(tmp_path: Path) -> None:
    write_capture(tmp_path, one_stopped())
    control = RecordingControl(odd_one_out())
    async with dashboard(control, run_dir=tmp_path) as (_app, pilot):
        screen = await open_stacks(pilot, "K")
        assert "suspect: worker:1" in screen.title_text
        await pilot.press("s")
        await wait_until(pilot, lambda: screen.captures == 2)
        assert len(captured(control)) == 1  # read from the run dir, not asked of the tasks
        assert screen.title_text.splitlines()[1] == "the last capture kept in the run dir, taken 22:13:31"
        assert "suspect: worker:3" in screen.title_text
        assert "s: live" in str(screen.query_one("#stacks-hint").render())
        await pilot.press("s")
        await wait_until(pilot, lambda: screen.captures == 3)
        assert len(captured(control)) == 2 and "suspect: worker:1" in screen.title_text
