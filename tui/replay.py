"""Replay a recorded run: an `EventSource` over an events.jsonl file that can be paused, sped up or
slowed down, and moved forwards or backwards in the recording's time."""

from __future__ import annotations

import threading
from collections.abc import Generator, Iterator
from pathlib import Path

from launcher.events import Event, EventDecodeError
from launcher.privatedir import open_trusted
from launcher.telemetry.eventcheck import decode_checked

MAX_GAP_S = 1.0
"""No single pause between two replayed events is longer than this, whatever the recording."""

SPEEDS = (0.25, 0.5, 1.0, 2.0, 4.0, 8.0, 16.0, 32.0)
"""What `+` / `-` step through."""


class ReplaySource:
    """Yields the events of an events.jsonl file in order, paced like the recording.

    ``speed`` scales the time between events (2.0 = twice as fast); 0 replays as fast as
    possible. Lines that are not valid events (a run cut off mid-write, bytes that are not UTF-8, a
    field of the wrong type: ``eventcheck.decode_checked``) are skipped and counted in ``skipped_lines``,
    so a crashed or damaged run can still be replayed. ``close()`` ends the iteration promptly, even mid-pause.

    Controls (any thread): ``set_paused``, ``speed``, ``seek(seconds)``. Seeking forwards yields the
    skipped events without pacing; seeking backwards starts the file over, bumps ``generation``
    first (a consumer seeing it change rebuilds its picture from nothing) and fast-forwards to the
    target time.
    """

    def __init__(self, path: Path, speed: float = 1.0) -> None:
        if speed < 0:
            raise ValueError("speed must be >= 0")
        self.path = Path(path)
        self.speed = speed
        self.skipped_lines = 0
        self._counted_to = 0  # the line number of the last bad line counted
        self.generation = 0
        self.position: float | None = None
        """The recording time of the last event yielded."""
        self.paused = False
        self._closed = threading.Event()
        self._wake = threading.Condition()
        self._seek_to: float | None = None

    # -- controls --------------------------------------------------------------------------

    def set_paused(self, paused: bool) -> None:
        with self._wake:
            self.paused = paused
            self._wake.notify_all()

    def seek(self, seconds: float) -> None:
        """Move by `seconds` of recording time from the current position (negative: back)."""
        with self._wake:
            base = self._seek_to if self._seek_to is not None else self.position
            if base is None:
                return
            self._seek_to = base + seconds
            self._wake.notify_all()

    def close(self) -> None:
        self._closed.set()
        with self._wake:
            self._wake.notify_all()

    # -- the stream -------------------------------------------------------------------------

    def events(self) -> Iterator[Event]:
        target: float | None = None
        while True:
            rewind_to = yield from self._one_pass(target)
            if rewind_to is None:
                return
            target = rewind_to

    def _one_pass(self, target: float | None) -> Generator[Event, None, float | None]:
        """One read of the file; returns the time to go back to when a seek backwards cut it short."""
        previous_ts: float | None = None
        with open_trusted(self.path, "the run's events") as lines:  # a FIFO or a link: refused, never waited on
            for number, raw in enumerate(lines, start=1):
                if self._closed.is_set():
                    return None
                if not raw.strip():
                    continue
                try:
                    event = decode_checked(raw.decode("utf-8"))
                except (UnicodeDecodeError, EventDecodeError):
                    if number > self._counted_to:  # a rewind reads them again: counted once
                        self.skipped_lines += 1
                        self._counted_to = number
                    continue
                if target is not None and event.ts >= target:
                    target, previous_ts = None, None  # arrived: pace from here
                if target is None:
                    gap = 0.0
                    if self.speed > 0 and previous_ts is not None:
                        gap = min(max(0.0, event.ts - previous_ts) / self.speed, MAX_GAP_S)
                    outcome = self._wait(gap)
                    if outcome == "closed":
                        return None
                    if outcome == "seek":
                        with self._wake:
                            wanted, self._seek_to = self._seek_to, None
                        assert wanted is not None
                        if self.position is not None and wanted < self.position:
                            self.generation += 1
                            self.position = None
                            return wanted
                        if event.ts < wanted:
                            target = wanted
                previous_ts = event.ts
                self.position = event.ts
                yield event
        return None

    def _wait(self, gap: float) -> str:
        """Sleep `gap` seconds (longer while paused); "seek" or "closed" cut it short, else "go"."""
        with self._wake:
            remaining = gap
            while True:
                if self._closed.is_set():
                    return "closed"
                if self._seek_to is not None:
                    return "seek"
                if self.paused:
                    self._wake.wait()
                    continue
                if remaining <= 0:
                    return "go"
                self._wake.wait(remaining)
                remaining = 0  # woken early: the checks above decide; otherwise the gap is over
