"""The views and keys of issue 14 driven through Pilot: layout, filter, sort, flags, hosts, timeline,
screenshot."""

from __future__ import annotations

from pathlib import Path

from launcher import events as ev
from tests.tui.tui_support import RUN, T0, MemorySource, load, make_app, recorded_job, wait_until


def _push(app, event: ev.Event) -> None:
    source = app.state.source
    assert isinstance(source, MemorySource)
    source.push(event)


async def test_log_pane_shows_the_first_row_even_when_another_task_spoke_first() -> None:
    events = [ev.state_event(RUN, "ps:0", ev.RUNNING, host="cpu1", pid=5, ts=T0),
              ev.log_event(RUN, "ps:0", "stdout", "ps is up", ts=T0),
              ev.state_event(RUN, "chief:0", ev.RUNNING, host="gpu1", pid=6, ts=T0 + 1),
              ev.log_event(RUN, "chief:0", "stdout", "chief is up", ts=T0 + 1),
              ev.metric_event(RUN, "chief:0", step=1, loss=1.0, ts=T0 + 2)]
    app = make_app(events)
    async with app.run_test(size=(100, 30)) as pilot:
        await load(pilot, app, len(events))
        assert app.widgets.table.row_keys[0] == "chief:0"
        await wait_until(pilot, lambda: app.state.selected_task == "chief:0")
        assert app.widgets.log_pane.lines.plain_lines == ["chief is up"]


async def test_table_takes_the_rows_it_needs_up_to_a_share_of_the_screen() -> None:
    events = recorded_job(steps=2)
    app = make_app(events)
    async with app.run_test(size=(200, 50)) as pilot:
        await load(pilot, app, len(events))
        assert app.widgets.table.size.height == 6  # header + 5 tasks; the panes below get the rest
        for i in range(2, 60):
            _push(app, ev.state_event(RUN, f"worker:{i}", ev.RUNNING, host="cpu1", ts=T0 + 20))
        await wait_until(pilot, lambda: app.widgets.table.row_count == 63)
        await wait_until(pilot, lambda: app.widgets.table.size.height == int(50 * 0.45))


async def test_condition_flags_appear_and_clear_in_the_row() -> None:
    events = recorded_job(steps=2, fail_worker=False)
    app = make_app(events)
    async with app.run_test(size=(200, 50)) as pilot:
        await load(pilot, app, len(events))
        assert app.widgets.table.get_cell("worker:0", "flags").plain == ""
        _push(app, ev.condition_event(RUN, "worker:0", ev.STALLED, True, "no step for 60s", ts=T0 + 20))
        _push(app, ev.condition_event(RUN, "worker:0", ev.STRAGGLER, True, "3x slower", ts=T0 + 20))
        await wait_until(pilot, lambda: app.widgets.table.get_cell("worker:0", "flags").plain == "STALL SLOW")
        _push(app, ev.condition_event(RUN, "worker:0", ev.STALLED, False, ts=T0 + 21))
        await wait_until(pilot, lambda: app.widgets.table.get_cell("worker:0", "flags").plain == "SLOW")
        assert app.widgets.table.get_cell("worker:0", "trend").plain.strip() != ""  # steps/s sparkline
        assert app.widgets.table.get_cell("ps:0", "cpu").plain.endswith(" 12")


async def test_a_nan_loss_shows_like_a_stall_in_the_row_and_the_hosts_view() -> None:
    events = recorded_job(steps=2, fail_worker=False)
    app = make_app(events)
    async with app.run_test(size=(200, 50)) as pilot:
        await load(pilot, app, len(events))
        _push(app, ev.condition_event(RUN, "worker:1", ev.STALLED, True, "no step for 60s", ts=T0 + 20))
        _push(app, ev.metric_event(RUN, "worker:0", step=6, loss=float("nan"), ts=T0 + 20))
        _push(app, ev.condition_event(RUN, "worker:0", ev.NAN_LOSS, True, "loss is NaN since step 6", ts=T0 + 20))
        await wait_until(pilot, lambda: app.widgets.table.get_cell("worker:0", "flags").plain == "NAN")
        assert app.widgets.table.get_cell("worker:0", "loss").plain == "nan"  # not the last finite loss
        stall, nan = app.widgets.table.get_cell("worker:1", "flags"), app.widgets.table.get_cell("worker:0", "flags")
        assert nan.style == stall.style != ""  # the same mark as a stall
        await pilot.press("h")
        hosts_lines = app.widgets.hosts_panel.plain.splitlines()
        worker0 = next(line for line in hosts_lines if line.strip().startswith("worker:0"))
        assert worker0.rstrip().endswith("NAN_LOSS")
        await pilot.press("h")
        _push(app, ev.condition_event(RUN, "worker:0", ev.NAN_LOSS, False, "recovered at step 9", ts=T0 + 21))
        _push(app, ev.metric_event(RUN, "worker:0", step=9, loss=0.25, ts=T0 + 21))
        await wait_until(pilot, lambda: app.widgets.table.get_cell("worker:0", "flags").plain == "")
        await wait_until(pilot, lambda: app.widgets.table.get_cell("worker:0", "loss").plain == "0.25")


async def test_slash_filters_as_you_type_and_escape_clears() -> None:
    events = recorded_job(steps=2)
    app = make_app(events)
    async with app.run_test(size=(100, 30)) as pilot:
        await load(pilot, app, len(events))
        await pilot.press("slash", *"work")
        assert app.widgets.table.row_keys == ["worker:0", "worker:1"]
        await pilot.press("backspace", "backspace", "backspace", "backspace", *"cpu1")
        assert app.widgets.table.row_keys == ["ps:1", "worker:1"]  # by host
        await pilot.press(*" fail")
        assert app.widgets.table.row_keys == ["worker:1"]  # every word must match: host and state
        assert app.state.selected_task == "worker:1"  # the cursor moves to what is left
        await pilot.press("enter")
        assert app.focused is app.widgets.table and app.widgets.task_filter.display  # the kept filter stays in sight
        await pilot.press("escape")
        assert app.widgets.table.row_keys == ["chief:0", "ps:0", "ps:1", "worker:0", "worker:1"]
        assert not app.widgets.task_filter.display
        await pilot.press("slash", *"nothing-like-this")
        assert app.widgets.table.row_count == 0 and app.widgets.table.selected_task is None


async def test_s_cycles_the_sort_column_and_capital_s_reverses() -> None:
    events = recorded_job(steps=3)
    app = make_app(events)
    async with app.run_test(size=(200, 50)) as pilot:
        await load(pilot, app, len(events))
        await pilot.press("s")
        assert app.widgets.table.sort_column == "host"
        assert app.widgets.table.row_keys == ["ps:1", "worker:1", "chief:0", "ps:0", "worker:0"]
        await pilot.press("s")
        assert app.widgets.table.sort_column == "state"
        assert app.widgets.table.row_keys[0] == "worker:1"  # failed first
        await pilot.press("s", "s")
        assert app.widgets.table.sort_column == "loss"
        await pilot.press("s")
        assert app.widgets.table.sort_column == "gpu"
        assert app.widgets.table.row_keys[0] == "worker:0"  # the only task with a GPU; the rest have none
        await pilot.press("S")
        assert app.widgets.table.row_keys[0] == "worker:0" and app.widgets.table.sort_reverse
        assert "gpu%▼" in app.widgets.table._header.plain
        await pilot.press("s")
        assert app.widgets.table.sort_column == "task" and app.widgets.table.row_keys[0] == "chief:0"


async def test_h_shows_hosts_with_their_tasks_and_gpus() -> None:
    events = recorded_job(steps=3)
    app = make_app(events)
    async with app.run_test(size=(200, 50)) as pilot:
        await load(pilot, app, len(events))
        await pilot.press("h")
        assert app.widgets.views.current == "hosts"
        text = app.widgets.hosts_panel.plain
        gpu1 = text[text.index("gpu1"):]
        cpu1 = text[text.index("cpu1"):text.index("gpu1")]
        assert "no GPU" in cpu1 and "ps:1" in cpu1 and "worker:1" in cpu1
        gpu_line = next(line for line in gpu1.splitlines() if "GPU0" in line)
        assert "83%" in gpu_line and "3.0G/16G" in gpu_line and gpu_line.rstrip().endswith("worker:0")
        assert "2/3 tasks running" not in text and "3/3 tasks running" in gpu1
        app.state.view.machines["gpu1"] = {"cpu_percent": 62.5, "cpus": 16, "mem_used_bytes": 12 * 2**30,
                                     "mem_total_bytes": 64 * 2**30}
        app.widgets.hosts_panel.sync(app.state.view)
        text = app.widgets.hosts_panel.plain
        machine = next(line for line in text[text.index("gpu1"):].splitlines() if "host CPU" in line)
        assert "62%" in machine or "63%" in machine
        assert "of 16 cores" in machine and "12G/64G" in machine
        assert "host CPU" not in text[text.index("cpu1"):text.index("gpu1")]  # no reading: no line
        await pilot.press("h")
        assert app.widgets.views.current == "dashboard"


async def test_e_lists_the_history_newest_first_and_follows_new_entries() -> None:
    events = recorded_job(steps=3)
    app = make_app(events)
    async with app.run_test(size=(200, 50)) as pilot:
        await load(pilot, app, len(events))
        await pilot.press("e")
        assert app.widgets.views.current == "timeline"
        lines = app.widgets.timeline_panel.plain_lines
        assert "worker:1" in lines[0] and "failed, exit code 1: exited with 1" in lines[0]
        assert "job Created" in lines[-1]
        _push(app, ev.condition_event(RUN, "worker:0", ev.STALLED, True, "no step for 60s", ts=T0 + 20))
        _push(app, ev.action_event(RUN, "restart", "worker:0", ts=T0 + 21))
        await wait_until(pilot, lambda: "operator: restart worker:0" in app.widgets.timeline_panel.plain_lines[0])
        assert "stalled raised: no step for 60s" in app.widgets.timeline_panel.plain_lines[1]
        await pilot.press("e")
        assert app.widgets.views.current == "dashboard"


async def test_the_dashboard_keys_reach_their_target_while_the_timeline_has_the_focus() -> None:
    """The keys are the screen's, not the table's: `/`, `s` and `t` act from wherever the focus is."""
    events = recorded_job(steps=3)
    app = make_app(events)
    async with app.run_test(size=(200, 50)) as pilot:
        await load(pilot, app, len(events))
        await pilot.press("e")
        assert app.focused is app.widgets.timeline_panel
        axis = app.widgets.loss_chart.x_axis
        await pilot.press("t")
        assert app.widgets.loss_chart.x_axis != axis
        sort = app.widgets.table.sort_column
        await pilot.press("s")
        assert app.widgets.table.sort_column != sort
        await pilot.press("slash", *"ps")
        assert app.widgets.views.current == "dashboard"
        assert sorted(app.widgets.table.row_keys) == ["ps:0", "ps:1"]


async def test_ctrl_s_saves_an_svg_screenshot_into_the_run_dir(tmp_path: Path) -> None:
    events = recorded_job(steps=2)
    app = make_app(events, run_dir=tmp_path)
    async with app.run_test(size=(100, 30)) as pilot:
        await load(pilot, app, len(events))
        await pilot.press("ctrl+s")
        await wait_until(pilot, lambda: any(tmp_path.glob("dashboard-*.svg")))
        svg = next(tmp_path.glob("dashboard-*.svg")).read_text(encoding="utf-8")
        assert svg.lstrip().startswith("<svg") and "chief:0" in svg.replace("&#160;", " ")


async def test_charts_draw_every_loss_and_every_trainers_rate_and_t_switches_the_axis() -> None:
    events = recorded_job(steps=6)
    app = make_app(events)
    async with app.run_test(size=(200, 50)) as pilot:
        await load(pilot, app, len(events))
        assert [name for name, _xs, _ys in app.widgets.loss_chart._series] == ["chief:0", "worker:0", "worker:1"]
        assert app.widgets.loss_chart._series[0][1][:2] == [10.0, 20.0]  # x: steps
        assert [name for name, _xs, _ys in app.widgets.rate_chart._series] == ["chief:0", "worker:0", "worker:1"]
        assert "steps/s vs seconds" in app.widgets.rate_chart.render().plain
        plain = app.widgets.loss_chart.render().plain
        assert "loss vs step" in plain and "chief:0" in plain and "worker:1" in plain  # legend
        styles = {str(span.style) for span in app.widgets.loss_chart.render().spans}
        assert len(styles) >= 3  # one colour per task
        await pilot.press("t")
        await wait_until(pilot, lambda: app.widgets.loss_chart.up_to_date and "loss vs seconds" in
                         app.widgets.loss_chart.render().plain)
        assert app.widgets.loss_chart._series[0][1][:2] == [2.0, 3.0]  # x: seconds since the job began


async def folded(pilot, app, count: int) -> None:
    """Every event folded in and flushed to the screen (a job too short for the charts' own wait)."""
    await wait_until(pilot, lambda: app.state.view.events_applied >= count)
    app.dashboard.flush()
    await pilot.pause()


async def test_a_silent_host_greys_its_tasks_and_the_hosts_view_says_lost_drained_and_spare() -> None:
    events = [ev.state_event(RUN, "worker:0", ev.RUNNING, host="a", pid=5, ts=T0),
              ev.state_event(RUN, "worker:1", ev.RUNNING, host="b", pid=6, ts=T0),
              ev.host_event(RUN, "c", ev.HOST_SPARE, "kept ready to replace a lost host", ts=T0),
              ev.sample_event(RUN, "worker:1", cpu_percent=97.0, rss_bytes=2**29, ts=T0 + 1),
              ev.metric_event(RUN, "worker:1", step=40, loss=1.5, ts=T0 + 1),
              ev.host_event(RUN, "b", ev.HOST_UNREACHABLE, "no heartbeat for 5s; reconnecting", ts=T0 + 6)]
    app = make_app(events)
    async with app.run_test(size=(200, 50)) as pilot:
        await folded(pilot, app, len(events))
        app.widgets.table.sync(app.state.view, T0 + 40, {"worker:1"})
        # its last CPU is not shown as live: greyed, "last seen", its host's state beside it
        table = app.widgets.table
        assert table.get_cell("worker:1", "cpu").plain == table.get_cell("worker:1", "gpu").plain
        assert "97" not in app.widgets.table.get_cell("worker:1", "cpu").plain
        assert app.widgets.table.get_cell("worker:1", "host").plain == "b (unreachable)"
        assert app.widgets.table.get_cell("worker:1", "split").plain.startswith("last seen")
        assert app.widgets.table.get_cell("worker:1", "step").plain == "40"
        more = [ev.host_event(RUN, "b", ev.HOST_LOST, "no contact for 120 s", ts=T0 + 121),
                ev.state_event(RUN, "worker:1", ev.LOST, host="b", ts=T0 + 121),
                ev.state_event(RUN, "worker:1", ev.RUNNING, host="c", pid=9, ts=T0 + 125, moved_from="b"),
                ev.host_event(RUN, "a", ev.HOST_DRAINED, "maintenance", ts=T0 + 130)]
        for event in more:
            _push(app, event)
        await folded(pilot, app, len(events) + len(more))
        await pilot.press("h")
        text = app.widgets.hosts_panel.plain
        assert "LOST (no contact for 120 s)" in text[text.index("b "):]
        assert "DRAINED (maintenance)" in text[text.index("a "):]
        assert "worker:1" in text[text.index("c "):]  # the spare took the moved task
        assert app.state.view.tasks["worker:1"].moved_from == "b" and app.state.view.tasks["worker:1"].host_down is None


def test_a_pss_worker_the_job_went_on_without_stays_greyed_with_why_and_the_header_gives_the_size() -> None:
    """Issue 55: after a shrink in place the lost worker keeps its row (greyed, why) and the header
    says ``worker 1/2, min 1``."""
    from launcher.telemetry.columns import GREY
    from launcher.telemetry.jobview import JobView
    from tui.header import header_text
    from tui.task_table import task_cells

    sizes = {"chief": {"running": 1, "planned": 1, "min": 1}, "ps": {"running": 1, "planned": 1, "min": 1}}
    view = JobView()
    for event in [ev.job_event(RUN, ev.JOB_CREATED, "ps", ts=T0, roles={**sizes, "worker": {
                      "running": 2, "planned": 2, "min": 1}}),
                  ev.state_event(RUN, "worker:0", ev.RUNNING, host="b", pid=5, ts=T0),
                  ev.state_event(RUN, "worker:1", ev.RUNNING, host="c", pid=6, ts=T0),
                  ev.job_event(RUN, ev.JOB_RUNNING, "", ts=T0 + 1)]:
        view.apply(event)
    shown = header_text(view, T0 + 2, title="ps", strategy="parameter_server", hosts_total=3, live=True,
                        stream_ended=False).plain
    # a role that cannot shrink is not said
    assert "worker 2/2, min 1" in shown and "chief" not in shown.split("up", 1)[1]
    why = "host c lost (no contact for 19 s)"
    for event in [ev.state_event(RUN, "worker:1", ev.LOST, host="c", reason=why, ts=T0 + 30),
                  ev.job_event(RUN, ev.JOB_RUNNING, f"the job goes on without worker:1 ({why}); nothing restarts",
                               ts=T0 + 30, roles={**sizes, "worker": {"running": 1, "planned": 2, "min": 1}})]:
        view.apply(event)
    shown = header_text(view, T0 + 31, title="ps", strategy="parameter_server", hosts_total=3, live=True,
                        stream_ended=False).plain
    assert "worker 1/2, min 1" in shown
    cells = task_cells(view.tasks["worker:1"], T0 + 31)
    assert {style for _text, style in cells} == {GREY}
    assert cells[0][0] == "worker:1" and cells[1][0] == "c" and cells[2][0] == "lost"
    assert cells[-1][0] == f"lost: {why}"
