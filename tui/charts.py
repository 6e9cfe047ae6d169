"""Loss-vs-step for the training tasks, and the selected task's steps/s and GPU sparklines."""

from __future__ import annotations

from contextlib import suppress
from functools import partial

from rich.text import Text
from textual.app import ComposeResult
from textual.containers import Vertical
from textual.widget import Widget
from textual.widgets import Sparkline, Static
from textual_plotext.plot import Plot

from launcher.jobview import JobView, TaskView, task_sort_key
from tui import format as fmt

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


class LossChart(Widget):
    """Loss against step, drawn by plotext in a thread worker.

    plotext takes tens of milliseconds per drawing; done inside ``render`` (as PlotextPlot
    does) it would stall key handling once a second. Here the drawing runs off the UI thread
    and ``render`` only shows the finished text; a new drawing starts when the points or the
    size changed and the previous one is done."""

    DEFAULT_CSS = "LossChart { height: 1fr; }"

    def __init__(self, *, id: str | None = None) -> None:
        super().__init__(id=id)
        self._signature: tuple[tuple[str, int, int], ...] = ()
        self._series: list[tuple[str, list[int], list[float]]] = []
        self._drawn: tuple[object, int, int] | None = None
        self._building = False
        self._text = Text("no loss reported yet", style="dim")

    @property
    def up_to_date(self) -> bool:
        """The drawing on screen shows the latest points at the current size."""
        return not self._building and self._drawn == self._wanted()

    def sync(self, view: JobView) -> None:
        series = loss_series(view)
        signature = tuple((t.task_id, len(t.loss_history), t.loss_history[-1][0]) for t in series)
        if signature == self._signature:
            return
        self._signature = signature
        self._series = []
        for task in series:
            points = thin(list(task.loss_history))
            self._series.append((task.task_id, [p[0] for p in points], [p[1] for p in points]))
        self._request()

    def on_resize(self) -> None:
        self._request()

    def _wanted(self) -> tuple[object, int, int]:
        return (self._signature, self.size.width, self.size.height)

    def _request(self) -> None:
        wanted = self._wanted()
        if self._building or wanted == self._drawn or not self._series:
            return
        self._building = True
        self.run_worker(partial(self._draw, wanted, list(self._series)), thread=True, group="loss-chart",
                        exit_on_error=False)

    def _draw(self, wanted: tuple[object, int, int], series: list[tuple[str, list[int], list[float]]]) -> None:
        _signature, width, height = wanted
        plot = Plot()
        plot.plotsize(width, height)
        plot.theme("clear")
        plot.title("loss vs step")
        for name, steps, losses in series:
            plot.plot(steps, losses, label=name, marker="braille")
        text = Text.from_ansi(plot.build(), no_wrap=True)
        with suppress(RuntimeError):  # the app closed while drawing
            self.app.call_from_thread(self._show, wanted, text)

    def _show(self, wanted: tuple[object, int, int], text: Text) -> None:
        self._building = False
        self._drawn, self._text = wanted, text
        self.refresh()
        self._request()

    def render(self) -> Text:
        return self._text


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
