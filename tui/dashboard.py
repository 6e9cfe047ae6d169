"""The dashboard screen: the main screen of the app, holding the job's keys, actions and drawing.

Who owns which keys: `DashboardScreen` binds every dashboard key (`DASHBOARD_BINDINGS`, listed in this
order by the footer, the help and the command palette). They are the screen's, not a widget's,
because each reaches its target from wherever the focus is on this screen (the table, the
timeline, the log): `/` filters the table and `t` turns the loss chart's axis while the timeline
has the focus. The widgets keep their own state and drawing (`TaskTable`: sort, filter,
selection; `LogPane`: search, pause, start-up lines; `LossChart`: its axis) and the keys that act
only on them where they have focus (the table's cursor keys). The modal screens bind their own
keys (screens.py, stacks_view.py); the app keeps only Textual's, with ctrl+q asking as `q` does.

The screen draws the state at `FLUSH_HZ` through `DashboardDrawing` (views.py) and acts on the
job through `JobActions` (actions.py); the view keys, the log keys and the replay keys are its own
actions below. Everything here runs on the UI thread.
"""

from __future__ import annotations

import time
from pathlib import Path

from textual import events
from textual.app import ComposeResult
from textual.binding import Binding
from textual.screen import Screen
from textual.widgets import Input

from tui.actions import JobActions
from tui.frame import FLUSH_HZ, RATE_CHART_MIN_HEIGHT, DashboardState, DashboardWidgets, dashboard_widgets
from tui.log_pane import SHOW_STARTUP_KEY
from tui.merged_log import MergedLogLines
from tui.replay import SPEEDS
from tui.screens import HelpScreen
from tui.task_table import TaskTable
from tui.views import DashboardDrawing

DASHBOARD_BINDINGS: list[Binding | tuple[str, str] | tuple[str, str, str]] = [
    Binding("up", "select(-1)", "Previous task", id="select.up", show=False),
    Binding("down", "select(1)", "Next task", id="select.down", show=False),
    Binding("l", "toggle_logs", "Logs", id="view.logs"),
    Binding("h", "toggle_view('hosts')", "Hosts", id="view.hosts"),
    Binding("e", "toggle_view('timeline')", "Timeline", id="view.timeline"),
    Binding("p", "toggle_view('placement')", "Placement", id="view.placement"),
    Binding("L", "toggle_view('merged')",
            "Merged log of all tasks (/ filters: task=worker:* level=stderr|warn REGEX; enter opens a line's task log)",
            id="view.merged", show=False),
    Binding("slash", "filter_tasks", "Filter tasks", id="tasks.filter", key_display="/"),
    Binding("s", "sort", "Sort", id="tasks.sort"),
    Binding("t", "toggle_x_axis", "Loss chart: step/time axis", id="chart.x_axis", show=False),
    Binding("S", "reverse_sort", "Reverse sort", id="tasks.reverse", show=False),
    Binding("space,f", "toggle_follow", "Follow/pause log (replay: space pauses the replay)",
            id="log.follow", key_display="space/f", show=False),
    Binding("left", "seek(-10)", "Replay: back 10 s", id="replay.back", show=False, priority=True),
    Binding("right", "seek(10)", "Replay: forward 10 s", id="replay.forward", show=False, priority=True),
    Binding("plus", "replay_speed(1)", "Replay: faster", id="replay.faster", key_display="+", show=False),
    Binding("minus", "replay_speed(-1)", "Replay: slower", id="replay.slower", key_display="-", show=False),
    Binding("ctrl+f", "search", "Search log", id="log.search", key_display="ctrl+f", show=False),
    Binding(SHOW_STARTUP_KEY, "toggle_startup_lines", "Show/hide TensorFlow start-up lines in the log",
            id="log.startup", show=False),
    Binding("ctrl+s", "save_screenshot", "Save screenshot (SVG)", id="app.screenshot", show=False),
    Binding("r", "restart_task", "Restart task", id="task.restart"),
    Binding("x", "stop_task", "Stop task", id="task.stop"),
    Binding("k", "stacks(False)", "Stacks of the selected task", id="task.stacks", show=False),
    Binding("K", "stacks(True)", "Stacks of the whole job (grouped, suspect first)", id="job.stacks",
            show=False),
    Binding("D", "teardown", "Tear down job", id="job.teardown"),
    Binding("P", "profile", "Profile the selected task (TensorFlow profiler, 2 s)", id="task.profile",
            show=False),
    Binding("question_mark", "help", "Help", id="app.help", key_display="?"),
    Binding("q", "leave", "Quit", id="app.quit"),
]
"""The dashboard's keys, in the order the footer, the help and the command palette list them."""


class DashboardScreen(Screen[None]):
    """Shows one job live (or a replay): its widgets, its keys, and what they do."""

    BINDINGS = DASHBOARD_BINDINGS

    widgets: DashboardWidgets
    drawing: DashboardDrawing
    job_actions: JobActions

    def __init__(self, state: DashboardState) -> None:
        super().__init__()
        self.state = state

    def compose(self) -> ComposeResult:
        yield from dashboard_widgets()

    def on_mount(self) -> None:
        self.widgets = w = DashboardWidgets.of(self)
        self.drawing = DashboardDrawing(self.state, w, self)
        self.job_actions = JobActions(self.state, w, self)
        w.rate_chart.display = self.size.height >= RATE_CHART_MIN_HEIGHT
        w.task_filter.display = False
        w.table.focus()
        self.set_interval(1 / FLUSH_HZ, self.flush)

    def flush(self, force_chart: bool = False) -> None:
        """Bring every visible widget up to date with the view (views.py)."""
        self.drawing.flush(force_chart)

    # messages

    def on_resize(self) -> None:
        if hasattr(self, "drawing"):  # the first resize may come before on_mount
            self.drawing.resized()

    def on_task_table_row_highlighted(self, message: TaskTable.RowHighlighted) -> None:
        if message.task_id != self.state.selected_task:
            with self.state.lock:
                self.drawing.select(message.task_id)

    def on_input_changed(self, message: Input.Changed) -> None:
        state, w = self.state, self.widgets
        if message.input.id == "log-search":
            with state.lock:
                w.log_pane.set_query(state.view, message.value.strip())
        elif message.input.id == "task-filter":
            with state.lock:
                w.table.set_filter(state.view, message.value)
                self.drawing.fit_table()
        elif message.input.id == "merged-filter":
            with state.lock:
                w.merged_panel.set_filter(state.view, message.value)

    def on_input_submitted(self, message: Input.Submitted) -> None:
        w = self.widgets
        if message.input.id == "log-search":
            w.table.focus()
        elif message.input.id == "task-filter":
            w.task_filter.display = bool(message.value.strip())  # a kept filter stays in sight
            w.table.focus()
        elif message.input.id == "merged-filter":
            w.merged_panel.close_filter(kept=True)

    def on_log_pane_search_closed(self) -> None:
        self.widgets.table.focus()

    def on_merged_log_lines_jump(self, message: MergedLogLines.Jump) -> None:
        """Enter on a merged-log line: that task selected, its own log paused at that line."""
        state, w = self.state, self.widgets
        w.views.current = "dashboard"
        with state.lock:
            if not w.table.select_task(message.task):  # hidden by the table's filter: clear it
                w.task_filter.value = ""
                w.task_filter.display = False
                w.table.set_filter(state.view, "")
                self.drawing.fit_table()
                w.table.select_task(message.task)
            self.drawing.select(message.task)
            found = w.log_pane.reveal(state.view, message.task, message.number)
        w.table.focus()
        if not found:
            self.notify(f"{message.task}'s log no longer keeps that line (it keeps its last lines only)",
                        severity="warning")

    def on_key(self, event: events.Key) -> None:
        """Escape closes the task filter (clearing it) and goes back to the table (the log pane
        closes its own search)."""
        w = self.widgets
        if w.views.current == "merged":  # the merged log has its own filter; escape there is its own
            return
        if event.key == "escape" and (w.task_filter.has_focus or w.task_filter.display):
            w.task_filter.value = ""  # Input.Changed clears the table's filter
            w.task_filter.display = False
            w.table.focus()

    # what is shown

    def action_select(self, delta: int) -> None:
        table = self.widgets.table
        table.move_cursor(table.cursor_row + delta)

    def action_toggle_logs(self) -> None:
        self.widgets.views.current = "dashboard"
        self.widgets.dashboard.toggle_class("logs-only")

    def action_toggle_view(self, name: str) -> None:
        """`h`, `e`, `p`, `L`: show that view, or go back to the dashboard when it is already shown."""
        state, w = self.state, self.widgets
        if w.views.current == name:
            w.views.current = "dashboard"
            w.table.focus()
            return
        w.views.current = name
        with state.lock:
            if name == "placement":
                state.view.placement_dirty = False
                w.placement_panel.sync(state.view.placement)
            elif name == "hosts":
                w.hosts_panel.sync(state.view)
            elif name == "timeline":
                w.timeline_panel.sync(state.view)
                w.timeline_panel.focus()
            elif name == "merged":
                w.merged_panel.sync(state.view)
                w.merged_panel.lines.focus()

    def action_filter_tasks(self) -> None:
        self.widgets.views.current = "dashboard"
        self.widgets.task_filter.display = True
        self._focus_now(self.widgets.task_filter)

    def _focus_now(self, widget: Input) -> None:
        """Focus at once: `Widget.focus` waits for the message queue, and keys typed right after
        `/` (already queued) would reach the screen's bindings instead of the input (`p`, `s`...)."""
        self.set_focus(widget)

    def action_sort(self) -> None:
        table = self.widgets.table
        with self.state.lock:
            table.cycle_sort(self.state.view)
        self.notify(f"Sorted by {table.sort_column}", timeout=2)

    def action_reverse_sort(self) -> None:
        with self.state.lock:
            self.widgets.table.reverse_sort(self.state.view)

    def action_toggle_x_axis(self) -> None:
        with self.state.lock:
            self.widgets.loss_chart.toggle_x_axis(self.state.view)

    def action_save_screenshot(self) -> None:
        folder = self.state.run_dir if self.state.run_dir is not None else Path.cwd()
        name = f"dashboard-{time.strftime('%Y%m%d-%H%M%S')}.svg"
        try:
            saved = self.app.save_screenshot(name, str(folder))
        except OSError as exc:
            self.notify(f"Screenshot not saved: {exc}", severity="error")
            return
        self.notify(f"Screenshot saved: {saved}", timeout=6)

    def action_help(self) -> None:
        self.app.push_screen(HelpScreen(dashboard_bindings()))

    # the log

    def action_search(self) -> None:
        self.widgets.views.current = "dashboard"
        self._focus_now(self.widgets.log_pane.open_search())

    def action_toggle_startup_lines(self) -> None:
        state, pane = self.state, self.widgets.log_pane
        self.widgets.views.current = "dashboard"
        with state.lock:
            pane.set_show_startup(state.view, not pane.show_startup)

    def action_toggle_follow(self) -> None:
        """Space / f: pause or follow the log; in a replay that is still playing, space pauses it."""
        state = self.state
        replay = state.replay
        if replay is not None and not state.stream_ended:
            replay.set_paused(not replay.paused)
            self.notify("Replay paused" if replay.paused else "Replay resumed", timeout=2)
            return
        pane = self.widgets.log_pane
        with state.lock:
            pane.set_paused(state.view, not pane.paused)

    # a replay

    def action_seek(self, seconds: float) -> None:
        """Replay: move in the recording. Otherwise the arrows keep their usual meaning for the
        focused widget (the binding has priority so that the table cannot swallow it in a replay)."""
        replay = self.state.replay
        focused = self.focused
        if replay is None or isinstance(focused, Input):
            prefix = "cursor" if isinstance(focused, Input) else "scroll"
            method = getattr(focused, f"action_{prefix}_{'left' if seconds < 0 else 'right'}", None)
            if method is not None:
                method()
            return
        replay.seek(seconds)
        self.notify(f"Replay {'back' if seconds < 0 else 'forward'} {abs(seconds):g} s", timeout=2)

    def action_replay_speed(self, direction: int) -> None:
        replay = self.state.replay
        if replay is None:
            self.notify("only a replay has a speed", severity="warning")
            return
        faster = [s for s in SPEEDS if s > replay.speed]
        slower = [s for s in SPEEDS if 0 < s < replay.speed]
        if direction > 0 and faster:
            replay.speed = faster[0]
        elif direction < 0 and slower:
            replay.speed = slower[-1]
        self.notify(f"Replay speed {self.state.replay_status()}", timeout=2)

    # the job (actions.py)

    def action_restart_task(self) -> None:
        self.job_actions.restart_task()

    def action_stop_task(self) -> None:
        self.job_actions.stop_task()

    def action_stacks(self, whole_job: bool) -> None:
        self.job_actions.stacks(whole_job)

    def action_profile(self) -> None:
        self.job_actions.profile()

    def action_teardown(self) -> None:
        self.job_actions.teardown()

    def action_leave(self) -> None:
        self.job_actions.ask_leave()


def dashboard_bindings() -> list[Binding]:
    """The dashboard's own bindings (for the help and the command palette)."""
    return [b for b in DASHBOARD_BINDINGS if isinstance(b, Binding)]
