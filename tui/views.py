"""What the dashboard draws: the `JobView` flushed to the widgets, the table's height, the selection.

The dashboard screen (dashboard.py) flushes at `FLUSH_HZ` on the UI thread: keyed diffs only, the
slow charts once a second. `DashboardDrawing` takes the state and the widgets (frame.py) and the
Textual screen they are on, for its notifications, its size and the app's batched updates.
"""

from __future__ import annotations

from typing import Any

from textual.screen import Screen

from tui.frame import CHART_EVERY, RATE_CHART_MIN_HEIGHT, TABLE_SHARE, DashboardState, DashboardWidgets
from tui.header import header_text
from tui.task_table import TABLE_WIDTH


class DashboardDrawing:
    """Brings the widgets up to date with the view, and shows the selected task's log and sparklines."""

    def __init__(self, state: DashboardState, widgets: DashboardWidgets, screen: Screen[Any]) -> None:
        self.state = state
        self.widgets = widgets
        self.screen = screen
        self._table_rows = -1

    def flush(self, force_chart: bool = False) -> None:
        """Bring every visible widget up to date with the view: keyed diffs only."""
        state, w = self.state, self.widgets
        state.flushes += 1
        table = w.table
        with state.lock, self.screen.app.batch_update():
            view = state.view
            if state.view_reset:
                state.view_reset = False
                table.clear()
                w.timeline_panel.forget()
                w.log_pane.show_task(view, state.selected_task)
            now = state.now()
            if state.bell_on_end and state.live and view.ended:
                state.bell_on_end = False
                self.screen.app.bell()
            dirty = view.take_dirty()
            for notice in view.take_notices():
                self.screen.notify(notice.message, severity=notice.severity,  # type: ignore[arg-type]
                                   timeout=8 if notice.severity == "error" else 4)
            w.header.show(header_text(
                view, now, title=state.job_title, strategy=state.strategy, hosts_total=state.hosts_total,
                live=state.live, stream_ended=state.stream_ended, replay=state.replay_status()))
            slow_tick = force_chart or state.stream_ended or state.flushes % CHART_EVERY == 0
            if slow_tick and table.order_changes_by_itself:
                table.reorder(view)
            table.sync(view, now, dirty)
            self.fit_table()
            selected = table.selected_task
            if selected != state.selected_task:
                self.select(selected)
            elif selected is not None and selected in dirty:
                w.log_pane.sync(view)
                w.sparklines.show(view.tasks.get(selected), now, view.step_times)
            elif selected is not None and slow_tick:  # its steps/s moves with the clock, events or not
                w.sparklines.show(view.tasks.get(selected), now, view.step_times)
            current = w.views.current
            if slow_tick and current == "dashboard":
                w.loss_chart.sync(view)
                if w.rate_chart.display:
                    w.rate_chart.sync(view)
            elif slow_tick and current == "hosts":
                w.hosts_panel.sync(view)
            elif current == "timeline":
                w.timeline_panel.sync(view)
            elif current == "merged":
                w.merged_panel.sync(view)
            placement = w.placement_panel
            if view.placement_dirty and placement.display:
                view.placement_dirty = False
                placement.sync(view.placement)

    def fit_table(self) -> None:
        """The table takes the rows it needs, up to a share of the screen; the rest goes to the panes."""
        table, size = self.widgets.table, self.screen.size
        rows = table.row_count
        share = max(5, int(size.height * TABLE_SHARE))
        wanted = min(share, rows + 1) if rows else 2
        if size.width < TABLE_WIDTH + 2:
            wanted += 1  # the horizontal scrollbar takes a line of its own
        if wanted != self._table_rows:
            self._table_rows = wanted
            table.styles.height = wanted

    def resized(self) -> None:
        self._table_rows = -1
        self.fit_table()
        # two charts of a few rows each read as nothing: below this height only the loss is drawn
        self.widgets.rate_chart.display = self.screen.size.height >= RATE_CHART_MIN_HEIGHT

    def select(self, task_id: str | None) -> None:
        """Show ``task_id``'s log and sparklines (the caller holds the lock)."""
        state, w = self.state, self.widgets
        state.selected_task = task_id
        w.log_pane.show_task(state.view, task_id)
        w.sparklines.show(state.view.tasks.get(task_id) if task_id else None, state.now(), state.view.step_times)
