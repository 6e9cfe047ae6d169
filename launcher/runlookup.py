"""Finding a run and reading its events back: a RUN argument (a run id, a run directory, or none
for the latest) to a run dir that is the user's and no one else can write (``find_run``), and the
run's events.jsonl read defensively (``EventLines``: bad lines skipped and counted). The run dir
itself, its file names and its writers are ``launcher/rundir.py``; its state.json as a typed record
is ``launcher/runstate.py``.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

from launcher.errors import UserError
from launcher.events import Event, EventDecodeError
from launcher.paths import LATEST_LINK, runs_root
from launcher.privatedir import check_ancestry, open_trusted, trusted_dir
from launcher.rundir import EVENTS_FILE, STATE_FILE, read_state
from launcher.telemetry.eventcheck import decode_checked


def outside_state_dir(path: Path) -> bool:
    """A run dir the user put outside the state dir (``up --run-dir``): cleanup leaves it alone
    unless the user names it (``prune RUN``)."""
    return not path.resolve().is_relative_to(runs_root().resolve())


class EventLines:
    """The events of a run dir's events.jsonl, read defensively: a line that is not UTF-8, not JSON,
    not an event, torn, or that has a field of a type its readers do not take (each kind's class in ``launcher.events``)
    is skipped and counted in ``skipped``; blank lines are no lines."""

    def __init__(self, path: Path) -> None:
        self.path = path / EVENTS_FILE
        self.skipped = 0

    def __iter__(self) -> Iterator[Event]:
        try:  # a FIFO, a link or a file others may write there: one line, never a hang
            fh = open_trusted(self.path, "the run's events")
        except FileNotFoundError:
            return
        with fh:
            for raw in fh:
                if not raw.strip():
                    continue
                try:
                    yield decode_checked(raw.decode("utf-8"))
                except (UnicodeDecodeError, EventDecodeError):
                    self.skipped += 1

    def note(self) -> str | None:
        """The one line that says how many lines were skipped (None: none was)."""
        return skipped_note(self.skipped, self.path)


def skipped_note(count: int, path: Path) -> str | None:
    """``distlaunch: warning: PATH: skipped N bad lines ...`` for stderr; None when ``count`` is 0."""
    if not count:
        return None
    lines = "line" if count == 1 else "lines"
    return (f"distlaunch: warning: {path}: skipped {count} bad {lines} (not UTF-8, not an event, "
            "or a field of the wrong type)")


def read_events(path: Path) -> Iterator[Event]:
    """The events of a run dir; bad lines skipped (``EventLines`` counts them)."""
    yield from EventLines(path)


def is_run_id(ref: str) -> bool:
    """A RUN given as an id (looked up in the state root only), not as a path."""
    return "/" not in ref and ref not in (".", "..")


def find_run(ref: str | None) -> Path:
    """A run dir from a run id (under the user's own state root only, never the current
    directory), a path (used only if it is the user's and no one else can write it), or (None)
    the most recent run."""
    root = runs_root()
    if ref is None:
        latest = root / LATEST_LINK
        if latest.exists():
            return trusted_run_dir(latest)
        candidates = [p for p in root.glob("*") if (p / STATE_FILE).exists()] if root.is_dir() else []
        if not candidates:
            raise UserError(f"no runs yet under {root}; start one with `distlaunch up PROFILE`")
        return trusted_run_dir(max(candidates, key=lambda p: p.stat().st_mtime))
    if is_run_id(ref):
        if (root / ref / STATE_FILE).exists():
            return trusted_run_dir(root / ref)
        here = f"; ./{ref} here is a run directory: give it as a path (./{ref}) to use it" \
            if (Path(ref) / STATE_FILE).exists() else ""
        raise UserError(f"no run {ref!r} under {root} (give a run id from `distlaunch status` or a run "
                        f"directory){here}")
    as_path = Path(ref).expanduser()
    if not os.path.lexists(as_path / STATE_FILE):
        raise UserError(f"no run at {ref} (no {STATE_FILE}; give a run id from `distlaunch status` or a run "
                        "directory)")
    return trusted_run_dir(as_path)


def trusted_run_dir(path: Path) -> Path:
    """``path`` resolved, if it and its state.json are the user's and no one else can write them
    (and that state is readable: ``read_state``)."""
    real = trusted_dir(path, "run directory")
    check_ancestry(real, "run dir")
    read_state(real)
    return real
