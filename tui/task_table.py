"""The task table: one row per task, updated by keyed diffs (never cleared and refilled)."""

from __future__ import annotations

from collections.abc import Iterable

from rich.segment import Segment
from rich.style import Style
from rich.text import Text
from textual.widgets import DataTable
from textual.widgets.data_table import ColumnKey, RowKey

from tui import format as fmt
from tui.model import JobView, TaskView, task_sort_key

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
STALE_STYLE = "bold black on yellow"

Cell = tuple[str, str]  # (text, style): compared before any Text is built
RENDERED_CELLS_KEPT = 8192


def task_cells(task: TaskView, now: float) -> tuple[Cell, ...]:
    """The row for one task, as plain (text, style) pairs."""
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


def _text(cell: Cell, right: bool) -> Text:
    text, style = cell
    return Text(text if right else " " + text, style=style, justify="right" if right else "left",
                no_wrap=True, overflow="ellipsis")


class TaskTable(DataTable[Text]):
    """Rows keyed by task id; `sync` touches only the cells whose text or style changed."""

    def __init__(self, *, id: str | None = None) -> None:
        super().__init__(id=id, cursor_type="row", cell_padding=0, zebra_stripes=False)
        self._shown: dict[str, tuple[Cell, ...]] = {}
        self._pending: set[str] = set()
        self._cell_versions: dict[tuple[RowKey, ColumnKey], int] = {}
        self._version = 0
        self._rendered: dict[tuple[object, ...], list[list[Segment]]] = {}

    # DataTable keys its rendered-cell cache on a table-wide update counter, so one changed
    # cell re-renders every visible cell: with 256 busy tasks that is hundreds of ms per
    # refresh. Here each cell carries its own version, and only changed cells are rendered.

    def update_cell(self, row_key: RowKey | str, column_key: ColumnKey | str, value: Text, *,
                    update_width: bool = False) -> None:
        super().update_cell(row_key, column_key, value, update_width=update_width)
        self._version += 1
        self._cell_versions[(RowKey(row_key) if isinstance(row_key, str) else row_key,
                             ColumnKey(column_key) if isinstance(column_key, str) else column_key)] = self._version

    def _render_cell(self, row_index: int, column_index: int, base_style: Style, width: int,
                     cursor: bool = False, hover: bool = False) -> list[list[Segment]]:
        if row_index < 0 or column_index < 0:
            return super()._render_cell(row_index, column_index, base_style, width, cursor, hover)
        row_key = self._row_locations.get_key(row_index)
        column_key = self._column_locations.get_key(column_index)
        version = self._cell_versions.get((row_key, column_key), 0) if row_key and column_key else 0
        key = (row_key, column_key, row_index, version, base_style,
               width, cursor, hover, self._show_hover_cursor, self.show_cursor, self._pseudo_class_state)
        lines = self._rendered.get(key)
        if lines is None:
            if len(self._rendered) >= RENDERED_CELLS_KEPT:
                self._rendered.clear()
            lines = self._rendered[key] = super()._render_cell(row_index, column_index, base_style, width,
                                                               cursor, hover)
        return lines

    def on_mount(self) -> None:
        for key, label, width, right in COLUMNS:
            self.add_column(Text(label if right else " " + label, justify="right" if right else "left"),
                            key=key, width=width)

    @property
    def selected_task(self) -> str | None:
        if not self.row_count:
            return None
        key = self.coordinate_to_cell_key(self.cursor_coordinate).row_key
        return key.value

    def sync(self, view: JobView, now: float, dirty: Iterable[str]) -> int:
        """Bring the rows up to date with `view`; returns the number of cells rewritten."""
        added = [task_id for task_id in view.tasks if task_id not in self._shown]
        for task_id in added:
            cells = task_cells(view.tasks[task_id], now)
            self.add_row(*(_text(c, col[3]) for c, col in zip(cells, COLUMNS, strict=True)), key=task_id)
            self._shown[task_id] = cells
        if added:
            self._restore_order()
        changed = 0
        self._pending.update(dirty)
        for task_id in self._visible_tasks():
            task = view.tasks[task_id]
            if task_id not in self._pending and task.last_event_ts is None:
                continue
            self._pending.discard(task_id)
            shown = self._shown[task_id]
            cells = task_cells(task, now)
            if cells == shown:
                continue
            for cell, old, (key, _label, _width, right) in zip(cells, shown, COLUMNS, strict=True):
                if cell != old:
                    self.update_cell(task_id, key, _text(cell, right))
                    changed += 1
            self._shown[task_id] = cells
        return changed

    def _visible_tasks(self) -> list[str]:
        """Rows on screen now (plus a small margin); rows off screen are brought up to date when
        they scroll into view, so a refresh costs the same with 8 tasks or 8,000."""
        first = max(0, int(self.scroll_y) - 2)
        last = min(self.row_count, int(self.scroll_y) + self.size.height + 2)
        return [row.key.value for row in self.ordered_rows[first:last] if row.key.value is not None]

    def _restore_order(self) -> None:
        """Keep chief, ps, workers, evaluator in order while keeping the same task selected."""
        selected = self.selected_task
        self.sort("task", key=lambda cell: task_sort_key(cell.plain.strip()))
        if selected is not None:
            self.move_cursor(row=self.get_row_index(selected), animate=False)
