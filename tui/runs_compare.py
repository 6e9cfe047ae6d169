"""Runs overlaid on one chart: the runs screen's compare view (mark runs with space, then `c`).

Loss against the step and steps/s against the step, of the task that reports each run's step (its
chief, else its first worker), one colour per run, and a legend that names each run, its profile,
the steps it covered and where its loss went ("no loss reported" for a run that sent none). The
step, not the time, is the x axis: runs that went at different paces or began at different times
line up where they trained alike.

``launcher/telemetry/runcurves.py`` reads the runs' events.jsonl in a thread worker, a bounded
number of bytes per run per pass, so a long file's curves show while the rest is read. A run not
ended is read again every ``REFRESH_S`` seconds from where the last read stopped: its lines grow as
it trains. ``r`` reads again now; Escape or ``q`` goes back to the list.
"""

from __future__ import annotations

from contextlib import suppress
from dataclasses import dataclass
from pathlib import Path

from rich.text import Text
from textual.app import ComposeResult
from textual.binding import Binding
from textual.screen import Screen
from textual.widgets import Footer, Static

from launcher.privatedir import UnsafePath
from launcher.telemetry.runcurves import RunCurves
from tui import format as fmt
from tui.charts import COLORS, PlotChart, Series

MAX_COMPARED = 4
"""Runs on one chart at most: more lines than that are a tangle in ~50 rows of braille."""

RUN_COLORS = COLORS[:MAX_COMPARED]
#: plotext's colour names that Rich spells otherwise (the legend is drawn by Rich)
_RICH_COLOR = {"orange": "dark_orange"}

REFRESH_S = 3.0
NO_LOSS = "no loss reported"


@dataclass(frozen=True)
class ComparedRun:
    """A run marked for comparing: its id, its profile's name, its run dir, whether it may still grow."""

    run: str
    profile: str
    path: Path
    going: bool


class CompareChart(PlotChart):
    """A chart of one line per run, each run in the colour its legend line has."""

    def __init__(self, empty: str, run_colors: dict[str, str], *, id: str | None = None) -> None:
        super().__init__(id=id)
        self.run_colors = run_colors
        self._text = Text(empty, style="dim")

    def color(self, index: int, name: str) -> str:
        return self.run_colors.get(name, super().color(index, name))


@dataclass(frozen=True)
class _Snapshot:
    """What one read pass found, handed from the worker to the UI thread."""

    loss: Series
    rate: Series
    legend: Text
    signature: tuple[object, ...]
    done: bool


def _span(points: list[tuple[float, float]]) -> str:
    return f"{fmt.loss(points[0][1])} → {fmt.loss(points[-1][1])}"


def legend_line(run: ComparedRun, curves: RunCurves, color: str, problem: str | None) -> Text:
    """``━━ RUN  PROFILE  steps A-B  loss X → Y  steps/s Z``, in the run's colour."""
    text = Text()
    text.append("━━ ", style=_RICH_COLOR.get(color, color))
    text.append(run.run, style="bold")
    text.append(f"  {run.profile or '-'}  ")
    if problem is not None:
        text.append(problem, style="red")
        return text
    steps = curves.step_range
    if steps is None:
        text.append("no steps reported" if curves.at_end else "reading…", style="dim")
        return text
    text.append(f"steps {steps[0]}-{steps[1]}  ")
    loss = curves.loss_points
    if loss:
        text.append(f"loss {_span(loss)}")
    else:
        text.append(NO_LOSS, style="yellow")
    rate = curves.rate_points
    if rate:
        text.append(f"  steps/s {fmt.number(rate[-1][1])}")
    if not curves.at_end:
        text.append("  reading…", style="dim")
    return text


class CompareScreen(Screen[None]):
    """The compare view of the runs in ``runs`` (in the order they were marked: their colours)."""

    BINDINGS = [
        Binding("escape", "back", "Back to the runs", id="compare.back"),
        Binding("q", "back", "Back to the runs", show=False, id="compare.back_q"),
        Binding("r", "reread", "Read again", id="compare.reread"),
    ]
    DEFAULT_CSS = """
    CompareScreen #compare-legend { height: auto; padding: 0 1; }
    CompareScreen #compare-note { color: $text-muted; padding: 0 1; }
    CompareScreen CompareChart { height: 1fr; }
    """

    def __init__(self, runs: list[ComparedRun]) -> None:
        super().__init__()
        self.runs = runs[:MAX_COMPARED]
        self.run_colors = {run.run: RUN_COLORS[i] for i, run in enumerate(self.runs)}
        self.curves = {run.path: RunCurves(run.path) for run in self.runs}
        self.problems: dict[Path, str] = {}
        #: read passes shown so far; ``done``: every run's file was read to its end by the last one
        self.passes = 0
        self.done = False
        self._reading = False

    def compose(self) -> ComposeResult:
        yield Static("", id="compare-legend")
        yield CompareChart("no loss reported by these runs", self.run_colors, id="compare-loss")
        yield CompareChart("no steps/s yet", self.run_colors, id="compare-rate")
        going = any(run.going for run in self.runs)
        note = "loss and steps/s against each run's step"
        if going:
            note += f"; runs still going are read again every {REFRESH_S:.0f}s"
        yield Static(note + "   r: read again   Escape: back to the runs", id="compare-note")
        yield Footer()

    def on_mount(self) -> None:
        self.action_reread()
        if any(run.going for run in self.runs):
            self.set_interval(REFRESH_S, self.action_reread)

    def action_back(self) -> None:
        self.dismiss(None)

    def action_reread(self) -> None:
        if self._reading:
            return
        self._reading = True
        self.run_worker(self._read_pass, thread=True, group="compare-read", exit_on_error=False)

    def _read_pass(self) -> None:
        for run in self.runs:
            curves = self.curves[run.path]
            try:
                curves.read_more()
                self.problems.pop(run.path, None)
            except (UnsafePath, OSError) as exc:
                self.problems[run.path] = str(exc)
        snapshot = self._snapshot()
        with suppress(RuntimeError):  # the app closed while reading
            self.app.call_from_thread(self._show, snapshot)

    def _snapshot(self) -> _Snapshot:
        loss: Series = []
        rate: Series = []
        legend = Text()
        signature: list[object] = []
        for i, run in enumerate(self.runs):
            curves = self.curves[run.path]
            if i:
                legend.append("\n")
            legend.append_text(legend_line(run, curves, self.run_colors[run.run], self.problems.get(run.path)))
            for series, points in ((loss, curves.loss_points), (rate, curves.rate_points)):
                if points:
                    series.append((run.run, [float(p[0]) for p in points], [p[1] for p in points]))
            signature.append((run.run, curves.offset, len(curves.loss_points), len(curves.rate_points)))
        done = all(c.at_end or path in self.problems for path, c in self.curves.items())
        return _Snapshot(loss, rate, legend, tuple(signature), done)

    def _show(self, snapshot: _Snapshot) -> None:
        self._reading = False
        self.query_one("#compare-legend", Static).update(snapshot.legend)
        self.query_one("#compare-loss", CompareChart).show_series(snapshot.signature, "loss vs step", snapshot.loss)
        self.query_one("#compare-rate", CompareChart).show_series(snapshot.signature, "steps/s vs step",
                                                                  snapshot.rate)
        self.passes += 1
        self.done = snapshot.done
        if not snapshot.done:
            self.action_reread()  # the rest of a long file, a bounded piece per pass
