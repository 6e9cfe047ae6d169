"""The dashboard app, and `run_dashboard`, the one entry point the CLI calls.

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
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import Literal

from textual import work
from textual.app import App, ComposeResult
from textual.binding import Binding
from textual.containers import Horizontal, Vertical
from textual.message import Message
from textual.widgets import ContentSwitcher, Footer, Input

from launcher.control import EventSource, JobControl
from launcher.jobview import JobView
from launcher.stopsignals import StopSignals
from tui.charts import LossChart, RateChart, TaskSparklines
from tui.commands import DashboardCommands
from tui.header import JobHeader, header_text
from tui.hosts import HostsPanel
from tui.log_pane import SHOW_STARTUP_KEY, LogPane
from tui.placement import PlacementPanel
from tui.replay import SPEEDS, ReplaySource
from tui.screens import QUIT_DETACH, QUIT_TEARDOWN, ConfirmScreen, HelpScreen, QuitScreen
from tui.stacks_view import stacks_screen
from tui.task_table import TABLE_WIDTH, TaskTable
from tui.timeline_view import TimelinePanel

FLUSH_HZ = 10.0
RATE_CHART_MIN_HEIGHT = 32
"""The screen height from which the steps/s chart is drawn under the loss chart."""
TABLE_SHARE = 0.45
"""The most of the screen's height the task table takes before it scrolls."""
CHART_EVERY = 10
"""The loss chart (plotext, tens of ms to draw) is redrawn once a second at most."""

LeaveAction = Literal["teardown", "detach", "quit"]
NOT_IN_REPLAY = "not available in replay"


GC_THRESHOLD = (100_000, 50, 1000)
"""Cyclic-GC thresholds while the dashboard runs (see `DashboardApp.on_mount`)."""


@dataclass(frozen=True)
class DashboardResult:
    """How the user left the dashboard.

    ``action``: "teardown" (the caller should tear the job down), "detach" (leave the job
    running; the caller detaches), "quit" (nothing to do: the job had ended, or replay).
    ``teardown_requested``: `D` was confirmed, so ``JobControl.teardown`` was already called.
    """

    action: LeaveAction
    teardown_requested: bool = False


class StreamEnded(Message):
    """The event source is exhausted (job over, replay finished, or the stream failed)."""

    def __init__(self, error: str | None) -> None:
        super().__init__()
        self.error = error


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
        Binding("question_mark", "help", "Help", id="app.help", key_display="?"),
        Binding("q", "leave", "Quit", id="app.quit"),
    ]

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
        self._signal_loop: asyncio.AbstractEventLoop | None = None
        self._leave_asked = False  # a signal stopped or detached the job before the loop ran
        self.teardown_requested = False
        self.flushes = 0
        self.selected_task: str | None = None
        self._source_closed = False
        self._generation = 0
        self._view_reset = False

    # -- layout --------------------------------------------------------------------------

    def compose(self) -> ComposeResult:
        yield JobHeader(id="header")
        with ContentSwitcher(initial="dashboard", id="views"):
            with Vertical(id="dashboard"):
                yield Input(placeholder="filter tasks by id, role, host or state (escape clears)",
                            id="task-filter")
                yield TaskTable(id="tasks")
                with Horizontal(id="lower"):
                    yield LogPane(id="log")
                    with Vertical(id="charts"):
                        yield LossChart(id="loss")
                        yield RateChart(id="rate")
                        yield TaskSparklines(id="sparklines")
            yield PlacementPanel(id="placement")
            yield HostsPanel(id="hosts")
            yield TimelinePanel(id="timeline")
        yield Footer()

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

    def action_bindings(self) -> list[Binding]:
        """The dashboard's own bindings (for help and the command palette)."""
        return [b for b in self.BINDINGS if isinstance(b, Binding)]

    # -- events in ---------------------------------------------------------------------

    @work(thread=True, exclusive=True, group="events")
    def read_events(self) -> None:
        error: str | None = None
        try:
            for event in self.source.events():
                generation = getattr(self.source, "generation", 0)
                with self.lock:
                    if generation != self._generation:  # the replay went back: start the picture over
                        self._generation = generation
                        self.view = JobView()
                        self._view_reset = True
                    self.view.apply(event)
        except Exception as exc:  # the stream broke: say so on screen instead of dying
            error = f"event stream failed: {exc}"
        self.post_message(StreamEnded(error))

    def on_stream_ended(self, message: StreamEnded) -> None:
        self.stream_ended = True
        self.flush(force_chart=True)
        if message.error:
            self.notify(message.error, severity="error", timeout=10)
        elif not self.live:
            self.notify("Replay finished", timeout=5)

    def close_source(self) -> None:
        if not self._source_closed:
            self._source_closed = True
            self.source.close()

    def now(self) -> float:
        """Live: the clock. Replay: the time of the last event (the recording's own clock)."""
        if self.live:
            return self.clock()
        return self.view.last_ts if self.view.last_ts is not None else 0.0

    # -- events out to widgets -----------------------------------------------------------

    def flush(self, force_chart: bool = False) -> None:
        """Bring every visible widget up to date with the view: keyed diffs only."""
        self.flushes += 1
        table = self.table
        with self.lock, self.batch_update():
            view = self.view
            if self._view_reset:
                self._view_reset = False
                self.table.clear()
                self.timeline_panel.forget()
                self.log_pane.show_task(view, self.selected_task)
            now = self.now()
            if self.bell_on_end and self.live and view.ended:
                self.bell_on_end = False
                self.bell()
            dirty = view.take_dirty()
            for notice in view.take_notices():
                self.notify(notice.message, severity=notice.severity,  # type: ignore[arg-type]
                            timeout=8 if notice.severity == "error" else 4)
            self.header.show(header_text(
                view, now, title=self.job_title, strategy=self.strategy, hosts_total=self.hosts_total,
                live=self.live, stream_ended=self.stream_ended, replay=self.replay_status()))
            slow_tick = force_chart or self.stream_ended or self.flushes % CHART_EVERY == 0
            if slow_tick and table.order_changes_by_itself:
                table.reorder(view)
            table.sync(view, now, dirty)
            self._fit_table()
            selected = table.selected_task
            if selected != self.selected_task:
                self._select(selected)
            elif selected is not None and selected in dirty:
                self.log_pane.sync(view)
                self.sparklines.show(view.tasks.get(selected), now)
            elif selected is not None and slow_tick:  # its steps/s moves with the clock, events or not
                self.sparklines.show(view.tasks.get(selected), now)
            current = self.views.current
            if slow_tick and current == "dashboard":
                self.loss_chart.sync(view)
                if self.rate_chart.display:
                    self.rate_chart.sync(view)
            elif slow_tick and current == "hosts":
                self.hosts_panel.sync(view)
            elif current == "timeline":
                self.timeline_panel.sync(view)
            placement = self.placement_panel
            if view.placement_dirty and placement.display:
                view.placement_dirty = False
                placement.sync(view.placement)

    def _fit_table(self) -> None:
        """The table takes the rows it needs, up to a share of the screen; the rest goes to the panes."""
        rows = self.table.row_count
        share = max(5, int(self.size.height * TABLE_SHARE))
        wanted = min(share, rows + 1) if rows else 2
        if self.size.width < TABLE_WIDTH + 2:
            wanted += 1  # the horizontal scrollbar takes a line of its own
        if wanted != self._table_rows:
            self._table_rows = wanted
            self.table.styles.height = wanted

    def on_resize(self) -> None:
        if hasattr(self, "table"):  # the first resize comes before on_mount
            self._table_rows = -1
            self._fit_table()
            # two charts of a few rows each read as nothing: below this height only the loss is drawn
            self.rate_chart.display = self.size.height >= RATE_CHART_MIN_HEIGHT

    def _select(self, task_id: str | None) -> None:
        self.selected_task = task_id
        self.log_pane.show_task(self.view, task_id)
        self.sparklines.show(self.view.tasks.get(task_id) if task_id else None, self.now())

    def on_task_table_row_highlighted(self, message: TaskTable.RowHighlighted) -> None:
        task_id = message.task_id
        if task_id != self.selected_task:
            with self.lock:
                self._select(task_id)

    # -- actions -------------------------------------------------------------------------

    def action_select(self, delta: int) -> None:
        self.table.move_cursor(self.table.cursor_row + delta)

    def action_toggle_logs(self) -> None:
        self.views.current = "dashboard"
        self.dashboard.toggle_class("logs-only")

    def action_toggle_view(self, name: str) -> None:
        """`h`, `e`, `p`: show that view, or go back to the dashboard when it is already shown."""
        switcher = self.views
        if switcher.current == name:
            switcher.current = "dashboard"
            self.table.focus()
            return
        switcher.current = name
        with self.lock:
            if name == "placement":
                self.view.placement_dirty = False
                self.placement_panel.sync(self.view.placement)
            elif name == "hosts":
                self.hosts_panel.sync(self.view)
            elif name == "timeline":
                self.timeline_panel.sync(self.view)
                self.timeline_panel.focus()

    def action_toggle_placement(self) -> None:
        self.action_toggle_view("placement")

    def action_filter_tasks(self) -> None:
        self.views.current = "dashboard"
        self.task_filter.display = True
        self._focus_now(self.task_filter)

    def _focus_now(self, widget: Input) -> None:
        """Focus at once: `Widget.focus` waits for the message queue, and keys typed right after
        `/` (already queued) would reach the app's bindings instead of the input (`p`, `s`...)."""
        self.screen.set_focus(widget)

    def action_toggle_x_axis(self) -> None:
        with self.lock:
            self.loss_chart.toggle_x_axis(self.view)

    def action_sort(self) -> None:
        with self.lock:
            self.table.cycle_sort(self.view)
        self.notify(f"Sorted by {self.table.sort_column}", timeout=2)

    def action_reverse_sort(self) -> None:
        with self.lock:
            self.table.reverse_sort(self.view)

    def action_save_screenshot(self) -> None:
        folder = self.run_dir if self.run_dir is not None else Path.cwd()
        name = f"dashboard-{time.strftime('%Y%m%d-%H%M%S')}.svg"
        try:
            saved = self.save_screenshot(name, str(folder))
        except OSError as exc:
            self.notify(f"Screenshot not saved: {exc}", severity="error")
            return
        self.notify(f"Screenshot saved: {saved}", timeout=6)

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

    def action_seek(self, seconds: float) -> None:
        """Replay: move in the recording. Otherwise the arrows keep their usual meaning for the
        focused widget (the binding has priority so that the table cannot swallow it in a replay)."""
        replay = self.replay
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
        replay = self.replay
        if replay is None:
            self.notify("only a replay has a speed", severity="warning")
            return
        faster = [s for s in SPEEDS if s > replay.speed]
        slower = [s for s in SPEEDS if 0 < s < replay.speed]
        if direction > 0 and faster:
            replay.speed = faster[0]
        elif direction < 0 and slower:
            replay.speed = slower[-1]
        self.notify(f"Replay speed {self.replay_status()}", timeout=2)

    def action_toggle_follow(self) -> None:
        replay = self.replay
        if replay is not None and not self.stream_ended:
            replay.set_paused(not replay.paused)
            self.notify("Replay paused" if replay.paused else "Replay resumed", timeout=2)
            return
        pane = self.log_pane
        with self.lock:
            pane.set_paused(self.view, not pane.paused)

    def action_toggle_startup_lines(self) -> None:
        self.views.current = "dashboard"
        with self.lock:
            self.log_pane.set_show_startup(self.view, not self.log_pane.show_startup)

    def action_search(self) -> None:
        self.views.current = "dashboard"
        search = self.log_pane.search_input
        search.display = True
        self._focus_now(search)

    def on_input_changed(self, message: Input.Changed) -> None:
        if message.input.id == "log-search":
            with self.lock:
                self.log_pane.set_query(self.view, message.value.strip())
        elif message.input.id == "task-filter":
            with self.lock:
                self.table.set_filter(self.view, message.value)
                self._fit_table()

    def on_input_submitted(self, message: Input.Submitted) -> None:
        if message.input.id == "log-search":
            self.table.focus()
        elif message.input.id == "task-filter":
            self.task_filter.display = bool(message.value.strip())  # a kept filter stays in sight
            self.table.focus()

    def on_key(self, event: object) -> None:
        key = getattr(event, "key", None)
        search = self.log_pane.search_input
        if key == "escape" and search.has_focus:
            search.value = ""
            search.display = False
            self.table.focus()
        elif key == "escape" and (self.task_filter.has_focus or self.task_filter.display):
            self.task_filter.value = ""  # Input.Changed clears the table's filter
            self.task_filter.display = False
            self.table.focus()

    def action_help(self) -> None:
        self.push_screen(HelpScreen(self.action_bindings()))

    def _control_or_say(self) -> JobControl | None:
        if self.control is None:
            self.notify(NOT_IN_REPLAY, severity="warning")
        return self.control

    def _call_control(self, what: str, call: Callable[[], None]) -> None:
        """Control calls may touch the network: run them off the UI thread, report failures."""

        def run() -> None:
            try:
                call()
            except Exception as exc:
                self.call_from_thread(self.notify, f"{what} failed: {exc}", severity="error")

        self.run_worker(run, thread=True, group="control", name=what)

    def _task_action(self, verb: str, method: Callable[[JobControl, str], None]) -> None:
        control = self._control_or_say()
        task_id = self.table.selected_task
        if control is None:
            return
        if task_id is None:
            self.notify("No task selected", severity="warning")
            return

        def confirmed(yes: bool | None) -> None:
            if yes:
                self._call_control(f"{verb} {task_id}", partial(method, control, task_id))
                self.notify(f"{verb.capitalize()} of {task_id} requested")

        self.push_screen(ConfirmScreen(f"{verb.capitalize()} {task_id}?", verb.capitalize()), confirmed)

    def action_restart_task(self) -> None:
        self._task_action("restart", lambda control, task_id: control.restart_task(task_id))

    def action_stop_task(self) -> None:
        self._task_action("stop", lambda control, task_id: control.stop_task(task_id))

    def action_stacks(self, whole_job: bool) -> None:
        """`k` / `K`: the stacks view (tui/stacks_view.py), live or from the run dir's last capture."""
        self.push_screen(stacks_screen(self, whole_job))

    def action_teardown(self) -> None:
        control = self._control_or_say()
        if control is None:
            return

        def confirmed(yes: bool | None) -> None:
            if yes:
                self.teardown_requested = True
                self._call_control("teardown", control.teardown)
                self.notify("Teardown requested: stopping every task", severity="warning")

        self.push_screen(ConfirmScreen("Tear down the whole job? Every task on every host is stopped.",
                                       "Tear down"), confirmed)

    def action_leave(self) -> None:
        job_running = self.live and self.control is not None and not self.view.ended \
            and not self.stream_ended and not self.teardown_requested
        if not job_running:
            self.leave("quit")
            return

        def chosen(choice: str | None) -> None:
            if choice == QUIT_TEARDOWN:
                self.leave("teardown")
            elif choice == QUIT_DETACH:
                self.leave("detach")

        self.push_screen(QuitScreen(), chosen)

    async def action_quit(self) -> None:
        """ctrl+q asks the same question as `q`: quitting never silently abandons a running job."""
        if not isinstance(self.screen, QuitScreen):
            self.action_leave()

    def leave_from_signal(self) -> None:
        """Quit: a signal stopped or detached the job already (`launcher/stopsignals.py`). Called
        from the handler, on this app's thread between two bytecodes: the loop does the work."""
        self._leave_asked = True
        if self._signal_loop is not None:
            self._signal_loop.call_soon_threadsafe(self.leave, "quit")

    def leave(self, action: LeaveAction) -> None:
        if self.teardown_requested and action == "quit":
            action = "teardown"
        self.close_source()
        self.exit(DashboardResult(action, self.teardown_requested))


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
