"""Loss-vs-step for the training tasks, and the selected task's steps/s and GPU sparklines."""

from __future__ import annotations

from textual.app import ComposeResult
from textual.containers import Vertical
from textual.widgets import Sparkline, Static
from textual_plotext import PlotextPlot

from tui import format as fmt
from tui.model import JobView, TaskView, task_sort_key

MAX_SERIES = 4
"""Loss lines drawn at once: the chief and the first workers; more would be unreadable."""

MAX_POINTS = 100
"""Points per line handed to plotext: its drawing time grows with them, the chart is ~50 cells wide."""


def thin(points: list[tuple[int, float]], limit: int = MAX_POINTS) -> list[tuple[int, float]]:
    """Every n-th point so that at most `limit` remain, always keeping the latest."""
    if len(points) <= limit:
        return points
    stride = -(-len(points) // limit)
    return points[-1::-stride][::-1]


def loss_series(view: JobView) -> list[TaskView]:
    trainers = [t for t in view.tasks.values() if t.role in ("chief", "worker") and t.loss_history]
    return sorted(trainers, key=lambda t: task_sort_key(t.task_id))[:MAX_SERIES]


class LossChart(PlotextPlot):
    """Redrawn only when the plotted points changed (plotext rendering is not free)."""

    def __init__(self, *, id: str | None = None) -> None:
        super().__init__(id=id)
        self._shown: tuple[tuple[str, int, int], ...] = ()

    def sync(self, view: JobView) -> None:
        series = loss_series(view)
        signature = tuple((t.task_id, len(t.loss_history), t.loss_history[-1][0]) for t in series)
        if signature == self._shown:
            return
        self._shown = signature
        plt = self.plt
        plt.clear_data()
        plt.title("loss vs step")
        for task in series:
            points = thin(list(task.loss_history))
            steps = [p[0] for p in points]
            losses = [p[1] for p in points]
            plt.plot(steps, losses, label=task.task_id, marker="braille")
        self.refresh()


class TaskSparklines(Vertical):
    """steps/s and GPU utilisation history of the selected task."""

    def compose(self) -> ComposeResult:
        yield Static("", id="rate-label")
        yield Sparkline([], id="rate-spark")
        yield Static("", id="gpu-label")
        yield Sparkline([], id="gpu-spark")

    def show(self, task: TaskView | None) -> None:
        name = task.task_id if task else "—"
        rate = task.steps_per_s if task else None
        self.query_one("#rate-label", Static).update(f"{name} steps/s {fmt.number(rate)}", layout=False)
        self.query_one("#rate-spark", Sparkline).data = list(task.rate_history) if task else []
        if task is not None and task.has_gpu:
            label = f"{name} GPU {fmt.number(task.gpu_util, '{:.0f}')}%"
        else:
            label = f"{name} GPU {fmt.MISSING} (no GPU)"
        self.query_one("#gpu-label", Static).update(label, layout=False)
        self.query_one("#gpu-spark", Sparkline).data = list(task.gpu_history) if task else []
