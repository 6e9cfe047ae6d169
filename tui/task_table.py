"""The task table: one row per task, keyed by task id, updated by cell diffs.

Textual's DataTable was the first choice and was measured too slow for 256 busy tasks: it
repaints the whole table on any ``update_cell`` and re-renders every visible cell after any
change (its caches are keyed on a table-wide counter), about 2 ms per visible line; at ten
refreshes a second that alone is most of a core. This widget keeps the same model (rows keyed
by task id, ``update_cell`` only where the text or style changed) but draws with Textual's
Line API: each row is one cached `Strip`, rebuilt only when one of its cells changed, and a
changed row repaints only its own line.
"""

from __future__ import annotations

from collections.abc import Iterable

from rich.style import Style
from rich.text import Text
from textual import events
from textual.binding import Binding
from textual.geometry import Region, Size
from textual.message import Message
from textual.scroll_view import ScrollView
from textual.strip import Strip

from launcher.telemetry.columns import (
    BY_KEY,
    COLUMN_INDEX,
    COLUMNS,
    SORT_CYCLE,
    SPLIT_CELLS,
    TABLE_WIDTH,
    Cell,
    flags_text,
    task_cells,
)
from launcher.telemetry.jobview import JobView, TaskView, task_sort_key

__all__ = ["COLUMNS", "COLUMN_INDEX", "SORT_COLUMNS", "TABLE_WIDTH", "TaskTable", "header_line", "ordered_tasks",
           "sort_value", "task_cells"]

HEADER_STYLE = Style(bold=True, dim=True)
CURSOR_FOCUSED = Style(reverse=True)
CURSOR_BLURRED = Style(bgcolor="grey35")
#: how the step-time column's letters (launcher/telemetry/columns.py `SPLIT_LETTERS`) are drawn
SPLIT_DRAW = {"i": Style(color="yellow"), "c": Style(color="green"), "p": Style(color="magenta"),
              "o": Style(color="grey62")}

SORT_COLUMNS = SORT_CYCLE
"""What `s` cycles through; `S` reverses the order."""


def sort_value(task: TaskView, column: str, now: float) -> object:
    """The value a column sorts by; None sorts last whichever the direction."""
    sort = BY_KEY[column].sort
    return sort(task, now) if sort is not None else None


def ordered_tasks(view: JobView, keys: Iterable[str], column: str, reverse: bool, now: float) -> list[str]:
    """`keys` in the order of `column` at `now` (task order among equals), missing values last."""
    by_task = sorted(keys, key=task_sort_key)
    if column == "task":
        return by_task[::-1] if reverse else by_task
    present = [(sort_value(view.tasks[k], column, now), k) for k in by_task]
    missing = [k for value, k in present if value is None]
    known = [(value, k) for value, k in present if value is not None]
    known.sort(key=lambda pair: pair[0], reverse=reverse)  # type: ignore[arg-type,return-value]
    return [k for _value, k in known] + missing


def task_matches(task: TaskView, query: str) -> bool:
    """Every word of the query is part of the task id, host, state or a flag (case-insensitive)."""
    if not query:
        return True
    fields = " ".join((task.task_id, task.host or "", task.state, flags_text(task))).lower()
    return all(word in fields for word in query.lower().split())


def fit(text: str, width: int, right: bool) -> str:
    """Exactly `width` cells: a one-cell gap, then the text aligned, cut with an ellipsis."""
    room = width - 1
    if len(text) > room:
        text = text[: room - 1] + "…"
    return " " + (text.rjust(room) if right else text.ljust(room))


def header_line(sort_column: str = "task", reverse: bool = False) -> Text:
    line = Text(no_wrap=True)
    for column in COLUMNS:
        label = column.label
        if column.key == sort_column:
            label = f"{label}{'▼' if reverse else '▲'}"
        line.append(fit(label, column.width, column.right), style=HEADER_STYLE)
    return line


class TaskTable(ScrollView, can_focus=True):
    """Rows keyed by task id with a fixed header line; the cursor row is the selected task."""

    DEFAULT_CSS = "TaskTable { scrollbar-size-vertical: 1; }"

    BINDINGS = [
        Binding("up", "cursor(-1)", "Previous task", show=False, id="table.up"),
        Binding("down", "cursor(1)", "Next task", show=False, id="table.down"),
        Binding("pageup", "page(-1)", "Page up", show=False, id="table.pageup"),
        Binding("pagedown", "page(1)", "Page down", show=False, id="table.pagedown"),
        Binding("home", "cursor(-1000000)", "First task", show=False, id="table.home"),
        Binding("end", "cursor(1000000)", "Last task", show=False, id="table.end"),
    ]

    class RowHighlighted(Message):
        """The cursor moved to another task."""

        def __init__(self, task_id: str) -> None:
            super().__init__()
            self.task_id = task_id

    def __init__(self, *, id: str | None = None) -> None:
        super().__init__(id=id)
        self.row_keys: list[str] = []
        """The rows shown, in order: every task that passes the filter."""
        self.cursor_row = 0
        self.filter_text = ""
        self.sort_column = "task"
        self.sort_reverse = False
        self._known: list[str] = []
        self._user_moved = False
        self._keep_selection: str | None = None
        self._row_of: dict[str, int] = {}
        self._shown: dict[str, tuple[Cell, ...]] = {}
        self._strips: dict[tuple[str, int, bool, bool], Strip] = {}
        self._pending: set[str] = set()
        self._header = header_line()
        self._base_style = Style()
        self._now = 0.0  # the clock of the last `sync`: rates are sorted as they were last shown

    # -- reading -----------------------------------------------------------------------

    @property
    def row_count(self) -> int:
        return len(self.row_keys)

    @property
    def task_count(self) -> int:
        """Every task known, shown or filtered out."""
        return len(self._known)

    @property
    def selected_task(self) -> str | None:
        return self.row_keys[self.cursor_row] if self.row_keys else None

    def get_cell(self, task_id: str, column: str) -> Text:
        text, style = self._shown[task_id][COLUMN_INDEX[column]]
        return Text(text, style=style)

    # -- filter and order --------------------------------------------------------------

    def set_filter(self, view: JobView, query: str) -> None:
        self.filter_text = query.strip()
        self.reorder(view)

    def cycle_sort(self, view: JobView) -> None:
        self.sort_column = SORT_COLUMNS[(SORT_COLUMNS.index(self.sort_column) + 1) % len(SORT_COLUMNS)]
        self.sort_reverse = False
        self._header = header_line(self.sort_column, self.sort_reverse)
        self.reorder(view, force=True)

    def reverse_sort(self, view: JobView) -> None:
        self.sort_reverse = not self.sort_reverse
        self._header = header_line(self.sort_column, self.sort_reverse)
        self.reorder(view, force=True)

    @property
    def order_changes_by_itself(self) -> bool:
        """States, rates and losses move: the order needs a fresh look now and then."""
        return self.sort_column not in ("task", "host") or bool(self.filter_text)

    def reorder(self, view: JobView, force: bool = False) -> None:
        """Recompute which rows show and in what order; keeps the cursor on the selected task."""
        keys = [k for k in self._known if task_matches(view.tasks[k], self.filter_text)]
        rows = ordered_tasks(view, keys, self.sort_column, self.sort_reverse, self._now)
        if rows == self.row_keys and not force:
            return
        selected = self.selected_task or self._keep_selection
        self.row_keys = rows
        self._row_of = {key: i for i, key in enumerate(rows)}
        if self._user_moved and selected in self._row_of:
            self.cursor_row = self._row_of[selected]
        else:
            self.cursor_row = 0  # until the user moves, the first row (the chief) is the selection
        self.virtual_size = Size(TABLE_WIDTH, len(rows) + 1)
        self._strips.clear()
        self.refresh()
        if self.selected_task is not None and self.selected_task != selected:
            self.post_message(self.RowHighlighted(self.selected_task))
        if self.is_mounted:
            self._scroll_to_cursor()

    def clear(self) -> None:
        """Forget every row (the job's picture starts over); the selected task stays selected."""
        self._keep_selection = self.selected_task if self._user_moved else None
        self.row_keys, self._known, self._row_of = [], [], {}
        self._shown.clear()
        self._strips.clear()
        self._pending.clear()
        self.cursor_row = 0
        self.virtual_size = Size(TABLE_WIDTH, 1)
        self.refresh()

    # -- keyed updates -----------------------------------------------------------------

    def update_cell(self, task_id: str, column: str, cell: Cell) -> None:
        cells = list(self._shown[task_id])
        cells[COLUMN_INDEX[column]] = cell
        self._set_row(task_id, tuple(cells))

    def _set_row(self, task_id: str, cells: tuple[Cell, ...]) -> None:
        self._shown[task_id] = cells
        for key in [k for k in self._strips if k[0] == task_id]:
            del self._strips[key]
        row = self._row_of.get(task_id)
        if row is not None:
            self.refresh_line(row + 1)

    def sync(self, view: JobView, now: float, dirty: Iterable[str]) -> int:
        """Bring the rows up to date with `view`; returns the number of cells that changed.

        Only rows on screen are compared; a changed row off screen waits in `_pending` until it
        scrolls into view, so a refresh costs the same with 8 tasks or 8,000."""
        self._now = now
        added = False
        for task_id in view.tasks:
            if task_id not in self._shown:
                self._shown[task_id] = task_cells(view.tasks[task_id], now, view.step_times)
                self._known.append(task_id)
                added = True
        if added:
            self.reorder(view)
        self._pending.update(dirty)
        changed = 0
        for task_id in self._visible_tasks():
            task = view.tasks[task_id]
            if task_id not in self._pending and task.last_event_ts is None:
                continue
            self._pending.discard(task_id)
            shown = self._shown[task_id]
            cells = task_cells(task, now, view.step_times)
            if cells != shown:
                changed += sum(1 for new, old in zip(cells, shown, strict=True) if new != old)
                self._set_row(task_id, cells)
        return changed

    def _visible_tasks(self) -> list[str]:
        first = max(0, int(self.scroll_offset.y) - 1)
        return self.row_keys[first: first + self.size.height + 2]

    # -- cursor ------------------------------------------------------------------------

    def move_cursor(self, row: int) -> None:
        if not self.row_keys:
            return
        row = max(0, min(len(self.row_keys) - 1, row))
        if row == self.cursor_row:
            return
        self._user_moved = True
        old, self.cursor_row = self.cursor_row, row
        self.refresh_line(old + 1)
        self.refresh_line(row + 1)
        self._scroll_to_cursor()
        self.post_message(self.RowHighlighted(self.row_keys[row]))

    def select_task(self, task_id: str) -> bool:
        """Put the cursor on ``task_id``'s row; False when the filter hides it (or it is unknown)."""
        row = self._row_of.get(task_id)
        if row is None:
            return False
        self.move_cursor(row)
        self._user_moved = True  # an explicit choice, also when the cursor was already there
        return True

    def _scroll_to_cursor(self) -> None:
        body = max(1, self.size.height - 1)
        top = int(self.scroll_offset.y)
        if self.cursor_row < top:
            self.scroll_to(y=self.cursor_row, animate=False)
        elif self.cursor_row >= top + body:
            self.scroll_to(y=self.cursor_row - body + 1, animate=False)

    def action_cursor(self, delta: int) -> None:
        self.move_cursor(self.cursor_row + delta)

    def action_page(self, direction: int) -> None:
        self.move_cursor(self.cursor_row + direction * max(1, self.size.height - 2))

    def on_click(self, event: events.Click) -> None:
        if event.y >= 1:
            self.move_cursor(int(self.scroll_offset.y) + event.y - 1)

    def on_focus(self) -> None:
        self._strips.clear()
        self.refresh()

    def on_blur(self) -> None:
        self._strips.clear()
        self.refresh()

    # -- drawing -----------------------------------------------------------------------

    def render_lines(self, crop: Region) -> list[Strip]:
        self._base_style = self.rich_style  # walks the DOM: once per paint, not once per line
        return super().render_lines(crop)

    def render_line(self, y: int) -> Strip:
        width = self.size.width
        base = self._base_style
        if y == 0:
            return Strip(list(self._header.render(self.app.console))).crop_extend(0, width, base) \
                .apply_style(base)
        row = int(self.scroll_offset.y) + y - 1
        if row >= len(self.row_keys):
            if y == 1 and not self.row_keys and self.filter_text:
                note = Text(f" no task matches “{self.filter_text}” (escape clears the filter)", style="dim")
                return Strip(list(note.render(self.app.console))).crop_extend(0, width, base)
            return Strip.blank(width, base)
        task_id = self.row_keys[row]
        cursor = row == self.cursor_row
        key = (task_id, width, cursor, self.has_focus)
        strip = self._strips.get(key)
        if strip is None:
            line = Text(no_wrap=True)
            for (text, style), column in zip(self._shown[task_id], COLUMNS, strict=True):
                if style == "split":  # the letters of the stacked bar become coloured blocks
                    for letter in text[:SPLIT_CELLS]:
                        line.append("█", style=SPLIT_DRAW.get(letter, Style()))
                    line.append(fit(text[SPLIT_CELLS:], column.width - SPLIT_CELLS, column.right))
                else:
                    line.append(fit(text, column.width, column.right), style="" if style == "split-text" else style)
            if cursor:
                line.stylize(CURSOR_FOCUSED if self.has_focus else CURSOR_BLURRED)
            strip = Strip(list(line.render(self.app.console))).crop_extend(0, width, base).apply_style(base)
            self._strips[key] = strip
        return strip
