"""Events in: the job's (or a replay's) event stream, folded into the `JobView` off the UI thread.

`EventSource.events()` blocks, so it is read in a thread worker that folds each event into the
view under the lock; the UI thread draws it (views.py). A replay can also be moved in, sped up
and paused.
"""

from __future__ import annotations

from textual import work
from textual.message import Message
from textual.widgets import Input

from launcher.telemetry.jobview import JobView
from tui.replay import SPEEDS
from tui.views import DashboardViews


class StreamEnded(Message):
    """The event source is exhausted (job over, replay finished, or the stream failed)."""

    def __init__(self, error: str | None) -> None:
        super().__init__()
        self.error = error


class LiveFeed(DashboardViews):
    """Reading the events, and the keys that move a replay or pause a log."""

    @work(thread=True, exclusive=True, group="events")
    def read_events(self) -> None:
        error: str | None = None
        try:
            for event in self.source.events():
                generation = getattr(self.source, "generation", 0)
                with self.lock:
                    if generation != self._generation:  # the replay went back: start the picture over
                        self._generation = generation
                        self.view = JobView()
                        self._view_reset = True
                    self.view.apply(event)
        except Exception as exc:  # the stream broke: say so on screen instead of dying
            error = f"event stream failed: {exc}"
        self.post_message(StreamEnded(error))

    def on_stream_ended(self, message: StreamEnded) -> None:
        self.stream_ended = True
        self.flush(force_chart=True)
        if message.error:
            self.notify(message.error, severity="error", timeout=10)
        elif not self.live:
            self.notify("Replay finished", timeout=5)

    def action_seek(self, seconds: float) -> None:
        """Replay: move in the recording. Otherwise the arrows keep their usual meaning for the
        focused widget (the binding has priority so that the table cannot swallow it in a replay)."""
        replay = self.replay
        focused = self.focused
        if replay is None or isinstance(focused, Input):
            prefix = "cursor" if isinstance(focused, Input) else "scroll"
            method = getattr(focused, f"action_{prefix}_{'left' if seconds < 0 else 'right'}", None)
            if method is not None:
                method()
            return
        replay.seek(seconds)
        self.notify(f"Replay {'back' if seconds < 0 else 'forward'} {abs(seconds):g} s", timeout=2)

    def action_replay_speed(self, direction: int) -> None:
        replay = self.replay
        if replay is None:
            self.notify("only a replay has a speed", severity="warning")
            return
        faster = [s for s in SPEEDS if s > replay.speed]
        slower = [s for s in SPEEDS if 0 < s < replay.speed]
        if direction > 0 and faster:
            replay.speed = faster[0]
        elif direction < 0 and slower:
            replay.speed = slower[-1]
        self.notify(f"Replay speed {self.replay_status()}", timeout=2)

    def action_toggle_follow(self) -> None:
        replay = self.replay
        if replay is not None and not self.stream_ended:
            replay.set_paused(not replay.paused)
            self.notify("Replay paused" if replay.paused else "Replay resumed", timeout=2)
            return
        pane = self.log_pane
        with self.lock:
            pane.set_paused(self.view, not pane.paused)
