"""Events in: the job's (or a replay's) event stream, folded into the `JobView` off the UI thread.

`EventSource.events()` blocks, so `LiveFeed.read_events` runs in a thread worker the app starts;
it folds each event into the state's view under its lock, and the UI thread draws it (the
dashboard screen's flush, views.py). When the stream ends, the feed posts `StreamEnded`.
"""

from __future__ import annotations

from collections.abc import Callable

from textual.message import Message

from launcher.telemetry.jobview import JobView
from tui.frame import DashboardState


class StreamEnded(Message):
    """The event source is exhausted (job over, replay finished, or the stream failed)."""

    def __init__(self, error: str | None) -> None:
        super().__init__()
        self.error = error


class LiveFeed:
    """Reads the events into the state's view; a replay that went back starts the picture over."""

    def __init__(self, state: DashboardState) -> None:
        self.state = state
        self._generation = 0

    def read_events(self, post: Callable[[StreamEnded], object]) -> None:
        """The worker's body: fold every event into the view, then `post` `StreamEnded`."""
        state = self.state
        error: str | None = None
        try:
            for event in state.source.events():
                generation = getattr(state.source, "generation", 0)
                with state.lock:
                    if generation != self._generation:  # the replay went back: start the picture over
                        self._generation = generation
                        state.view = JobView()
                        state.view_reset = True
                    state.view.apply(event)
        except Exception as exc:  # the stream broke: say so on screen instead of dying
            error = f"event stream failed: {exc}"
        post(StreamEnded(error))
