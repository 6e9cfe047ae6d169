"""`L`, the merged log of issue 58 §3, driven through Pilot: every task's lines in time order, the
filter across tasks (task set, level, regex; a bad regex is a message), enter opens the line's
task log at that line, new lines come live, the cap on lines kept, a replay."""

from __future__ import annotations

from pathlib import Path

import pytest

from launcher import events as ev
from launcher.telemetry.mergedlog import MergedLog
from tests.tui.test_replay import write_run
from tests.tui.tui_support import RUN, T0, MemorySource, load, make_app, wait_until
from tui.app import DashboardApp
from tui.log_pane import REVEALED
from tui.replay import ReplaySource

pytestmark = pytest.mark.usefixtures("utc_clock")  # lines show their time of day
TASKS = ("chief:0", "ps:0", "worker:0", "worker:1")


def chatter() -> list[ev.Event]:
    """Four tasks running; their lines, interleaved in time, and one worker:1 line that reached the
    launcher after later lines of other tasks (its host was slower to tell)."""
    out: list[ev.Event] = [ev.job_event(RUN, ev.JOB_RUNNING, ts=T0)]
    out += [ev.state_event(RUN, t, ev.RUNNING, host="h1", pid=10 + i, ts=T0) for i, t in enumerate(TASKS)]
    out += [ev.metric_event(RUN, "chief:0", step=s, loss=1.0 / s, ts=T0 + s) for s in (1, 2)]
    out += [
        ev.log_event(RUN, "ps:0", "stdout", "ps listening", ts=T0 + 1.0),
        ev.log_event(RUN, "chief:0", "stdout", "chief step 10 loss 0.9", ts=T0 + 2.0),
        ev.log_event(RUN, "worker:0", "stdout", "worker batch 1", ts=T0 + 2.5),
        ev.log_event(RUN, "chief:0", "stderr", "WARNING:tensorflow:slow step", ts=T0 + 4.0),
        ev.log_event(RUN, "worker:1", "stdout", "worker batch 2", ts=T0 + 3.0),  # late
        ev.log_event(RUN, "worker:1", "stderr", "I0000 cuda found", ts=T0 + 4.5),
        ev.log_event(RUN, "worker:0", "stdout", "worker batch 3", ts=T0 + 5.0),
    ]
    return out


IN_TIME_ORDER = ["ps listening", "chief step 10 loss 0.9", "worker batch 1", "worker batch 2",
                 "WARNING:tensorflow:slow step", "I0000 cuda found", "worker batch 3"]


def _texts(app: DashboardApp) -> list[str]:
    return [row.line for row in app.widgets.merged_panel.lines.rows]


def _push(app: DashboardApp, event: ev.Event) -> None:
    source = app.state.source
    assert isinstance(source, MemorySource)
    source.push(event)


async def _open(pilot, app: DashboardApp, count: int) -> None:
    await load(pilot, app, count)
    await pilot.press("L")
    await wait_until(pilot, lambda: app.widgets.views.current == "merged" and bool(_texts(app)))


async def _filter(pilot, app: DashboardApp, text: str) -> None:
    """Type ``text`` into the merged log's filter box, as a user does (`/`, the keys, enter)."""
    panel = app.widgets.merged_panel
    await pilot.press("slash")
    assert panel.filter_input.has_focus
    panel.filter_input.value = ""
    await pilot.press(*[{" ": "space"}.get(c, c) for c in text], "enter")
    await pilot.pause()


async def test_every_tasks_lines_in_time_order_with_their_task_and_stream() -> None:
    events = chatter()
    app = make_app(events)
    async with app.run_test(size=(160, 40)) as pilot:
        await _open(pilot, app, len(events))
        panel = app.widgets.merged_panel
        assert _texts(app) == IN_TIME_ORDER
        assert panel.lines.has_focus
        drawn = panel.lines.plain_lines
        assert drawn[0].split() == ["22:13:21.000", "ps:0", "ps", "listening"]  # T0 + 1 s, UTC
        assert drawn[4].split()[1] == "chief:0!"  # stderr is marked
        assert drawn[2].split()[1] == "worker:0"
        colours = {row.task: panel.lines.line_text(row).spans[1].style for row in panel.lines.rows}
        assert len(set(colours.values())) == len(TASKS)  # a colour per task
        assert "7/7 lines" in panel.title
        await pilot.press("L")
        assert app.widgets.views.current == "dashboard"


async def test_the_filter_takes_a_task_set_a_level_and_a_regex() -> None:
    events = chatter()
    app = make_app(events)
    async with app.run_test(size=(160, 40)) as pilot:
        await _open(pilot, app, len(events))
        panel = app.widgets.merged_panel
        await _filter(pilot, app, "task=worker:*")
        assert _texts(app) == ["worker batch 1", "worker batch 2", "I0000 cuda found", "worker batch 3"]
        assert "4/7 lines" in panel.title and "filter: task=worker:*" in panel.title
        assert panel.lines.has_focus and panel.filter_input.display  # a kept filter stays in sight
        await _filter(pilot, app, "task=chief:0,ps:0")
        assert _texts(app) == ["ps listening", "chief step 10 loss 0.9", "WARNING:tensorflow:slow step"]
        await _filter(pilot, app, "level=stderr")
        assert _texts(app) == ["WARNING:tensorflow:slow step", "I0000 cuda found"]
        await _filter(pilot, app, "level=warn")
        assert _texts(app) == ["WARNING:tensorflow:slow step"]
        await _filter(pilot, app, "batch [13]$")
        assert _texts(app) == ["worker batch 1", "worker batch 3"]
        assert "2/7 lines" in panel.title
        await _filter(pilot, app, "task=worker:1 batch")
        assert _texts(app) == ["worker batch 2"]
        await _filter(pilot, app, "task=evaluator:0")
        message = str(panel.query_one("#merged-message").render())
        assert "no task is evaluator:0" in message and _texts(app) == []
        await pilot.press("slash", "escape")  # escape clears the filter
        assert _texts(app) == IN_TIME_ORDER and not panel.filter_input.display
        assert app.widgets.views.current == "merged"


async def test_a_bad_regex_is_a_message_and_the_last_filter_stays() -> None:
    events = chatter()
    app = make_app(events)
    async with app.run_test(size=(160, 40)) as pilot:
        await _open(pilot, app, len(events))
        panel = app.widgets.merged_panel
        await _filter(pilot, app, "task=ps:0")
        assert _texts(app) == ["ps listening"]
        await _filter(pilot, app, "loss (")
        message = panel.query_one("#merged-message")
        assert message.display
        text = str(message.render())
        assert text.startswith("filter not applied: 'loss (' is no regex") and "\n" not in text
        assert _texts(app) == ["chief step 10 loss 0.9"]  # the last filter that was one: "loss "
        assert app.is_running
        await _filter(pilot, app, "loss (0")
        await _filter(pilot, app, "loss (0.9)")
        assert _texts(app) == ["chief step 10 loss 0.9"] and not message.display


async def test_enter_opens_the_lines_task_log_at_that_line() -> None:
    events = chatter()
    for i in range(300):  # worker:1's log is long: the line is far from its tail
        events.append(ev.log_event(RUN, "worker:1", "stdout", f"worker:1 later line {i}", ts=T0 + 10 + i))
    app = make_app(events)
    async with app.run_test(size=(160, 40)) as pilot:
        await _open(pilot, app, len(events))
        await _filter(pilot, app, "task=worker:1 batch")
        await pilot.press("up", "enter")
        await wait_until(pilot, lambda: app.widgets.views.current == "dashboard")
        pane = app.widgets.log_pane
        assert app.state.selected_task == "worker:1" == app.widgets.table.selected_task
        assert pane.task_id == "worker:1" and pane.paused  # it holds still at that line
        await pilot.pause()
        lines = pane.lines
        first = max(0, len(lines.entries) - lines.size.height - lines.back)
        in_view = lines.plain_lines[first:first + lines.size.height]
        assert "worker batch 2" in in_view
        marked = next(t for t in lines.texts if t.plain == "worker batch 2")
        assert any(span.style == REVEALED for span in marked.spans)
        assert "worker:1 later line 299" not in in_view
        await pilot.press("f")  # following again: the tail
        await pilot.pause()
        first = max(0, len(lines.entries) - lines.size.height - lines.back)
        assert "worker:1 later line 299" in lines.plain_lines[first:first + lines.size.height]


async def test_enter_clears_a_task_filter_that_hides_the_task() -> None:
    events = chatter()
    app = make_app(events)
    async with app.run_test(size=(160, 40)) as pilot:
        await load(pilot, app, len(events))
        await pilot.press("slash", *"chief", "enter")
        assert app.widgets.table.row_keys == ["chief:0"]
        await pilot.press("L")
        await wait_until(pilot, lambda: bool(_texts(app)))
        await pilot.press("home", "enter")  # ps:0's line
        await wait_until(pilot, lambda: app.state.selected_task == "ps:0")
        assert app.widgets.table.selected_task == "ps:0" and app.widgets.table.filter_text == ""
        assert "ps listening" in app.widgets.log_pane.lines.plain_lines


async def test_new_lines_come_live_in_their_time_order() -> None:
    events = chatter()
    app = make_app(events)
    async with app.run_test(size=(160, 40)) as pilot:
        await _open(pilot, app, len(events))
        _push(app, ev.log_event(RUN, "ps:0", "stdout", "ps saw step 20", ts=T0 + 6.0))
        await wait_until(pilot, lambda: _texts(app)[-1:] == ["ps saw step 20"])
        _push(app, ev.log_event(RUN, "worker:0", "stdout", "worker batch 2.5", ts=T0 + 3.5))  # late
        await wait_until(pilot, lambda: len(_texts(app)) == 9)
        assert _texts(app)[4] == "worker batch 2.5" and _texts(app)[-1] == "ps saw step 20"
        assert "9/9 lines" in app.widgets.merged_panel.title
        lines = app.widgets.merged_panel.lines
        assert lines.back == 0 and lines.cursor is None  # following: the newest line is at the bottom


async def test_older_lines_are_dropped_and_the_title_says_so() -> None:
    events = chatter()
    app = make_app(events)
    app.state.view.merged_log = MergedLog(max_lines=4)
    async with app.run_test(size=(160, 40)) as pilot:
        await _open(pilot, app, len(events))
        assert _texts(app) == IN_TIME_ORDER[-4:]
        assert "4/4 lines" in app.widgets.merged_panel.title
        assert "(3 older dropped)" in app.widgets.merged_panel.title


async def test_a_replay_shows_the_merged_log_and_starts_it_over_when_it_goes_back(tmp_path: Path) -> None:
    events = chatter()
    source = ReplaySource(write_run(tmp_path / "events.jsonl", events), speed=0)
    app = DashboardApp(source, None, title="replay", strategy="parameter_server", hosts_total=1, live=False)
    async with app.run_test(size=(160, 40)) as pilot:
        await _open(pilot, app, len(events))
        await wait_until(pilot, lambda: app.state.stream_ended)
        app.dashboard.flush()
        assert _texts(app) == IN_TIME_ORDER
        old_log = app.state.view.merged_log
        with app.state.lock:  # what a seek back does: the feed starts the picture over
            app.state.view = type(app.state.view)()
            app.state.view.apply(events[1])
            app.state.view.apply(ev.log_event(RUN, "ps:0", "stdout", "only this", ts=T0 + 1))
        assert app.state.view.merged_log is not old_log
        app.dashboard.flush()
        assert _texts(app) == ["only this"]
