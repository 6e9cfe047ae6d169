"""The dashboard app, and `run_dashboard`, the one entry point the CLI calls.

`DashboardApp` is Textual's App reduced to what is the app's: it makes the `DashboardState`
(frame.py), composes the screens (the `DashboardScreen` of dashboard.py is its first and main
screen: the widgets, every dashboard key and what it does), runs the live feed (live_feed.py)
and ends. Its own keys are Textual's; ctrl+q asks as `q` does.

Threading: `EventSource.events()` blocks, so it is read in a thread worker that folds each
event into the `JobView` under a lock. The UI thread flushes the view to the widgets at
`FLUSH_HZ` (the screen's set_interval): however fast events arrive, the screen is rewritten at
most ten times a second, and only the cells that changed. Widgets are touched on the UI thread
only; the worker reaches it through `post_message`.

Leaving: the app returns a `DashboardResult` and does not act on the job itself when
the user quits. The caller acts on ``result.action``: "teardown" -> tear the job down,
"detach" -> detach from it (tasks keep running), "quit" -> the job had ended, or this was a
replay. Only `D` (tear down, confirmed) and `r`/`x` call `JobControl` from inside the app.
"""

from __future__ import annotations

import asyncio
import gc
import time
from collections.abc import Callable
from pathlib import Path

from textual.app import App

from launcher.supervise.control import EventSource, JobControl
from launcher.supervise.stopsignals import StopSignals
from tui.actions import leave
from tui.commands import DashboardCommands
from tui.dashboard import DashboardScreen
from tui.frame import GC_THRESHOLD, DashboardResult, DashboardState, DashboardWidgets, LeaveAction
from tui.live_feed import LiveFeed, StreamEnded
from tui.screens import QuitScreen


class DashboardApp(App[DashboardResult]):
    """Shows one job live (or a replay) and asks the supervisor to act on it."""

    CSS_PATH = Path(__file__).with_name("dashboard.tcss")  # absolute: subclasses live elsewhere
    TITLE = "distlaunch"
    COMMANDS = App.COMMANDS | {DashboardCommands}

    def __init__(self, source: EventSource, control: JobControl | None, *, title: str, strategy: str,
                 hosts_total: int, live: bool = True, clock: Callable[[], float] = time.time,
                 run_dir: Path | None = None, bell_on_end: bool = False) -> None:
        super().__init__()
        self.state = DashboardState(source, control, title=title, strategy=strategy, hosts_total=hosts_total,
                                    live=live, clock=clock, run_dir=run_dir, bell_on_end=bell_on_end)
        self.dashboard = DashboardScreen(self.state)
        self.feed = LiveFeed(self.state)
        self._signal_loop: asyncio.AbstractEventLoop | None = None
        self._leave_asked = False  # a signal stopped or detached the job before the loop ran

    @property
    def widgets(self) -> DashboardWidgets:
        """The dashboard screen's widgets (tests and the screenshot tool read them)."""
        return self.dashboard.widgets

    async def on_mount(self) -> None:
        await self.push_screen(self.dashboard)  # mounted (its widgets there) before the feed starts
        self._signal_loop = asyncio.get_running_loop()
        if self._leave_asked:
            self.leave("quit")
        self.title = f"distlaunch — {self.state.job_title}"
        self._gc_threshold = gc.get_threshold()
        # Full collections over the many small objects of a big job stalled key handling for
        # 100-150 ms now and then (benchmarks/tui_replay.py, p99 124-130 ms vs 67-77 ms with
        # these settings): freeze what exists now and collect young objects less often.
        gc.freeze()
        gc.set_threshold(*GC_THRESHOLD)
        self.run_worker(lambda: self.feed.read_events(self.post_message), name="read_events", group="events",
                        exclusive=True, thread=True)

    def on_unmount(self) -> None:
        previous = getattr(self, "_gc_threshold", None)
        if previous is not None:
            gc.set_threshold(*previous)
            gc.unfreeze()
        self.state.close_source()

    def on_stream_ended(self, message: StreamEnded) -> None:
        self.state.stream_ended = True
        if self.state.live and self.state.view.requeued is not None and not self.state.view.ended:
            self.leave("quit")  # Slurm requeued the job: the caller shows its queue, then this run again
            return
        self.dashboard.flush(force_chart=True)
        if message.error:
            self.notify(message.error, severity="error", timeout=10)
        elif not self.state.live:
            self.notify("Replay finished", timeout=5)

    def leave(self, action: LeaveAction) -> None:
        leave(self, self.state, action)

    def leave_from_signal(self) -> None:
        """Quit: a signal stopped or detached the job already (`launcher/supervise/stopsignals.py`). Called
        from the handler, on this app's thread between two bytecodes: the loop does the work."""
        self._leave_asked = True
        if self._signal_loop is not None:
            self._signal_loop.call_soon_threadsafe(self.leave, "quit")

    async def action_quit(self) -> None:
        """ctrl+q asks the same question as `q`: quitting never silently abandons a running job."""
        if not isinstance(self.screen, QuitScreen):
            self.dashboard.action_leave()


class DashboardError(RuntimeError):
    """The dashboard itself failed (Textual has printed the traceback). The job was not acted
    on: the caller decides, e.g. keep it running headless or detach."""


def run_dashboard(source: EventSource, control: JobControl | None, *, title: str, strategy: str,
                  hosts_total: int, live: bool = True, run_dir: Path | None = None,
                  bell_on_end: bool = False, signals: StopSignals | None = None) -> DashboardResult:
    """Run the dashboard until the user leaves (blocking); see `DashboardResult` for what to do next.
    ``signals``: the launcher's stop signals, which make the app quit while it runs.

    Raises `DashboardError` when the app crashed rather than being left by the user."""
    app = DashboardApp(source, control, title=title, strategy=strategy, hosts_total=hosts_total, live=live,
                       run_dir=run_dir, bell_on_end=bell_on_end)
    if signals is not None:
        signals.leave = app.leave_from_signal
    try:
        result = app.run()
    finally:
        if signals is not None:
            signals.leave = None
        app.state.close_source()
    if app.return_code:
        raise DashboardError(f"the dashboard stopped with an error (exit code {app.return_code})")
    return result if result is not None else DashboardResult("quit")
