"""One redrawn line of progress on stderr for a step that takes a while (uploads, sync, export, prune).

Shown only on a terminal, only once the step has lasted ``DISTLAUNCH_PROGRESS_AFTER`` seconds (1 by
default), and never after ``mute()`` (``up --json``). The line is redrawn with ``\\r`` a few times a
second by a thread of its own, so elapsed time moves while one slow host holds the step, and it is
cleared when the step ends: what stays on the screen is only what the step prints itself. Counts and
bytes are added with ``advance`` from any thread. Stdlib only.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import sys
import threading
import time
from collections.abc import Iterator
from types import TracebackType
from typing import TextIO

from launcher.telemetry.units import human_bytes

#: seconds a step runs before its line appears (tests set DISTLAUNCH_PROGRESS_AFTER=0)
DEFAULT_AFTER = 1.0
#: seconds between redraws
REDRAW = 0.2
BAR_WIDTH = 20

_muted = False
_active: list[Progress] = []  # lines on screen or about to be, for paused()
_active_lock = threading.Lock()


def mute() -> None:
    """No progress lines from this process from now on (its stderr is read by a program)."""
    global _muted
    _muted = True


def after_seconds() -> float:
    try:
        return max(0.0, float(os.environ.get("DISTLAUNCH_PROGRESS_AFTER", DEFAULT_AFTER)))
    except ValueError:
        return DEFAULT_AFTER


def wanted(stream: TextIO) -> bool:
    """Whether progress belongs on ``stream``: a terminal that is not dumb, and not muted."""
    try:
        tty = stream.isatty()
    except (AttributeError, ValueError):
        return False
    return tty and not _muted and os.environ.get("TERM") != "dumb"


@contextlib.contextmanager
def paused() -> Iterator[None]:
    """Every progress line of this process cleared while the block prints (a notice from another thread)."""
    with _active_lock:
        lines = list(_active)
    with contextlib.ExitStack() as stack:
        for line in lines:
            stack.enter_context(line.hold())
        yield


class Progress:
    """``with Progress("syncing code", total=16, unit="hosts") as p: ... p.advance(nbytes=n)``."""

    def __init__(self, label: str, total: int | None = None, unit: str = "", *, stream: TextIO | None = None,
                 enabled: bool | None = None, after: float | None = None) -> None:
        self.label = label
        self.total = total
        self.unit = unit
        self.done = 0
        self.nbytes = 0
        self._stream = stream or sys.stderr
        self._start = time.monotonic()
        self._lock = threading.RLock()  # hold() may nest: paused() inside a step's own hold()
        self._stop = threading.Event()
        self._width = 0  # characters of the line on screen; 0: nothing shown
        self._last = ""
        self._thread: threading.Thread | None = None
        if wanted(self._stream) if enabled is None else enabled:
            delay = after_seconds() if after is None else after
            if delay == 0:  # at once, not when the thread first runs: a short step shows it too
                with self._lock:
                    self._draw()
                delay = REDRAW
            with _active_lock:
                _active.append(self)
            self._thread = threading.Thread(target=self._run, args=(delay,), name="progress", daemon=True)
            self._thread.start()

    def advance(self, count: int = 1, nbytes: int = 0) -> None:
        with self._lock:
            self.done += count
            self.nbytes += nbytes

    def text(self) -> str:
        """The line as it is drawn now."""
        parts = [self.label]
        if self.total:
            filled = min(BAR_WIDTH, BAR_WIDTH * self.done // self.total)
            parts.append("[" + "#" * filled + "-" * (BAR_WIDTH - filled) + "]")
            parts.append(f"{self.done}/{self.total} {self.unit}".rstrip())
        else:
            parts.append(f"{self.done:,} {self.unit}".rstrip())
        if self.nbytes:
            parts.append(human_bytes(self.nbytes))
        parts.append(f"{time.monotonic() - self._start:.0f}s")
        return "  ".join(parts)

    @contextlib.contextmanager
    def hold(self) -> Iterator[None]:
        """The line cleared and not redrawn while the block prints what it has to say."""
        with self._lock:
            self._clear()
            yield

    def echo(self, line: str, file: TextIO | None = None) -> None:
        """Print ``line`` (stdout by default) without leaving the progress line mixed into it."""
        with self.hold():
            print(line, file=file or sys.stdout, flush=True)

    def close(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
            with _active_lock, contextlib.suppress(ValueError):
                _active.remove(self)
        with self._lock:
            self._clear()

    def __enter__(self) -> Progress:
        return self

    def __exit__(self, kind: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.close()

    def _run(self, delay: float) -> None:
        if self._stop.wait(delay):
            return
        while True:
            with self._lock:
                self._draw()
            if self._stop.wait(REDRAW):
                return

    def _draw(self) -> None:
        columns = shutil.get_terminal_size((80, 24)).columns
        line = self.text()[: max(10, columns - 1)]  # never wraps, or \r would redraw only the last row
        if self._width and line == self._last:
            return
        self._last = line
        try:
            self._stream.write("\r" + line.ljust(self._width))
            self._stream.flush()
        except (OSError, ValueError):
            return
        self._width = len(line)

    def _clear(self) -> None:
        if self._width:
            try:
                self._stream.write("\r" + " " * self._width + "\r")
                self._stream.flush()
            except (OSError, ValueError):
                pass
            self._width = 0
