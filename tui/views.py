"""What the dashboard draws, and how the user moves between its views, sorts, filters and searches.

The UI thread flushes the `JobView` to the widgets at `FLUSH_HZ`: keyed diffs only, the slow
charts once a second. `DashboardViews` is a part the app holds; it sees the app through
`ViewsOwner`, the state and widgets it reads and the few Textual services it calls.
"""

from __future__ import annotations

import threading
import time
from contextlib import AbstractContextManager
from pathlib import Path
from typing import Protocol

from textual.geometry import Size
from textual.notifications import SeverityLevel
from textual.screen import Screen
from textual.widget import Widget
from textual.widgets import ContentSwitcher, Input

from launcher.telemetry.jobview import JobView
from tui.charts import LossChart, RateChart, TaskSparklines
from tui.frame import CHART_EVERY, RATE_CHART_MIN_HEIGHT, TABLE_SHARE
from tui.header import JobHeader, header_text
from tui.hosts_view import HostsPanel
from tui.log_pane import LogPane
from tui.placement_view import PlacementPanel
from tui.task_table import TABLE_WIDTH, TaskTable
from tui.timeline_view import TimelinePanel


class ViewsOwner(Protocol):
    """What the views use of the app: the job's picture, the widgets, and notify, bell and the rest."""

    view: JobView
    lock: threading.Lock
    live: bool
    bell_on_end: bool
    stream_ended: bool
    view_reset: bool
    flushes: int
    selected_task: str | None
    job_title: str
    strategy: str
    hosts_total: int
    run_dir: Path | None
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

    @property
    def size(self) -> Size: ...

    @property
    def screen(self) -> Screen[object]: ...

    def now(self) -> float: ...

    def replay_status(self) -> str: ...

    def batch_update(self) -> AbstractContextManager[None]: ...

    def bell(self) -> None: ...

    def notify(self, message: str, *, title: str = "", severity: SeverityLevel = "information",
               timeout: float | None = None, markup: bool = True) -> None: ...

    def save_screenshot(self, filename: str | None = None, path: str | None = None,
                        time_format: str | None = None) -> str: ...


class DashboardViews:
    """Drawing the view and the keys that change what is shown."""

    def __init__(self, owner: ViewsOwner) -> None:
        self.owner = owner
        self._table_rows = -1

    def flush(self, force_chart: bool = False) -> None:
        """Bring every visible widget up to date with the view: keyed diffs only."""
        app = self.owner
        app.flushes += 1
        table = app.table
        with app.lock, app.batch_update():
            view = app.view
            if app.view_reset:
                app.view_reset = False
                app.table.clear()
                app.timeline_panel.forget()
                app.log_pane.show_task(view, app.selected_task)
            now = app.now()
            if app.bell_on_end and app.live and view.ended:
                app.bell_on_end = False
                app.bell()
            dirty = view.take_dirty()
            for notice in view.take_notices():
                app.notify(notice.message, severity=notice.severity,  # type: ignore[arg-type]
                           timeout=8 if notice.severity == "error" else 4)
            app.header.show(header_text(
                view, now, title=app.job_title, strategy=app.strategy, hosts_total=app.hosts_total,
                live=app.live, stream_ended=app.stream_ended, replay=app.replay_status()))
            slow_tick = force_chart or app.stream_ended or app.flushes % CHART_EVERY == 0
            if slow_tick and table.order_changes_by_itself:
                table.reorder(view)
            table.sync(view, now, dirty)
            self.fit_table()
            selected = table.selected_task
            if selected != app.selected_task:
                self._select(selected)
            elif selected is not None and selected in dirty:
                app.log_pane.sync(view)
                app.sparklines.show(view.tasks.get(selected), now, view.step_times)
            elif selected is not None and slow_tick:  # its steps/s moves with the clock, events or not
                app.sparklines.show(view.tasks.get(selected), now, view.step_times)
            current = app.views.current
            if slow_tick and current == "dashboard":
                app.loss_chart.sync(view)
                if app.rate_chart.display:
                    app.rate_chart.sync(view)
            elif slow_tick and current == "hosts":
                app.hosts_panel.sync(view)
            elif current == "timeline":
                app.timeline_panel.sync(view)
            placement = app.placement_panel
            if view.placement_dirty and placement.display:
                view.placement_dirty = False
                placement.sync(view.placement)

    def fit_table(self) -> None:
        """The table takes the rows it needs, up to a share of the screen; the rest goes to the panes."""
        app = self.owner
        rows = app.table.row_count
        share = max(5, int(app.size.height * TABLE_SHARE))
        wanted = min(share, rows + 1) if rows else 2
        if app.size.width < TABLE_WIDTH + 2:
            wanted += 1  # the horizontal scrollbar takes a line of its own
        if wanted != self._table_rows:
            self._table_rows = wanted
            app.table.styles.height = wanted

    def resized(self) -> None:
        self._table_rows = -1
        self.fit_table()
        # two charts of a few rows each read as nothing: below this height only the loss is drawn
        self.owner.rate_chart.display = self.owner.size.height >= RATE_CHART_MIN_HEIGHT

    def _select(self, task_id: str | None) -> None:
        app = self.owner
        app.selected_task = task_id
        app.log_pane.show_task(app.view, task_id)
        app.sparklines.show(app.view.tasks.get(task_id) if task_id else None, app.now(), app.view.step_times)

    def row_highlighted(self, task_id: str | None) -> None:
        if task_id != self.owner.selected_task:
            with self.owner.lock:
                self._select(task_id)

    def select(self, delta: int) -> None:
        table = self.owner.table
        table.move_cursor(table.cursor_row + delta)

    def toggle_logs(self) -> None:
        self.owner.views.current = "dashboard"
        self.owner.dashboard.toggle_class("logs-only")

    def toggle_view(self, name: str) -> None:
        """`h`, `e`, `p`: show that view, or go back to the dashboard when it is already shown."""
        app = self.owner
        switcher = app.views
        if switcher.current == name:
            switcher.current = "dashboard"
            app.table.focus()
            return
        switcher.current = name
        with app.lock:
            if name == "placement":
                app.view.placement_dirty = False
                app.placement_panel.sync(app.view.placement)
            elif name == "hosts":
                app.hosts_panel.sync(app.view)
            elif name == "timeline":
                app.timeline_panel.sync(app.view)
                app.timeline_panel.focus()

    def filter_tasks(self) -> None:
        self.owner.views.current = "dashboard"
        self.owner.task_filter.display = True
        self._focus_now(self.owner.task_filter)

    def _focus_now(self, widget: Input) -> None:
        """Focus at once: `Widget.focus` waits for the message queue, and keys typed right after
        `/` (already queued) would reach the app's bindings instead of the input (`p`, `s`...)."""
        self.owner.screen.set_focus(widget)

    def toggle_x_axis(self) -> None:
        with self.owner.lock:
            self.owner.loss_chart.toggle_x_axis(self.owner.view)

    def sort(self) -> None:
        app = self.owner
        with app.lock:
            app.table.cycle_sort(app.view)
        app.notify(f"Sorted by {app.table.sort_column}", timeout=2)

    def reverse_sort(self) -> None:
        with self.owner.lock:
            self.owner.table.reverse_sort(self.owner.view)

    def toggle_startup_lines(self) -> None:
        app = self.owner
        app.views.current = "dashboard"
        with app.lock:
            app.log_pane.set_show_startup(app.view, not app.log_pane.show_startup)

    def save_screenshot(self) -> None:
        app = self.owner
        folder = app.run_dir if app.run_dir is not None else Path.cwd()
        name = f"dashboard-{time.strftime('%Y%m%d-%H%M%S')}.svg"
        try:
            saved = app.save_screenshot(name, str(folder))
        except OSError as exc:
            app.notify(f"Screenshot not saved: {exc}", severity="error")
            return
        app.notify(f"Screenshot saved: {saved}", timeout=6)

    def search(self) -> None:
        self.owner.views.current = "dashboard"
        search = self.owner.log_pane.search_input
        search.display = True
        self._focus_now(search)

    def input_changed(self, message: Input.Changed) -> None:
        app = self.owner
        if message.input.id == "log-search":
            with app.lock:
                app.log_pane.set_query(app.view, message.value.strip())
        elif message.input.id == "task-filter":
            with app.lock:
                app.table.set_filter(app.view, message.value)
                self.fit_table()

    def input_submitted(self, message: Input.Submitted) -> None:
        app = self.owner
        if message.input.id == "log-search":
            app.table.focus()
        elif message.input.id == "task-filter":
            app.task_filter.display = bool(message.value.strip())  # a kept filter stays in sight
            app.table.focus()

    def key(self, key: str | None) -> None:
        """Escape closes the log search or the task filter (clearing it) and goes back to the table."""
        app = self.owner
        search = app.log_pane.search_input
        if key == "escape" and search.has_focus:
            search.value = ""
            search.display = False
            app.table.focus()
        elif key == "escape" and (app.task_filter.has_focus or app.task_filter.display):
            app.task_filter.value = ""  # Input.Changed clears the table's filter
            app.task_filter.display = False
            app.table.focus()
