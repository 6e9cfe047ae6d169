"""Loss of every training task (against step or time), steps/s of every trainer over time, and the
selected task's steps/s and GPU sparklines."""

from __future__ import annotations

from contextlib import suppress
from functools import partial
from typing import TypeVar

from rich.text import Text
from textual.app import ComposeResult
from textual.containers import Vertical
from textual.widget import Widget
from textual.widgets import Sparkline, Static
from textual_plotext.plot import Plot

from launcher.protocol.metricnames import PARTS
from launcher.telemetry.jobview import JobView, TaskView, task_sort_key
from launcher.telemetry.stepverdict import StepTimes
from tui import format as fmt
from tui.format import SPARK_LEVELS

MAX_SERIES = 8
"""Lines drawn at once (the chief and the first workers, one colour each); the title counts the rest."""

COLORS = ("cyan", "orange", "green", "magenta", "yellow", "blue", "red", "white")

Point = TypeVar("Point")

MAX_POINTS = 100
"""Points per line handed to plotext: its drawing time grows with them, the chart is ~50 cells wide."""


def thin(points: list[Point], limit: int = MAX_POINTS) -> list[Point]:
    """Every n-th point so that at most `limit` remain, always keeping the latest."""
    if len(points) <= limit:
        return points
    stride = -(-len(points) // limit)
    return points[-1::-stride][::-1]


def loss_series(view: JobView) -> list[TaskView]:
    """Every task that reports a loss, chief first."""
    reporting = [t for t in view.tasks.values() if t.loss_history]
    return sorted(reporting, key=lambda t: task_sort_key(t.task_id))


def rate_series(view: JobView) -> list[TaskView]:
    trainers = [t for t in view.tasks.values() if t.role in ("chief", "worker") and t.rate_points]
    return sorted(trainers, key=lambda t: task_sort_key(t.task_id))


Series = list[tuple[str, list[float], list[float]]]


class PlotChart(Widget):
    """A line chart drawn by plotext in a thread worker.

    plotext takes tens of milliseconds per drawing; done inside ``render`` (as PlotextPlot
    does) it would stall key handling once a second. Here the drawing runs off the UI thread
    and ``render`` only shows the finished text; a new drawing starts when the points or the
    size changed and the previous one is done."""

    DEFAULT_CSS = "PlotChart { height: 1fr; }"
    EMPTY = "nothing reported yet"

    def __init__(self, *, id: str | None = None) -> None:
        super().__init__(id=id)
        self._signature: tuple[object, ...] = ()
        self._series: Series = []
        self._title = ""
        self._drawn: tuple[object, int, int] | None = None
        self._building = False
        self._text = Text(self.EMPTY, style="dim")

    def collect(self, view: JobView) -> tuple[tuple[object, ...], str, Series]:
        """(signature, title, series): the signature changes whenever the drawing would."""
        raise NotImplementedError

    @property
    def up_to_date(self) -> bool:
        """The drawing on screen shows the latest points at the current size (or it is not shown)."""
        return not self.display or (not self._building and self._drawn == self._wanted())

    def sync(self, view: JobView) -> None:
        self.show_series(*self.collect(view))

    def show_series(self, signature: tuple[object, ...], title: str, series: Series) -> None:
        """Draws ``series`` unless ``signature`` is the one drawn (or being drawn) already."""
        if signature == self._signature:
            return
        self._signature, self._title, self._series = signature, title, series
        self._request()

    @property
    def series(self) -> Series:
        """The lines this chart draws: (name, xs, ys) each."""
        return list(self._series)

    def color(self, index: int, name: str) -> str:
        """The colour of the ``index``-th line, named ``name``."""
        return COLORS[index % len(COLORS)]

    def on_resize(self) -> None:
        self._request()

    def _wanted(self) -> tuple[object, int, int]:
        return (self._signature, self.size.width, self.size.height)

    def _request(self) -> None:
        wanted = self._wanted()
        if self._building or wanted == self._drawn or not self._series:
            return
        self._building = True
        self.run_worker(partial(self._draw, wanted, self._title, list(self._series)), thread=True,
                        group=f"chart-{self.id}", exit_on_error=False)

    def _draw(self, wanted: tuple[object, int, int], title: str, series: Series) -> None:
        _signature, width, height = wanted
        plot = Plot()
        plot.plotsize(width, height)
        plot.theme("clear")
        plot.title(title)
        for i, (name, xs, ys) in enumerate(series):
            plot.plot(xs, ys, label=name, marker="braille", color=self.color(i, name))
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


def _title(what: str, shown: int, total: int) -> str:
    return what if shown == total else f"{what} ({shown} of {total} tasks)"


class LossChart(PlotChart):
    """Loss of every task that reports one, against the step or (`t`) the time since the job began."""

    EMPTY = "no loss reported yet"

    def __init__(self, *, id: str | None = None) -> None:
        super().__init__(id=id)
        self.x_axis = "step"

    def toggle_x_axis(self, view: JobView) -> None:
        self.x_axis = "time" if self.x_axis == "step" else "step"
        self.sync(view)

    def collect(self, view: JobView) -> tuple[tuple[object, ...], str, Series]:
        tasks = loss_series(view)
        shown = tasks[:MAX_SERIES]
        signature = (self.x_axis, len(tasks),
                     *((t.task_id, len(t.loss_history), t.loss_history[-1][0]) for t in shown))
        start = view.start_ts or 0.0
        series: Series = []
        for task in shown:
            if self.x_axis == "step":
                points = thin(list(task.loss_history))
                series.append((task.task_id, [float(p[0]) for p in points], [p[1] for p in points]))
            else:
                timed = thin([(ts - start, loss) for ts, (_step, loss) in zip(task.loss_times, task.loss_history,
                                                                            strict=True)])
                series.append((task.task_id, [p[0] for p in timed], [p[1] for p in timed]))
        axis = "step" if self.x_axis == "step" else "seconds"
        return signature, _title(f"loss vs {axis}", len(shown), len(tasks)), series


class RateChart(PlotChart):
    """Steps/s of every trainer over the seconds since the job began."""

    EMPTY = "no steps/s yet"

    def collect(self, view: JobView) -> tuple[tuple[object, ...], str, Series]:
        tasks = rate_series(view)
        shown = tasks[:MAX_SERIES]
        signature = (len(tasks), *((t.task_id, t.rate_points[-1][0]) for t in shown))
        start = view.start_ts or 0.0
        series: Series = []
        for task in shown:
            points = thin([(ts - start, rate) for ts, rate in task.rate_points])
            series.append((task.task_id, [p[0] for p in points], [p[1] for p in points]))
        return signature, _title("steps/s vs seconds", len(shown), len(tasks)), series


SPLIT_COLORS = {"input": "yellow", "compute": "green", "peers": "magenta", "other": "grey62"}
SPLIT_CELLS = 30


def split_detail(task_id: str, times: StepTimes, now: float) -> Text:
    """The selected task's step time over time: one line per part, a cell per reading (newest
    right, the height of a cell its share), then the verdict; a PSS worker's closures."""
    history = list(times.history.get(task_id, ()))[-SPLIT_CELLS:]
    text = Text()
    closures = times.closures.get(task_id)
    if not history:
        if closures is not None:
            latency = f", {closures.latency_s * 1000:.0f} ms each" if closures.latency_s is not None else ""
            text.append(f"{task_id} closures {closures.per_s:.1f}/s{latency} (as the coordinator sees them)")
        else:
            why = times.missing(task_id) or "no split yet (a task that trains, with autolog on)"
            text.append(f"{task_id} step time: {why}", style="dim")
        return text
    last = history[-1]
    verdict = times.verdict(task_id, now=now) or ""
    spt = f", {last.seconds_per_step * 1000:.1f} ms/step" if last.seconds_per_step else ""
    text.append(f"{task_id} step time{spt}: {verdict}\n", style="bold")
    for part in PARTS:
        cells = "".join(SPARK_LEVELS[min(len(SPARK_LEVELS) - 1, round(s.share(part) * (len(SPARK_LEVELS) - 1)))]
                        for s in history)
        text.append(f"{part:<8}", style=SPLIT_COLORS[part])
        text.append(cells.ljust(SPLIT_CELLS), style=SPLIT_COLORS[part])
        text.append(f" {last.share(part) * 100:3.0f}%" + ("\n" if part != PARTS[-1] else ""))
    return text


class TaskSparklines(Vertical):
    """steps/s and GPU utilisation history of the selected task, and its step time split."""

    def __init__(self, *, id: str | None = None) -> None:
        super().__init__(id=id)
        # held, not queried: the rate label is refreshed on the clock, also while the app shuts down
        self.rate_label = Static("", id="rate-label")
        self.rate_spark = Sparkline([], id="rate-spark")
        self.gpu_label = Static("", id="gpu-label")
        self.gpu_spark = Sparkline([], id="gpu-spark")
        self.split = Static("", id="split-detail")

    def compose(self) -> ComposeResult:
        yield from (self.rate_label, self.rate_spark, self.gpu_label, self.gpu_spark, self.split)

    def show(self, task: TaskView | None, now: float, times: StepTimes | None = None) -> None:
        if task is not None and times is not None:
            self.split.update(split_detail(task.task_id, times, now), layout=False)
        name = task.task_id if task else "—"
        rate = task.steps_per_s(now) if task else None
        self.rate_label.update(f"{name} steps/s {fmt.number(rate)}", layout=False)
        self.rate_spark.data = list(task.rate_history) if task else []
        if task is not None and task.has_gpu:
            label = f"{name} GPU {fmt.number(task.gpu_util, '{:.0f}')}%"
        else:
            label = f"{name} GPU {fmt.MISSING} (no GPU)"
        self.gpu_label.update(label, layout=False)
        self.gpu_spark.data = list(task.gpu_history) if task else []
