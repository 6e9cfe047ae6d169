"""What the dashboard draws, and how the user moves between its views, sorts, filters and searches.

The UI thread flushes the `JobView` to the widgets at `FLUSH_HZ`: keyed diffs only, the slow
charts once a second.
"""

from __future__ import annotations

import time
from pathlib import Path

from textual.widgets import Input

from tui.frame import CHART_EVERY, RATE_CHART_MIN_HEIGHT, TABLE_SHARE, DashboardFrame
from tui.header import header_text
from tui.task_table import TABLE_WIDTH, TaskTable


class DashboardViews(DashboardFrame):
    """Drawing the view and the keys that change what is shown."""

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
                self.sparklines.show(view.tasks.get(selected), now, view.step_times)
            elif selected is not None and slow_tick:  # its steps/s moves with the clock, events or not
                self.sparklines.show(view.tasks.get(selected), now, view.step_times)
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
        self.sparklines.show(self.view.tasks.get(task_id) if task_id else None, self.now(),
                            self.view.step_times)

    def on_task_table_row_highlighted(self, message: TaskTable.RowHighlighted) -> None:
        task_id = message.task_id
        if task_id != self.selected_task:
            with self.lock:
                self._select(task_id)

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
