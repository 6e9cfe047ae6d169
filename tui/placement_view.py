"""Where the variables live: variables x holding tasks, bytes per ps, and an imbalance warning."""

from __future__ import annotations

from rich.text import Text
from textual.app import ComposeResult
from textual.containers import Vertical
from textual.widgets import DataTable, Static

from launcher.telemetry.jobview import PlacementView
from tui import format as fmt

TOTAL_ROW = "__total__"


def summary_text(placement: PlacementView) -> Text:
    totals = placement.bytes_per_task()
    if not totals:
        return Text("No placement reported yet (training scripts report it with launcher.report).",
                    style="dim")
    text = Text()
    text.append(f"{len(placement.variables)} variables, "
                f"{fmt.human_bytes(sum(totals.values()))} on {len(totals)} tasks:  ")
    text.append("  ".join(f"{task} {fmt.human_bytes(size)}" for task, size in totals.items()))
    imbalance = placement.imbalance()
    if imbalance is not None:
        task, ratio = imbalance
        text.append(f"\n⚠ {task} holds {ratio:.1f}x the mean bytes per task: one ps is the bottleneck; "
                    "partition large variables or add ps tasks.", style="bold yellow")
    return text


class PlacementPanel(Vertical):
    """Rows keyed by variable name; columns are rebuilt only when the set of holders changes."""

    def __init__(self, *, id: str | None = None) -> None:
        super().__init__(id=id)
        self._holders: list[str] = []
        self._shown: dict[str, tuple[str, ...]] = {}

    def compose(self) -> ComposeResult:
        yield Static("", id="placement-summary")
        yield DataTable(id="placement-table", cursor_type="row")

    def sync(self, placement: PlacementView) -> None:
        self.query_one("#placement-summary", Static).update(summary_text(placement))
        table: DataTable[str] = self.query_one("#placement-table", DataTable)
        holders = placement.holders
        if holders != self._holders:
            table.clear(columns=True)
            self._shown.clear()
            self._holders = holders
            table.add_column("variable", key="variable")
            table.add_column("shape", key="shape")
            table.add_column("dtype", key="dtype")
            for task in holders:
                table.add_column(Text(task, justify="right"), key=task)
        totals = placement.bytes_per_task()
        rows: dict[str, tuple[str, ...]] = {}
        for name in sorted(placement.variables):
            var = placement.variables[name]
            rows[name] = (name, var.shape, var.dtype,
                          *(fmt.human_bytes(var.bytes) if var.task == task else "" for task in holders))
        if holders:
            rows[TOTAL_ROW] = ("total", "", "", *(fmt.human_bytes(totals[task]) for task in holders))
        keys = ["variable", "shape", "dtype", *holders]
        if TOTAL_ROW in self._shown and any(key not in self._shown for key in rows):
            table.remove_row(TOTAL_ROW)  # re-added below, so the total stays the last row
            del self._shown[TOTAL_ROW]
        for key, cells in rows.items():
            old = self._shown.get(key)
            if old is None:
                table.add_row(*cells, key=key)
            else:
                for column, new_cell, old_cell in zip(keys, cells, old, strict=True):
                    if new_cell != old_cell:
                        table.update_cell(key, column, new_cell)
            self._shown[key] = cells
