"""Every run in one screen: `distlaunch runs --tui`, and `distlaunch` alone in a terminal.

A table of the runs under the state root, newest first, as `distlaunch runs` lists them (live,
supervised without a client, lost, ended), with each one's state, age, step and why it ended.
Enter picks one: the app exits with it, and the CLI attaches to a run still going or replays an
ended one (`RunsChoice`). The list is read again every few seconds and with `r`.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from pathlib import Path

from textual.app import App, ComposeResult
from textual.binding import Binding
from textual.widgets import DataTable, Footer, Static

from launcher.agent.leaving import shown
from launcher.runlookup import RunSummary, human_duration, list_runs

REFRESH_S = 3.0
#: the widest a reason may be in the table (the whole of it is in `distlaunch status RUN`)
REASON_WIDTH = 60


@dataclass(frozen=True)
class RunsChoice:
    """The run picked, and what to do with it: ``attach`` (not ended) or ``replay``."""

    run: str
    path: Path
    action: str


def state_text(run: RunSummary) -> str:
    """``Running (live)``, ``Running (lost)``, ``Succeeded``..."""
    return f"{run.job_state} ({run.live})" if run.live else run.job_state


def age_text(run: RunSummary, now: float) -> str:
    """``3m05s ago`` within two days, else the date it started."""
    if not run.started:
        return "-"
    if now - run.started > 2 * 86400:
        return time.strftime("%Y-%m-%d %H:%M", time.localtime(run.started))
    return human_duration(now - run.started) + " ago"


def row(run: RunSummary, now: float) -> tuple[str, ...]:
    reason = shown(run.job_reason or "")
    if len(reason) > REASON_WIDTH:
        reason = reason[: REASON_WIDTH - 1] + "…"
    return (run.run, run.profile or "-", state_text(run), age_text(run, now), human_duration(run.duration_s),
            "-" if run.step is None else str(run.step), str(run.restarts), reason)


COLUMNS = ("run", "profile", "state", "started", "duration", "step", "restarts", "why")


class RunsApp(App[RunsChoice | None]):
    """The runs screen; ``run()`` returns the choice (None: left with q)."""

    TITLE = "distlaunch runs"
    BINDINGS = [
        Binding("enter", "pick", "Attach / replay", priority=True),
        Binding("r", "refresh", "Refresh"),
        Binding("q", "quit", "Quit"),
    ]
    CSS = "#runs-note { color: $text-muted; padding: 0 1; } DataTable { height: 1fr; }"

    def __init__(self, root: Path | None = None) -> None:
        super().__init__()
        self.root = root
        self.runs: list[RunSummary] = []
        self.refused: list[str] = []

    def compose(self) -> ComposeResult:
        yield DataTable(id="runs", cursor_type="row", zebra_stripes=True)
        yield Static("", id="runs-note")
        yield Footer()

    def on_mount(self) -> None:
        table = self.query_one(DataTable)
        table.add_columns(*COLUMNS)
        self.action_refresh()
        self.set_interval(REFRESH_S, self.action_refresh)
        table.focus()

    def action_refresh(self) -> None:
        refused: list[str] = []
        self.runs = list_runs(self.root, refused=refused)
        self.refused = refused
        table = self.query_one(DataTable)
        keep = table.cursor_row
        table.clear()
        now = time.time()
        for run in self.runs:
            table.add_row(*row(run, now), key=run.dir)
        if self.runs:
            table.move_cursor(row=min(max(keep, 0), len(self.runs) - 1))
        note = ("no runs yet; start one with `distlaunch up PROFILE`" if not self.runs
                else "Enter: attach to a run that is going, replay one that ended")
        if refused:
            note += f"   ({len(refused)} run dir(s) not listed: not yours alone; `distlaunch runs` says why)"
        self.query_one("#runs-note", Static).update(note)

    def action_pick(self) -> None:
        table = self.query_one(DataTable)
        if not self.runs or table.cursor_row < 0 or table.cursor_row >= len(self.runs):
            return
        run = self.runs[table.cursor_row]
        going = run.live is not None and run.job_state not in ("unreadable",)
        self.exit(RunsChoice(run.run, Path(run.dir), "attach" if going else "replay"))
