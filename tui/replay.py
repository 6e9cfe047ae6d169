"""Replay a recorded run: an `EventSource` over an events.jsonl file."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from pathlib import Path

from launcher.events import Event, EventDecodeError

MAX_GAP_S = 1.0
"""No single pause between two replayed events is longer than this, whatever the recording."""


class ReplaySource:
    """Yields the events of an events.jsonl file in order, paced like the recording.

    ``speed`` scales the time between events (2.0 = twice as fast); 0 replays as fast as
    possible. Lines that are not valid events (a run cut off mid-write) are skipped, so a
    crashed run can still be replayed. ``close()`` ends the iteration promptly, even mid-pause.
    """

    def __init__(self, path: Path, speed: float = 1.0) -> None:
        if speed < 0:
            raise ValueError("speed must be >= 0")
        self.path = Path(path)
        self.speed = speed
        self.skipped_lines = 0
        self._closed = threading.Event()

    def events(self) -> Iterator[Event]:
        previous_ts: float | None = None
        with self.path.open(encoding="utf-8") as lines:
            for raw in lines:
                if self._closed.is_set():
                    return
                if not raw.strip():
                    continue
                try:
                    event = Event.from_json(raw)
                except EventDecodeError:
                    self.skipped_lines += 1
                    continue
                if self.speed > 0 and previous_ts is not None:
                    gap = min(max(0.0, event.ts - previous_ts) / self.speed, MAX_GAP_S)
                    if gap > 0 and self._closed.wait(gap):
                        return
                previous_ts = event.ts
                yield event

    def close(self) -> None:
        self._closed.set()
