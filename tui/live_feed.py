"""Events in: the job's (or a replay's) event stream, folded into the `JobView` off the UI thread.

`EventSource.events()` blocks, so `LiveFeed.read_events` runs in a thread worker the app starts;
it folds each event into the view under the lock, and the UI thread draws it (views.py). A
replay can also be moved in, sped up and paused. The feed sees the app through `FeedOwner`.
"""

from __future__ import annotations

import threading
from typing import Protocol

from textual.message import Message
from textual.notifications import SeverityLevel
from textual.widget import Widget
from textual.widgets import Input

from launcher.supervise.control import EventSource
from launcher.telemetry.jobview import JobView
from tui.log_pane import LogPane
from tui.replay import SPEEDS, ReplaySource


class StreamEnded(Message):
    """The event source is exhausted (job over, replay finished, or the stream failed)."""

    def __init__(self, error: str | None) -> None:
        super().__init__()
        self.error = error


class FeedOwner(Protocol):
    """What the feed uses of the app: the source, the view it replaces on a replay's jump back,
    the log pane, and the app's messages and notifications."""

    source: EventSource
    view: JobView
    lock: threading.Lock
    live: bool
    stream_ended: bool
    view_reset: bool
    log_pane: LogPane

    @property
    def replay(self) -> ReplaySource | None: ...

    @property
    def focused(self) -> Widget | None: ...

    def replay_status(self) -> str: ...

    def flush(self, force_chart: bool = False) -> None: ...

    def post_message(self, message: Message) -> bool: ...

    def notify(self, message: str, *, title: str = "", severity: SeverityLevel = "information",
               timeout: float | None = None, markup: bool = True) -> None: ...


class LiveFeed:
    """Reading the events, and the keys that move a replay or pause a log."""

    def __init__(self, owner: FeedOwner) -> None:
        self.owner = owner
        self._generation = 0

    def read_events(self) -> None:
        """The worker's body: fold every event into the view, then post `StreamEnded`."""
        app = self.owner
        error: str | None = None
        try:
            for event in app.source.events():
                generation = getattr(app.source, "generation", 0)
                with app.lock:
                    if generation != self._generation:  # the replay went back: start the picture over
                        self._generation = generation
                        app.view = JobView()
                        app.view_reset = True
                    app.view.apply(event)
        except Exception as exc:  # the stream broke: say so on screen instead of dying
            error = f"event stream failed: {exc}"
        app.post_message(StreamEnded(error))

    def stream_ended(self, message: StreamEnded) -> None:
        app = self.owner
        app.stream_ended = True
        app.flush(force_chart=True)
        if message.error:
            app.notify(message.error, severity="error", timeout=10)
        elif not app.live:
            app.notify("Replay finished", timeout=5)

    def seek(self, seconds: float) -> None:
        """Replay: move in the recording. Otherwise the arrows keep their usual meaning for the
        focused widget (the binding has priority so that the table cannot swallow it in a replay)."""
        app = self.owner
        replay = app.replay
        focused = app.focused
        if replay is None or isinstance(focused, Input):
            prefix = "cursor" if isinstance(focused, Input) else "scroll"
            method = getattr(focused, f"action_{prefix}_{'left' if seconds < 0 else 'right'}", None)
            if method is not None:
                method()
            return
        replay.seek(seconds)
        app.notify(f"Replay {'back' if seconds < 0 else 'forward'} {abs(seconds):g} s", timeout=2)

    def replay_speed(self, direction: int) -> None:
        app = self.owner
        replay = app.replay
        if replay is None:
            app.notify("only a replay has a speed", severity="warning")
            return
        faster = [s for s in SPEEDS if s > replay.speed]
        slower = [s for s in SPEEDS if 0 < s < replay.speed]
        if direction > 0 and faster:
            replay.speed = faster[0]
        elif direction < 0 and slower:
            replay.speed = slower[-1]
        app.notify(f"Replay speed {app.replay_status()}", timeout=2)

    def toggle_follow(self) -> None:
        app = self.owner
        replay = app.replay
        if replay is not None and not app.stream_ended:
            replay.set_paused(not replay.paused)
            app.notify("Replay paused" if replay.paused else "Replay resumed", timeout=2)
            return
        pane = app.log_pane
        with app.lock:
            pane.set_paused(app.view, not pane.paused)
