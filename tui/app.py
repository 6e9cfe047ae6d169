"""The dashboard app, and `run_dashboard`, the one entry point the CLI calls.

`DashboardApp` puts together the layers of frame.py (state, widgets), views.py (drawing and
moving between views), live_feed.py (events in) and actions.py (acting on the job, leaving),
with the key bindings and the start and end of the app.

Threading: `EventSource.events()` blocks, so it is read in a thread worker that folds each
event into the `JobView` under a lock. The UI thread flushes the view to the widgets at
`FLUSH_HZ` (set_interval): however fast events arrive, the screen is rewritten at most ten
times a second, and only the cells that changed. Widgets are touched on the UI thread only;
the worker reaches it through `post_message`.

Leaving: the app returns a `DashboardResult` and does not act on the job itself when
the user quits. The caller acts on ``result.action``: "teardown" -> tear the job down,
"detach" -> detach from it (tasks keep running), "quit" -> the job had ended, or this was a
replay. Only `D` (tear down, confirmed) and `r`/`x` call `JobControl` from inside the app.
"""

from __future__ import annotations

import asyncio
import gc
from pathlib import Path

from textual.app import App
from textual.binding import Binding
from textual.widgets import ContentSwitcher, Input

from launcher.supervise.control import EventSource, JobControl
from launcher.supervise.stopsignals import StopSignals
from tui.actions import JobActions
from tui.charts import LossChart, RateChart, TaskSparklines
from tui.commands import DashboardCommands
from tui.frame import FLUSH_HZ, GC_THRESHOLD, RATE_CHART_MIN_HEIGHT, DashboardResult
from tui.header import JobHeader
from tui.hosts import HostsPanel
from tui.live_feed import LiveFeed
from tui.log_pane import SHOW_STARTUP_KEY, LogPane
from tui.placement import PlacementPanel
from tui.task_table import TaskTable
from tui.timeline_view import TimelinePanel


class DashboardApp(JobActions, LiveFeed):
    """Shows one job live (or a replay) and asks the supervisor to act on it."""

    CSS_PATH = Path(__file__).with_name("dashboard.tcss")  # absolute: subclasses live elsewhere
    TITLE = "distlaunch"
    COMMANDS = App.COMMANDS | {DashboardCommands}
    BINDINGS = [
        Binding("up", "select(-1)", "Previous task", id="select.up", show=False),
        Binding("down", "select(1)", "Next task", id="select.down", show=False),
        Binding("l", "toggle_logs", "Logs", id="view.logs"),
        Binding("h", "toggle_view('hosts')", "Hosts", id="view.hosts"),
        Binding("e", "toggle_view('timeline')", "Timeline", id="view.timeline"),
        Binding("p", "toggle_view('placement')", "Placement", id="view.placement"),
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

    def on_mount(self) -> None:
        self._signal_loop = asyncio.get_running_loop()
        if self._leave_asked:
            self.leave("quit")
        self.title = f"distlaunch — {self.job_title}"
        # held here: `query_one` on the app searches the active screen, which may be a modal
        self.table = self.query_one(TaskTable)
        self.log_pane = self.query_one(LogPane)
        self.header = self.query_one(JobHeader)
        self.loss_chart = self.query_one(LossChart)
        self.rate_chart = self.query_one(RateChart)
        self.rate_chart.display = self.size.height >= RATE_CHART_MIN_HEIGHT
        self.sparklines = self.query_one(TaskSparklines)
        self.placement_panel = self.query_one(PlacementPanel)
        self.hosts_panel = self.query_one(HostsPanel)
        self.timeline_panel = self.query_one(TimelinePanel)
        self.task_filter = self.query_one("#task-filter", Input)
        self.task_filter.display = False
        self._table_rows = -1
        self.views = self.query_one(ContentSwitcher)
        self.dashboard = self.query_one("#dashboard")
        self.log_pane.search_input.display = False
        self.table.focus()
        self.set_interval(1 / FLUSH_HZ, self.flush)
        self._gc_threshold = gc.get_threshold()
        # Full collections over the many small objects of a big job stalled key handling for
        # 100-150 ms now and then (benchmarks/tui_replay.py, p99 124-130 ms vs 67-77 ms with
        # these settings): freeze what exists now and collect young objects less often.
        gc.freeze()
        gc.set_threshold(*GC_THRESHOLD)
        self.read_events()

    def on_unmount(self) -> None:
        previous = getattr(self, "_gc_threshold", None)
        if previous is not None:
            gc.set_threshold(*previous)
            gc.unfreeze()
        self.close_source()

    def action_toggle_startup_lines(self) -> None:
        self.views.current = "dashboard"
        with self.lock:
            self.log_pane.set_show_startup(self.view, not self.log_pane.show_startup)

    def leave_from_signal(self) -> None:
        """Quit: a signal stopped or detached the job already (`launcher/supervise/stopsignals.py`). Called
        from the handler, on this app's thread between two bytecodes: the loop does the work."""
        self._leave_asked = True
        if self._signal_loop is not None:
            self._signal_loop.call_soon_threadsafe(self.leave, "quit")


class DashboardError(RuntimeError):
    """The dashboard itself failed (Textual has printed the traceback). The job was not acted
    on: the caller decides, e.g. keep it running headless or detach."""


def run_dashboard(source: EventSource, control: JobControl | None, *, title: str, strategy: str,
                  hosts_total: int, live: bool = True, run_dir: Path | None = None,
                  bell_on_end: bool = False, signals: StopSignals | None = None) -> DashboardResult:
    """Run the dashboard until the user leaves (blocking); see `DashboardResult` for what to do next.
    ``signals``: the launcher's stop signals, which make the app quit while it runs.

    Raises `DashboardError` when the app crashed rather than being left by the user."""
    app = DashboardApp(source, control, title=title, strategy=strategy, hosts_total=hosts_total, live=live,
                       run_dir=run_dir, bell_on_end=bell_on_end)
    if signals is not None:
        signals.leave = app.leave_from_signal
    try:
        result = app.run()
    finally:
        if signals is not None:
            signals.leave = None
        app.close_source()
    if app.return_code:
        raise DashboardError(f"the dashboard stopped with an error (exit code {app.return_code})")
    return result if result is not None else DashboardResult("quit")
