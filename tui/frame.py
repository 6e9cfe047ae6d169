"""The dashboard's frame: its widget tree, the state its screen and parts share, how the user left it.

`DashboardState` is the job's picture and how the stream stands (no Textual in it); the app
(app.py) makes it, its live feed (live_feed.py) folds the events into it, and the dashboard
screen (dashboard.py) draws it and acts on it. `DashboardWidgets` names the widgets of the tree,
found once when the screen mounts. The parts (views.py: drawing; actions.py: acting on the job)
take these two and the Textual screen they run on, so none of them imports the screen or copies
Textual's signatures.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from textual.app import ComposeResult
from textual.containers import Horizontal, Vertical
from textual.dom import DOMNode
from textual.widgets import ContentSwitcher, Footer, Input

from launcher.supervise.control import EventSource, JobControl
from launcher.telemetry.jobview import JobView
from tui.charts import LossChart, RateChart, TaskSparklines
from tui.header import JobHeader
from tui.hosts_view import HostsPanel
from tui.log_pane import LogPane
from tui.merged_log import MergedLogPanel
from tui.placement_view import PlacementPanel
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

GC_THRESHOLD = (100_000, 50, 1000)
"""Cyclic-GC thresholds while the dashboard runs (see `DashboardApp.on_mount`)."""


class DashboardState:
    """The job's picture (the `JobView`, under ``lock``: the feed's thread writes it) and how the
    stream and the user stand. Everything but the view is read and written on the UI thread."""

    def __init__(self, source: EventSource, control: JobControl | None, *, title: str, strategy: str,
                 hosts_total: int, live: bool = True, clock: Callable[[], float] = time.time,
                 run_dir: Path | None = None, bell_on_end: bool = False) -> None:
        self.source = source
        self.control = control
        self.job_title = title
        self.strategy = strategy
        self.hosts_total = hosts_total
        self.live = live
        self.clock = clock
        self.run_dir = run_dir
        self.bell_on_end = bell_on_end  # [notify] bell: ring once when a live job ends
        self.view = JobView()
        self.lock = threading.Lock()
        self.stream_ended = False
        self.view_reset = False  # the feed started the picture over: the widgets forget theirs
        self.teardown_requested = False
        self.flushes = 0
        self.selected_task: str | None = None
        self._source_closed = False

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

    @property
    def job_running(self) -> bool:
        """A live job that has not ended and is not being torn down: leaving it is a choice."""
        return self.live and self.control is not None and not self.view.ended \
            and not self.stream_ended and not self.teardown_requested

    def close_source(self) -> None:
        if not self._source_closed:
            self._source_closed = True
            self.source.close()


@dataclass(frozen=True)
class DashboardResult:
    """How the user left the dashboard.

    ``action``: "teardown" (the caller should tear the job down), "detach" (leave the job
    running; the caller detaches), "quit" (nothing to do: the job had ended, or replay).
    ``teardown_requested``: `D` was confirmed, so ``JobControl.teardown`` was already called.
    """

    action: LeaveAction
    teardown_requested: bool = False


def dashboard_widgets() -> ComposeResult:
    """The widget tree: the header, the views (the dashboard, placement, hosts, timeline, the merged
    log), the footer."""
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
        yield MergedLogPanel(id="merged")
    yield Footer()


@dataclass(frozen=True)
class DashboardWidgets:
    """The widgets of `dashboard_widgets`' tree, by what they show."""

    table: TaskTable
    log_pane: LogPane
    header: JobHeader
    loss_chart: LossChart
    rate_chart: RateChart
    sparklines: TaskSparklines
    placement_panel: PlacementPanel
    hosts_panel: HostsPanel
    timeline_panel: TimelinePanel
    merged_panel: MergedLogPanel
    task_filter: Input
    views: ContentSwitcher
    dashboard: Vertical

    @classmethod
    def of(cls, root: DOMNode) -> DashboardWidgets:
        """Found once under ``root`` (the dashboard screen, after it composed the tree)."""
        return cls(root.query_one(TaskTable), root.query_one(LogPane), root.query_one(JobHeader),
                   root.query_one(LossChart), root.query_one(RateChart), root.query_one(TaskSparklines),
                   root.query_one(PlacementPanel), root.query_one(HostsPanel), root.query_one(TimelinePanel),
                   root.query_one(MergedLogPanel), root.query_one("#task-filter", Input),
                   root.query_one(ContentSwitcher), root.query_one("#dashboard", Vertical))
