"""The dashboard driven through Textual's Pilot by a recorded job."""

from __future__ import annotations

from pathlib import Path

import pytest
from textual.widgets import DataTable, Input, Static

from launcher import events as ev
from tests.tui.tui_support import (
    RUN,
    T0,
    MemorySource,
    RecordingControl,
    fixed_clock,
    load,
    make_app,
    recorded_job,
    wait_until,
)
from tui.actions import NOT_IN_REPLAY
from tui.app import DashboardApp
from tui.dashboard import dashboard_bindings
from tui.frame import DashboardResult
from tui.placement_view import TOTAL_ROW
from tui.screens import ConfirmScreen, HelpScreen, QuitScreen

SIZES = [(100, 30), (200, 50)]
DATA = Path(__file__).resolve().parents[1] / "data" / "tf_startup"


def cell(app, task_id: str, column: str):
    return app.widgets.table.get_cell(task_id, column)


def toasts(app) -> list[str]:
    return [str(n.message) for n in app._notifications]


def log_lines(app) -> list[str]:
    return app.widgets.log_pane.lines.plain_lines


@pytest.mark.parametrize("size", SIZES)
async def test_rows_appear_and_cells_follow_metrics(size) -> None:
    events = recorded_job(steps=3, fail_worker=False)
    source_app = make_app(events)
    async with source_app.run_test(size=size) as pilot:
        app = source_app
        await load(pilot, app, len(events))
        assert app.widgets.table.row_keys == ["chief:0", "ps:0", "ps:1", "worker:0", "worker:1"]
        assert cell(app, "chief:0", "step").plain == "30"
        assert cell(app, "worker:0", "gpu").plain == "███▍   83"  # bar and number
        assert cell(app, "worker:0", "gpu_mem").plain == "3.0G/16G"
        assert cell(app, "ps:0", "gpu").plain == "—"
        assert cell(app, "ps:0", "rss").plain == "286M"
        source = app.state.source
        assert isinstance(source, MemorySource)
        source.push(ev.metric_event(RUN, "chief:0", step=40, loss=0.125, ts=T0 + 5))
        await wait_until(pilot, lambda: cell(app, "chief:0", "step").plain == "40")
        assert cell(app, "chief:0", "loss").plain == "0.125"
        header = str(app.widgets.header.render())
        assert "step 40" in header and "hosts 2/2 up" in header and "parameter_server" in header


async def test_failed_task_turns_red_and_notifies() -> None:
    events = recorded_job(steps=2)
    app = make_app(events)
    async with app.run_test(size=(100, 30)) as pilot:
        await load(pilot, app, len(events))
        state = cell(app, "worker:1", "state")
        assert state.plain.strip() == "failed" and "red" in str(state.style)
        assert "green" in str(cell(app, "chief:0", "state").style)
        assert any("worker:1 failed" in message for message in toasts(app))


async def test_stale_running_row_is_highlighted() -> None:
    events = recorded_job(steps=2, fail_worker=False)
    # at T0+12, ps:1 said nothing for 11.2 s (stale), worker:0 for 9 s (not yet)
    app = make_app(events, clock=fixed_clock(T0 + 12))
    async with app.run_test(size=(100, 30)) as pilot:
        await load(pilot, app, len(events))
        assert "yellow" in str(cell(app, "ps:1", "age").style)
        assert "yellow" in str(cell(app, "ps:1", "task").style)
        assert "yellow" not in str(cell(app, "worker:0", "age").style)


async def test_placement_view_sums_bytes_per_ps_and_warns() -> None:
    events = recorded_job(steps=1)
    app = make_app(events)
    async with app.run_test(size=(100, 30)) as pilot:
        await load(pilot, app, len(events))
        await pilot.press("p")
        table = app.widgets.placement_panel.query_one("#placement-table", DataTable)
        assert table.get_cell(TOTAL_ROW, "ps:0") == "11M"  # 12,005,120 bytes
        assert table.get_cell(TOTAL_ROW, "ps:1") == "50K"  # 51,712 bytes
        assert table.get_cell("embedding", "ps:0") == "11M" and table.get_cell("embedding", "ps:1") == ""
        summary = str(app.widgets.placement_panel.query_one("#placement-summary", Static).render())
        assert "ps:0 holds" in summary
        await pilot.press("p")
        assert app.widgets.views.current == "dashboard"


@pytest.mark.parametrize(("key", "call"), [("r", ("restart_task", "ps:0")), ("x", ("stop_task", "ps:0"))])
async def test_task_actions_ask_then_call_control_for_the_selected_task(key, call) -> None:
    events = recorded_job(steps=1)
    control = RecordingControl()
    app = make_app(events, control=control)
    async with app.run_test(size=(100, 30)) as pilot:
        await load(pilot, app, len(events))
        await pilot.press("down")
        assert app.state.selected_task == "ps:0"
        await pilot.press(key)
        assert isinstance(app.screen, ConfirmScreen)
        assert control.calls == []
        await pilot.press("y")
        await wait_until(pilot, lambda: control.calls == [call])


async def test_cancel_does_nothing() -> None:
    events = recorded_job(steps=1)
    control = RecordingControl()
    app = make_app(events, control=control)
    async with app.run_test(size=(100, 30)) as pilot:
        await load(pilot, app, len(events))
        for key in ("r", "x", "D"):
            await pilot.press(key)
            assert isinstance(app.screen, ConfirmScreen)
            await pilot.press("escape")
            assert not isinstance(app.screen, ConfirmScreen)
        await pilot.press("x")
        await pilot.click("#cancel")
        await pilot.pause(0.1)
        assert control.calls == []


async def test_teardown_after_confirm_and_quit_then_reports_it() -> None:
    events = recorded_job(steps=1)
    control = RecordingControl()
    app = make_app(events, control=control)
    async with app.run_test(size=(100, 30)) as pilot:
        await load(pilot, app, len(events))
        await pilot.press("D")
        await pilot.click("#confirm")
        await wait_until(pilot, lambda: control.calls == [("teardown",)])
        await pilot.press("q")  # teardown already asked for: no second question
    assert app.return_value == DashboardResult("teardown", teardown_requested=True)


@pytest.mark.parametrize(("key", "action"), [("d", "detach"), ("t", "teardown")])
async def test_quit_while_running_asks_and_returns_the_choice(key, action) -> None:
    events = recorded_job(steps=1)
    control = RecordingControl()
    app = make_app(events, control=control)
    async with app.run_test(size=(100, 30)) as pilot:
        await load(pilot, app, len(events))
        await pilot.press("q")
        assert isinstance(app.screen, QuitScreen)
        await pilot.press("c")
        assert not isinstance(app.screen, QuitScreen) and app.is_running
        await pilot.press("q")
        await pilot.press(key)
        await wait_until(pilot, lambda: app.return_value is not None)
    assert app.return_value == DashboardResult(action)
    assert control.calls == []  # the caller acts on the result


async def test_quit_after_the_job_ended_leaves_directly() -> None:
    events = [*recorded_job(steps=1), ev.job_event(RUN, ev.JOB_SUCCEEDED, ts=T0 + 20)]
    app = make_app(events, control=RecordingControl())
    async with app.run_test(size=(100, 30)) as pilot:
        await load(pilot, app, len(events))
        assert any("Job Succeeded" in message for message in toasts(app))
        await pilot.press("q")
        await wait_until(pilot, lambda: app.return_value is not None)
    assert app.return_value == DashboardResult("quit")


async def test_replay_refuses_actions_and_quits_directly() -> None:
    events = recorded_job(steps=1)
    app = make_app(events, control=None, live=False, hold_open=False)
    async with app.run_test(size=(100, 30)) as pilot:
        await load(pilot, app, len(events))
        await wait_until(pilot, lambda: app.state.stream_ended)
        for key in ("r", "x", "D"):
            await pilot.press(key)
            assert not isinstance(app.screen, ConfirmScreen)
        assert toasts(app).count(NOT_IN_REPLAY) == 3
        assert "elapsed 3s" in str(app.widgets.header.render())  # replay time, not the wall clock
        await pilot.press("q")
        await wait_until(pilot, lambda: app.return_value is not None)
    assert app.return_value == DashboardResult("quit")


async def test_help_lists_every_binding_description() -> None:
    app = make_app(recorded_job(steps=1))
    async with app.run_test(size=(100, 30)) as pilot:
        await pilot.press("question_mark")
        assert isinstance(app.screen, HelpScreen)
        help_text = app.screen.query_one("#help-text", Static)
        await pilot.pause()
        assert help_text.size.width > 40 and help_text.size.height >= len(dashboard_bindings())
        text = str(help_text.render())
        for binding in dashboard_bindings():
            assert binding.description in text
            assert binding.id
        await pilot.press("escape")
        assert not isinstance(app.screen, HelpScreen)


async def test_command_palette_lists_the_actions() -> None:
    from tui.commands import DashboardCommands

    app = make_app(recorded_job(steps=1))
    async with app.run_test(size=(100, 30)) as pilot:
        provider = DashboardCommands(app.screen)
        found = [hit.text async for hit in provider.discover()]
        assert "Restart task" in found and "Tear down job" in found and "Placement" in found
        hits = [hit async for hit in provider.search("placement")]
        assert hits
        await hits[0].command()
        await pilot.pause()
        assert app.widgets.views.current == "placement"
        await pilot.press("question_mark")  # opened over a modal, a command still acts on the dashboard
        assert isinstance(app.screen, HelpScreen)
        hits = [hit async for hit in DashboardCommands(app.screen).search("hosts")]
        await hits[0].command()
        await pilot.pause()
        assert app.widgets.views.current == "hosts"


async def test_log_pane_follows_pauses_searches_and_marks_stderr() -> None:
    events = recorded_job(steps=5)
    app = make_app(events)
    async with app.run_test(size=(100, 30)) as pilot:
        await load(pilot, app, len(events))
        for _ in range(4):
            await pilot.press("down")
        assert app.state.selected_task == "worker:1"
        assert log_lines(app)[-1] == "ResourceExhaustedError: OOM"
        assert "red" in str(app.widgets.log_pane.lines.texts[-1].style)
        assert "red" not in str(app.widgets.log_pane.lines.texts[-2].style)
        # pause: new lines are held back and counted, resume writes them
        await pilot.press("f")
        assert isinstance(app.state.source, MemorySource)
        app.state.source.push(ev.log_event(RUN, "worker:1", "stdout", "after pause", ts=T0 + 30))
        await wait_until(pilot, lambda: "1 new" in str(app.widgets.log_pane.query_one("#log-title").render()))
        assert "after pause" not in log_lines(app)
        await pilot.press("space")
        assert log_lines(app)[-1] == "after pause"
        # search filters to matching lines (ctrl+f: `/` filters the task table)
        await pilot.press("ctrl+f")
        assert isinstance(app.focused, Input)
        await pilot.press(*"batch 3")
        assert log_lines(app) == ["worker batch 3"]
        await pilot.press("enter")
        assert app.focused is app.widgets.table
        await pilot.press("ctrl+f", "escape")
        assert len(log_lines(app)) == 7
        assert app.focused is app.widgets.table and not app.widgets.log_pane.search_input.display
        # with a kept task filter in sight, escape in the search closes the search only
        await pilot.press("slash", *"worker", "enter", "ctrl+f", "escape")
        assert app.widgets.task_filter.display and app.widgets.task_filter.value == "worker"
        assert app.focused is app.widgets.table and not app.widgets.log_pane.search_input.display


async def test_logs_view_hides_the_table_and_keeps_selection_keys() -> None:
    events = recorded_job(steps=2)
    app = make_app(events)
    async with app.run_test(size=(100, 30)) as pilot:
        await load(pilot, app, len(events))
        await pilot.press("l")
        assert not app.widgets.table.display or app.widgets.dashboard.has_class("logs-only")
        await pilot.press("down")
        assert app.state.selected_task == "ps:0"
        assert "log ps:0" in str(app.widgets.log_pane.query_one("#log-title").render())


async def test_ctrl_q_asks_like_q_while_the_job_runs() -> None:
    events = recorded_job(steps=1)
    app = make_app(events, control=RecordingControl())
    async with app.run_test(size=(100, 30)) as pilot:
        await load(pilot, app, len(events))
        await pilot.press("ctrl+q")
        assert isinstance(app.screen, QuitScreen)
        await pilot.press("escape")
        assert app.is_running and not isinstance(app.screen, QuitScreen)


async def test_tensorflow_start_up_lines_fold_into_one_line_and_v_shows_them() -> None:
    """Two starts of chief:0, each printing real TensorFlow start-up output (tests/data/tf_startup/),
    fold into one note line; `v` shows them (dimmed) and hides them again; the view keeps them all."""
    noise = (DATA / "tf-2.21-cpu-default.txt").read_text(encoding="utf-8").splitlines()
    events = recorded_job(steps=2, fail_worker=False)
    events += [ev.log_event(RUN, "chief:0", "stderr", line, ts=T0 + 20) for line in noise]
    events.append(ev.log_event(RUN, "chief:0", "stdout", "resumed from step 20", ts=T0 + 21))
    app = make_app(events)
    async with app.run_test(size=(100, 40)) as pilot:
        await load(pilot, app, len(events))
        assert app.state.selected_task == "chief:0"
        note = f"{len(noise)} TensorFlow start-up lines hidden; press v to show"
        assert log_lines(app) == ["chief step 10 loss 2.000", "chief step 20 loss 1.000", note,
                                  "resumed from step 20"]
        # a line that arrives later is counted in the same note
        assert isinstance(app.state.source, MemorySource)
        app.state.source.push(ev.log_event(RUN, "chief:0", "stderr", noise[0], ts=T0 + 22))
        app.state.source.push(ev.log_event(RUN, "chief:0", "stdout", "step 40", ts=T0 + 22))
        await wait_until(pilot, lambda: log_lines(app)[-1] == "step 40")
        assert log_lines(app)[2] == note.replace(str(len(noise)), str(len(noise) + 1))
        await pilot.press("v")
        assert log_lines(app) == ["chief step 10 loss 2.000", "chief step 20 loss 1.000", *noise,
                                  "resumed from step 20", noise[0], "step 40"]
        assert "dim" in str(app.widgets.log_pane.lines.texts[2].style)
        assert "start-up lines shown" in str(app.widgets.log_pane.query_one("#log-title").render())
        await pilot.press("v")
        assert sum("start-up lines hidden" in line for line in log_lines(app)) == 1
        assert len(app.state.view.log("chief:0").lines) == 2 + len(noise) + 3


async def test_a_slurm_requeue_leaves_the_dashboard_for_the_queue_view() -> None:
    """The supervisor of an allocation Slurm took back ends its stream after a `requeued` event: the
    dashboard leaves by itself (the caller shows the queue, then the run's next allocation)."""
    events = [*recorded_job(steps=1, fail_worker=False),
              ev.requeued_event(RUN, "41", "Slurm requeued job 41", 1, "n1", ts=T0 + 20),
              ev.job_event(RUN, ev.JOB_RESTARTING, "Slurm requeued job 41: the run goes on", ts=T0 + 20)]
    source = MemorySource(events)
    app = DashboardApp(source, RecordingControl(), title="mnist-ps", strategy="parameter_server", hosts_total=2,
                       live=True, clock=fixed_clock())
    async with app.run_test(size=(100, 30)) as pilot:
        await load(pilot, app, len(events))
        assert app.return_value is None  # still following: the stream is open
        source.close()
        await wait_until(pilot, lambda: app.return_value is not None)
    assert app.return_value == DashboardResult("quit")


async def test_a_requeue_of_an_earlier_allocation_does_not_leave_by_itself() -> None:
    events = [ev.requeued_event(RUN, "41", "Slurm requeued job 41", 1, "n1", ts=T0 - 5),
              *recorded_job(steps=1, fail_worker=False)]  # this allocation's job Running after it
    source = MemorySource(events)
    app = DashboardApp(source, RecordingControl(), title="mnist-ps", strategy="parameter_server", hosts_total=2,
                       live=True, clock=fixed_clock())
    async with app.run_test(size=(100, 30)) as pilot:
        await load(pilot, app, len(events))
        source.close()
        await wait_until(pilot, lambda: app.state.stream_ended)
        await pilot.pause(0.1)
        assert app.return_value is None and app.is_running  # a lost stream is shown, the user leaves
        await pilot.press("q")
        await wait_until(pilot, lambda: app.return_value is not None)
