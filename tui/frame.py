"""The dashboard's frame: its widget tree, how the user left it, and the settings its parts share.

The app (app.py) owns the state and the widgets and holds three parts, each an object of its own
module that sees the app through a small Protocol: views.py (what is drawn and how the user moves
between views), live_feed.py (events in from the job or a replay) and actions.py (what the user
asks of the job, and leaving).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from textual.app import ComposeResult
from textual.containers import Horizontal, Vertical
from textual.widgets import ContentSwitcher, Footer, Input

from tui.charts import LossChart, RateChart, TaskSparklines
from tui.header import JobHeader
from tui.hosts_view import HostsPanel
from tui.log_pane import LogPane
from tui.placement_view import PlacementPanel
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
    """The widget tree: the header, the views (the dashboard, placement, hosts, timeline), the footer."""
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
