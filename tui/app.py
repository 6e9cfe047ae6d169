"""The dashboard app, and `run_dashboard`, the one entry point the CLI calls.

`DashboardApp` is Textual's App: it owns the dashboard's state (the `JobView`, its lock, the
selection, how the stream stands) and its widgets, holds the key bindings, starts and ends, and
hands each key and message to one of three parts, each an object of its own module that sees the
app through a small Protocol: `DashboardViews` (views.py: drawing, moving between views),
`LiveFeed` (live_feed.py: events in, replay moves) and `JobActions` (actions.py: acting on the
job, leaving). The widget tree is frame.py's.

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
import threading
import time
from collections.abc import Callable
from pathlib import Path

from textual import events
from textual.app import App, ComposeResult
from textual.binding import Binding
from textual.widget import Widget
from textual.widgets import ContentSwitcher, Input

from launcher.supervise.control import EventSource, JobControl
from launcher.supervise.stopsignals import StopSignals
from launcher.telemetry.jobview import JobView
from tui.actions import JobActions
from tui.charts import LossChart, RateChart, TaskSparklines
from tui.commands import DashboardCommands
from tui.frame import FLUSH_HZ, GC_THRESHOLD, RATE_CHART_MIN_HEIGHT, DashboardResult, LeaveAction, dashboard_widgets
from tui.header import JobHeader
from tui.hosts_view import HostsPanel
from tui.live_feed import LiveFeed, StreamEnded
from tui.log_pane import SHOW_STARTUP_KEY, LogPane
from tui.placement_view import PlacementPanel
from tui.replay import ReplaySource
from tui.task_table import TaskTable
from tui.timeline_view import TimelinePanel
from tui.views import DashboardViews


class DashboardApp(App[DashboardResult]):
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

    table: TaskTable
    log_pane: LogPane
    header: JobHeader
    loss_chart: LossChart
    rate_chart: RateChart
    sparklines: TaskSparklines
    placement_panel: PlacementPanel
    hosts_panel: HostsPanel
    timeline_panel: TimelinePanel
    task_filter: Input
    views: ContentSwitcher
    dashboard: Widget

    def __init__(self, source: EventSource, control: JobControl | None, *, title: str, strategy: str,
                 hosts_total: int, live: bool = True, clock: Callable[[], float] = time.time,
                 run_dir: Path | None = None, bell_on_end: bool = False) -> None:
        super().__init__()
        self.bell_on_end = bell_on_end  # [notify] bell: ring once when a live job ends
        self.source = source
        self.control = control
        self.job_title = title
        self.strategy = strategy
        self.hosts_total = hosts_total
        self.live = live
        self.clock = clock
        self.run_dir = run_dir
        self.view = JobView()
        self.lock = threading.Lock()
        self.stream_ended = False
        self.view_reset = False  # the feed started the picture over: the widgets forget theirs
        self.teardown_requested = False
        self.flushes = 0
        self.selected_task: str | None = None
        self._signal_loop: asyncio.AbstractEventLoop | None = None
        self._leave_asked = False  # a signal stopped or detached the job before the loop ran
        self._source_closed = False
        self.drawing = DashboardViews(self)
        self.feed = LiveFeed(self)
        self.job_actions = JobActions(self)

    def compose(self) -> ComposeResult:
        yield from dashboard_widgets()

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
        self.run_worker(self.feed.read_events, name="read_events", group="events", exclusive=True, thread=True)

    def on_unmount(self) -> None:
        previous = getattr(self, "_gc_threshold", None)
        if previous is not None:
            gc.set_threshold(*previous)
            gc.unfreeze()
        self.close_source()

    # what the parts share

    def flush(self, force_chart: bool = False) -> None:
        """Bring every visible widget up to date with the view (views.py)."""
        self.drawing.flush(force_chart)

    def now(self) -> float:
        """Live: the clock. Replay: the time of the last event (the recording's own clock)."""
        if self.live:
            return self.clock()
        return self.view.last_ts if self.view.last_ts is not None else 0.0

    @property
    def replay(self) -> ReplaySource | None:
        return self.source if not self.live and isinstance(self.source, ReplaySource) else None

    def replay_status(self) -> str:
        """``2x``, ``2x, paused``; empty when this is not a replay."""
        replay = self.replay
        if replay is None:
            return ""
        speed = "max speed" if replay.speed == 0 else f"{replay.speed:g}x"
        return f"{speed}, paused" if replay.paused else speed

    def action_bindings(self) -> list[Binding]:
        """The dashboard's own bindings (for help and the command palette)."""
        return [b for b in self.BINDINGS if isinstance(b, Binding)]

    def close_source(self) -> None:
        if not self._source_closed:
            self._source_closed = True
            self.source.close()

    def leave(self, action: LeaveAction) -> None:
        self.job_actions.leave(action)

    def leave_from_signal(self) -> None:
        """Quit: a signal stopped or detached the job already (`launcher/supervise/stopsignals.py`). Called
        from the handler, on this app's thread between two bytecodes: the loop does the work."""
        self._leave_asked = True
        if self._signal_loop is not None:
            self._signal_loop.call_soon_threadsafe(self.leave, "quit")

    # messages and keys, each handed to its part

    def on_stream_ended(self, message: StreamEnded) -> None:
        self.feed.stream_ended(message)

    def on_resize(self) -> None:
        if hasattr(self, "table"):  # the first resize comes before on_mount
            self.drawing.resized()

    def on_task_table_row_highlighted(self, message: TaskTable.RowHighlighted) -> None:
        self.drawing.row_highlighted(message.task_id)

    def on_input_changed(self, message: Input.Changed) -> None:
        self.drawing.input_changed(message)

    def on_input_submitted(self, message: Input.Submitted) -> None:
        self.drawing.input_submitted(message)

    def on_key(self, event: events.Key) -> None:
        self.drawing.key(event.key)

    def action_select(self, delta: int) -> None:
        self.drawing.select(delta)

    def action_toggle_logs(self) -> None:
        self.drawing.toggle_logs()

    def action_toggle_view(self, name: str) -> None:
        self.drawing.toggle_view(name)

    def action_filter_tasks(self) -> None:
        self.drawing.filter_tasks()

    def action_sort(self) -> None:
        self.drawing.sort()

    def action_reverse_sort(self) -> None:
        self.drawing.reverse_sort()

    def action_toggle_x_axis(self) -> None:
        self.drawing.toggle_x_axis()

    def action_search(self) -> None:
        self.drawing.search()

    def action_toggle_startup_lines(self) -> None:
        self.drawing.toggle_startup_lines()

    def action_save_screenshot(self) -> None:
        self.drawing.save_screenshot()

    def action_seek(self, seconds: float) -> None:
        self.feed.seek(seconds)

    def action_replay_speed(self, direction: int) -> None:
        self.feed.replay_speed(direction)

    def action_toggle_follow(self) -> None:
        self.feed.toggle_follow()

    def action_help(self) -> None:
        self.job_actions.help()

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

    async def action_quit(self) -> None:
        """ctrl+q asks the same question as `q`: quitting never silently abandons a running job."""
        self.job_actions.quit()


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
