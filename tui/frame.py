"""The dashboard's frame: the state every part of the app shares and the widgets it holds.

The app is built in layers, each a module: this frame (state, widgets, the replay's status),
views.py (what is drawn and how the user moves between views), live_feed.py (events in from
the job or a replay), actions.py (what the user asks of the job, and leaving), and app.py,
which puts them together with the key bindings.
"""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from textual.app import App, ComposeResult
from textual.binding import Binding
from textual.containers import Horizontal, Vertical
from textual.widget import Widget
from textual.widgets import ContentSwitcher, Footer, Input

from launcher.supervise.control import EventSource, JobControl
from launcher.telemetry.jobview import JobView
from tui.charts import LossChart, RateChart, TaskSparklines
from tui.header import JobHeader
from tui.hosts import HostsPanel
from tui.log_pane import LogPane
from tui.placement import PlacementPanel
from tui.replay import ReplaySource
from tui.task_table import TaskTable
from tui.timeline_view import TimelinePanel

FLUSH_HZ = 10.0
RATE_CHART_MIN_HEIGHT = 32
"""The screen height from which the steps/s chart is drawn under the loss chart."""
TABLE_SHARE = 0.45
"""The most of the screen's height the task table takes before it scrolls."""
CHART_EVERY = 10
"""The loss chart (plotext, tens of ms to draw) is redrawn once a second at most."""

LeaveAction = Literal["teardown", "detach", "quit"]
NOT_IN_REPLAY = "not available in replay"


GC_THRESHOLD = (100_000, 50, 1000)
"""Cyclic-GC thresholds while the dashboard runs (see `DashboardApp.on_mount`)."""



@dataclass(frozen=True)
class DashboardResult:
    """How the user left the dashboard.

    ``action``: "teardown" (the caller should tear the job down), "detach" (leave the job
    running; the caller detaches), "quit" (nothing to do: the job had ended, or replay).
    ``teardown_requested``: `D` was confirmed, so ``JobControl.teardown`` was already called.
    """

    action: LeaveAction
    teardown_requested: bool = False


class DashboardFrame(App[DashboardResult]):
    """The state of one dashboard and its widgets (queried in `DashboardApp.on_mount`)."""

    table: TaskTable
    log_pane: LogPane
    header: JobHeader
    loss_chart: LossChart
    rate_chart: RateChart
    sparklines: TaskSparklines
    placement_panel: PlacementPanel
    hosts_panel: HostsPanel
    timeline_panel: TimelinePanel
    task_filter: Input
    views: ContentSwitcher
    dashboard: Widget
    _table_rows: int

    def __init__(self, source: EventSource, control: JobControl | None, *, title: str, strategy: str,
                 hosts_total: int, live: bool = True, clock: Callable[[], float] = time.time,
                 run_dir: Path | None = None, bell_on_end: bool = False) -> None:
        super().__init__()
        self.bell_on_end = bell_on_end  # [notify] bell: ring once when a live job ends
        self.source = source
        self.control = control
        self.job_title = title
        self.strategy = strategy
        self.hosts_total = hosts_total
        self.live = live
        self.clock = clock
        self.run_dir = run_dir
        self.view = JobView()
        self.lock = threading.Lock()
        self.stream_ended = False
        self._signal_loop: asyncio.AbstractEventLoop | None = None
        self._leave_asked = False  # a signal stopped or detached the job before the loop ran
        self.teardown_requested = False
        self.flushes = 0
        self.selected_task: str | None = None
        self._source_closed = False
        self._generation = 0
        self._view_reset = False

    def compose(self) -> ComposeResult:
        yield JobHeader(id="header")
        with ContentSwitcher(initial="dashboard", id="views"):
            with Vertical(id="dashboard"):
                yield Input(placeholder="filter tasks by id, role, host or state (escape clears)",
                            id="task-filter")
                yield TaskTable(id="tasks")
                with Horizontal(id="lower"):
                    yield LogPane(id="log")
                    with Vertical(id="charts"):
                        yield LossChart(id="loss")
                        yield RateChart(id="rate")
                        yield TaskSparklines(id="sparklines")
            yield PlacementPanel(id="placement")
            yield HostsPanel(id="hosts")
            yield TimelinePanel(id="timeline")
        yield Footer()

    def action_bindings(self) -> list[Binding]:
        """The dashboard's own bindings (for help and the command palette)."""
        return [b for b in self.BINDINGS if isinstance(b, Binding)]

    def close_source(self) -> None:
        if not self._source_closed:
            self._source_closed = True
            self.source.close()

    def now(self) -> float:
        """Live: the clock. Replay: the time of the last event (the recording's own clock)."""
        if self.live:
            return self.clock()
        return self.view.last_ts if self.view.last_ts is not None else 0.0

    @property
    def replay(self) -> ReplaySource | None:
        return self.source if not self.live and isinstance(self.source, ReplaySource) else None

    def replay_status(self) -> str:
        """``2x``, ``2x, paused``; empty when this is not a replay."""
        replay = self.replay
        if replay is None:
            return ""
        speed = "max speed" if replay.speed == 0 else f"{replay.speed:g}x"
        return f"{speed}, paused" if replay.paused else speed
