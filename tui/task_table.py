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

from launcher.jobview import JobView, TaskView, task_sort_key
from tui import format as fmt

# (key, label, width including a one-cell gap, right-aligned)
COLUMNS: tuple[tuple[str, str, int, bool], ...] = (
    ("task", "task", 10, False),
    ("host", "host", 10, False),
    ("state", "state", 11, False),
    ("pid", "pid", 7, True),
    ("restarts", "rst", 4, True),
    ("step", "step", 8, True),
    ("loss", "loss", 8, True),
    ("rate", "st/s", 7, True),
    ("cpu", "cpu%", 6, True),
    ("rss", "rss", 7, True),
    ("gpu", "gpu%", 5, True),
    ("gpu_mem", "gpu mem", 9, True),
    ("age", "age", 5, True),
)
COLUMN_INDEX = {key: i for i, (key, *_rest) in enumerate(COLUMNS)}
TABLE_WIDTH = sum(width for _key, _label, width, _right in COLUMNS)
STALE_STYLE = "bold black on yellow"
HEADER_STYLE = Style(bold=True, dim=True)
CURSOR_FOCUSED = Style(reverse=True)
CURSOR_BLURRED = Style(bgcolor="grey35")

Cell = tuple[str, str]  # (text, style): compared as plain tuples, no Text built to compare


def task_cells(task: TaskView, now: float) -> tuple[Cell, ...]:
    """The row for one task, as (text, style) pairs in `COLUMNS` order."""
    stale = task.is_stale(now)
    gpu_mem = fmt.MISSING
    if task.has_gpu and task.gpu_mem_used is not None:
        gpu_mem = f"{fmt.human_bytes(task.gpu_mem_used)}/{fmt.human_bytes(task.gpu_mem_total)}"
    age = task.age(now)
    return (
        (task.task_id, STALE_STYLE if stale else "bold"),
        (task.host or fmt.MISSING, ""),
        (task.state, fmt.STATE_STYLES.get(task.state, "")),
        (str(task.pid) if task.pid is not None else fmt.MISSING, "dim"),
        (str(task.restarts), "yellow" if task.restarts else "dim"),
        (str(task.step) if task.step is not None else fmt.MISSING, ""),
        (fmt.loss(task.loss), ""),
        (fmt.number(task.steps_per_s), ""),
        (fmt.number(task.cpu_percent, "{:.0f}"), ""),
        (fmt.human_bytes(task.rss_bytes), ""),
        (fmt.number(task.gpu_util, "{:.0f}") if task.has_gpu else fmt.MISSING, ""),
        (gpu_mem, ""),
        (fmt.duration(age) if age is not None else fmt.MISSING, STALE_STYLE if stale else "dim"),
    )


def fit(text: str, width: int, right: bool) -> str:
    """Exactly `width` cells: a one-cell gap, then the text aligned, cut with an ellipsis."""
    room = width - 1
    if len(text) > room:
        text = text[: room - 1] + "…"
    return " " + (text.rjust(room) if right else text.ljust(room))


def header_line() -> Text:
    line = Text(no_wrap=True)
    for _key, label, width, right in COLUMNS:
        line.append(fit(label, width, right), style=HEADER_STYLE)
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
        self.cursor_row = 0
        self._row_of: dict[str, int] = {}
        self._shown: dict[str, tuple[Cell, ...]] = {}
        self._strips: dict[tuple[str, int, bool, bool], Strip] = {}
        self._pending: set[str] = set()
        self._header = header_line()
        self._base_style = Style()

    # -- reading -----------------------------------------------------------------------

    @property
    def row_count(self) -> int:
        return len(self.row_keys)

    @property
    def selected_task(self) -> str | None:
        return self.row_keys[self.cursor_row] if self.row_keys else None

    def get_cell(self, task_id: str, column: str) -> Text:
        text, style = self._shown[task_id][COLUMN_INDEX[column]]
        return Text(text, style=style)

    # -- keyed updates -----------------------------------------------------------------

    def add_row(self, task_id: str, cells: tuple[Cell, ...]) -> None:
        selected = self.selected_task
        self._shown[task_id] = cells
        self.row_keys.append(task_id)
        self.row_keys.sort(key=task_sort_key)
        self._row_of = {key: i for i, key in enumerate(self.row_keys)}
        self.virtual_size = Size(TABLE_WIDTH, len(self.row_keys) + 1)
        if selected is not None:
            self.cursor_row = self._row_of[selected]
        self._strips.clear()
        self.refresh()
        if selected is None:
            self.post_message(self.RowHighlighted(task_id))

    def update_cell(self, task_id: str, column: str, cell: Cell) -> None:
        cells = list(self._shown[task_id])
        cells[COLUMN_INDEX[column]] = cell
        self._set_row(task_id, tuple(cells))

    def _set_row(self, task_id: str, cells: tuple[Cell, ...]) -> None:
        self._shown[task_id] = cells
        for key in [k for k in self._strips if k[0] == task_id]:
            del self._strips[key]
        self.refresh_line(self._row_of[task_id] + 1)

    def sync(self, view: JobView, now: float, dirty: Iterable[str]) -> int:
        """Bring the rows up to date with `view`; returns the number of cells that changed.

        Only rows on screen are compared; a changed row off screen waits in `_pending` until it
        scrolls into view, so a refresh costs the same with 8 tasks or 8,000."""
        for task_id in view.tasks:
            if task_id not in self._shown:
                self.add_row(task_id, task_cells(view.tasks[task_id], now))
        self._pending.update(dirty)
        changed = 0
        for task_id in self._visible_tasks():
            task = view.tasks[task_id]
            if task_id not in self._pending and task.last_event_ts is None:
                continue
            self._pending.discard(task_id)
            shown = self._shown[task_id]
            cells = task_cells(task, now)
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
        old, self.cursor_row = self.cursor_row, row
        self.refresh_line(old + 1)
        self.refresh_line(row + 1)
        self._scroll_to_cursor()
        self.post_message(self.RowHighlighted(self.row_keys[row]))

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
            return Strip.blank(width, base)
        task_id = self.row_keys[row]
        cursor = row == self.cursor_row
        key = (task_id, width, cursor, self.has_focus)
        strip = self._strips.get(key)
        if strip is None:
            line = Text(no_wrap=True)
            for (text, style), (_key, _label, col_width, right) in zip(self._shown[task_id], COLUMNS,
                                                                        strict=True):
                line.append(fit(text, col_width, right), style=style)
            if cursor:
                line.stylize(CURSOR_FOCUSED if self.has_focus else CURSOR_BLURRED)
            strip = Strip(list(line.render(self.app.console))).crop_extend(0, width, base).apply_style(base)
            self._strips[key] = strip
        return strip
