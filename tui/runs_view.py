"""Every run in one screen: `distlaunch runs --tui`, and `distlaunch` alone in a terminal.

A table of the runs under the state root, newest first, as `distlaunch runs` lists them (live,
supervised without a client, lost, ended), with each one's state, age, step and why it ended.
Enter picks one: the app exits with it, and the CLI attaches to a run still going or replays an
ended one (`RunsChoice`). The list is read again every few seconds and with `r`. Space marks runs
(up to ``MAX_COMPARED``) and `c` overlays their loss and steps/s curves (``tui/runs_compare.py``).
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from pathlib import Path

from textual.app import App, ComposeResult
from textual.binding import Binding
from textual.widgets import DataTable, Footer, Static
from textual.widgets.data_table import ColumnKey

from launcher.agent.leaving import shown
from launcher.runlookup import RunSummary, human_duration, list_runs
from tui.runs_compare import MAX_COMPARED, ComparedRun, CompareScreen

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


MARK = "●"


def row(run: RunSummary, now: float, marked: bool = False) -> tuple[str, ...]:
    reason = shown(run.job_reason or "")
    if len(reason) > REASON_WIDTH:
        reason = reason[: REASON_WIDTH - 1] + "…"
    return (MARK if marked else "", run.run, run.profile or "-", state_text(run), age_text(run, now),
            human_duration(run.duration_s), "-" if run.step is None else str(run.step), str(run.restarts), reason)


COLUMNS = ("", "run", "profile", "state", "started", "duration", "step", "restarts", "why")


class RunsApp(App[RunsChoice | None]):
    """The runs screen; ``run()`` returns the choice (None: left with q)."""

    TITLE = "distlaunch runs"
    BINDINGS = [
        Binding("enter", "pick", "Attach / replay", priority=True),
        Binding("space", "mark", "Mark", id="runs.mark"),
        Binding("c", "compare", "Compare marked", id="runs.compare"),
        Binding("r", "refresh", "Refresh"),
        Binding("q", "quit", "Quit"),
    ]
    CSS = ("#runs-note { color: $text-muted; padding: 0 1; } #runs-message { padding: 0 1; } "
           "DataTable { height: 1fr; }")

    def __init__(self, root: Path | None = None) -> None:
        super().__init__()
        self.root = root
        self.runs: list[RunSummary] = []
        self.refused: list[str] = []
        #: the run dirs marked for comparing, in the order they were marked (their colours)
        self.marked: list[str] = []
        self._mark_column: ColumnKey | None = None

    def compose(self) -> ComposeResult:
        yield DataTable(id="runs", cursor_type="row", zebra_stripes=True)
        yield Static("", id="runs-message")
        yield Static("", id="runs-note")
        yield Footer()

    def on_mount(self) -> None:
        table = self.query_one(DataTable)
        self._mark_column = table.add_columns(*COLUMNS)[0]
        self.action_refresh()
        self.set_interval(REFRESH_S, self._tick)
        table.focus()

    def _tick(self) -> None:
        if len(self.screen_stack) == 1:  # the list is not read while the compare view covers it
            self.action_refresh()

    def action_refresh(self) -> None:
        refused: list[str] = []
        self.runs = list_runs(self.root, refused=refused)
        self.refused = refused
        listed = {run.dir for run in self.runs}
        self.marked = [path for path in self.marked if path in listed]
        table = self.query_one(DataTable)
        keep = table.cursor_row
        table.clear()
        now = time.time()
        for run in self.runs:
            table.add_row(*row(run, now, run.dir in self.marked), key=run.dir)
        if self.runs:
            table.move_cursor(row=min(max(keep, 0), len(self.runs) - 1))
        note = ("no runs yet; start one with `distlaunch up PROFILE`" if not self.runs
                else "Enter: attach to a run that is going, replay one that ended   "
                     "space: mark   c: compare the marked runs' curves")
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

    def check_action(self, action: str, parameters: tuple[object, ...]) -> bool | None:
        """The list's keys act on the list only, not under the compare view."""
        if action in ("pick", "mark", "compare", "refresh"):
            return len(self.screen_stack) == 1
        return True

    def _cursor_run(self) -> RunSummary | None:
        row_index = self.query_one(DataTable).cursor_row
        return self.runs[row_index] if self.runs and 0 <= row_index < len(self.runs) else None

    def _say(self, message: str) -> None:
        self.query_one("#runs-message", Static).update(message)

    def action_mark(self) -> None:
        """Marks the run under the cursor for comparing, or unmarks it."""
        run = self._cursor_run()
        if run is None or self._mark_column is None:
            return
        if run.dir in self.marked:
            self.marked.remove(run.dir)
        elif len(self.marked) >= MAX_COMPARED:
            self._say(f"at most {MAX_COMPARED} runs are compared at once: unmark one (space) first")
            return
        else:
            self.marked.append(run.dir)
        self.query_one(DataTable).update_cell(run.dir, self._mark_column, MARK if run.dir in self.marked else "")
        count = len(self.marked)
        self._say(f"{count} marked: c compares them" if count >= 2 else f"{count} marked" if count else "")

    def action_compare(self) -> None:
        """Opens the compare view of the marked runs; with fewer than two, says so."""
        by_dir = {run.dir: run for run in self.runs}
        runs = [by_dir[path] for path in self.marked if path in by_dir]
        if len(runs) < 2:
            self._say(f"compare needs two marked runs ({len(runs)} marked): space marks the run under the cursor")
            return
        self._say("")
        self.push_screen(CompareScreen([
            ComparedRun(run.run, run.profile, Path(run.dir), going=run.live is not None) for run in runs]))
