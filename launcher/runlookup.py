"""Finding a run and reading its events back: a RUN argument (a run id, a run directory, or none
for the latest) to a run dir that is the user's and no one else can write (``find_run``), and the
run's events.jsonl read defensively (``EventLines``: bad lines skipped and counted). The run dir
itself, its file names and its writers are ``launcher/rundir.py``; its state.json as a typed record
is ``launcher/runstate.py``. The runs under the state root, one summary each (``list_runs``,
``RunSummary``): what ``distlaunch runs`` lists and the runs screen (``tui/runs_view.py``) shows,
each read from its ``state.json`` and the first line and the tail of its ``events.jsonl``.
"""

from __future__ import annotations

import contextlib
import os
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from launcher import events as ev
from launcher.errors import UserError
from launcher.events import Event, EventDecodeError
from launcher.paths import LATEST_LINK, runs_root
from launcher.privatedir import (
    DamagedFile,
    UnsafePath,
    check_ancestry,
    open_trusted,
    read_trusted_json,
    trusted_dir,
)
from launcher.rundir import EVENTS_FILE, STATE_FILE, read_state
from launcher.runstate import RunState, StateFieldError
from launcher.telemetry import eventcheck
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


#: how far from the end of events.jsonl the last complete line is looked for
_TAIL_BYTES = 64 * 1024


@dataclass(frozen=True)
class RunSummary:
    run: str
    dir: str
    profile: str  # the profile's name
    job_state: str
    job_reason: str
    started: float | None  # unix time of the run's first event
    duration_s: float | None  # to its last event once ended, else until now
    hosts: list[str]
    tasks: int
    restarts: int
    #: "live": its supervisor runs and a client follows it; "supervised": its supervisor runs, no
    #: client; "lost": not ended, yet no supervisor (killed: its tasks stop after the orphan grace;
    #: `attach` within it takes the job over, `down` cleans up); None: ended
    live: str | None
    #: lines of events.jsonl read for this line (its first and last) that were no events
    skipped_lines: int = 0
    #: the newest global step in the tail of its events (None: none there)
    step: int | None = None


def list_runs(root: Path | None = None, now: float | None = None,
              refused: list[str] | None = None) -> list[RunSummary]:
    """Every run dir under ``root`` (default: the state root), newest first. A run dir, state.json
    or events.jsonl that is not the user's alone, or not a regular file (a FIFO would block the
    read: one run dir must never hang the list), is left out, with why added to ``refused``."""
    root = runs_root() if root is None else root
    if not root.is_dir():
        return []
    now = time.time() if now is None else now
    found: list[RunSummary] = []
    seen: set[Path] = set()
    for entry in root.iterdir():
        if entry.name == LATEST_LINK or not os.path.lexists(entry / STATE_FILE):
            continue
        path = entry.resolve()  # runs kept elsewhere (--run-dir) are linked into the root by id
        if path in seen:
            continue
        seen.add(path)
        try:
            found.append(summarize_run(path, now))
        except UnsafePath as exc:
            if refused is not None:
                refused.append(str(exc))
    found.sort(key=lambda r: r.started or 0.0, reverse=True)
    return found


def summarize_run(path: Path, now: float) -> RunSummary:
    """One run's line; a run dir whose state.json cannot be read (damaged, half-written, foreign)
    is listed as ``unreadable``, with why in its reason. UnsafePath: the run dir, its state.json or
    events.jsonl is not the user's alone, or not a regular file (never opened so as to block)."""
    trusted_dir(path, "run directory")
    state: RunState | None = None
    try:
        data = read_trusted_json(path / STATE_FILE, "the run state")
        if isinstance(data, dict) and isinstance(data.get("run_id"), str):
            state, problem = RunState.from_json(data), None
        else:
            problem = "no run_id"
    except DamagedFile as exc:  # not UTF-8, not JSON
        problem = exc.reason
    except StateFieldError as exc:
        problem = str(exc)
    except OSError as exc:
        problem = exc.strerror or str(exc)
    ends = _EventEnds(path / EVENTS_FILE)
    if state is None:
        mtime: float | None = None
        with contextlib.suppress(OSError):
            mtime = (path / STATE_FILE).stat().st_mtime
        return RunSummary(run=path.name, dir=str(path), profile="", job_state="unreadable",
                          job_reason=f"{STATE_FILE}: {problem}", started=ends.first.ts if ends.first else mtime,
                          duration_s=None, hosts=[], tasks=0, restarts=0, live=None, skipped_lines=ends.skipped)
    started = ends.first.ts if ends.first else None
    if started is None:
        with contextlib.suppress(OSError):
            started = (path / STATE_FILE).stat().st_mtime
    job_state = state.job_state or ""
    job_reason = state.job_reason
    if ends.last_job is not None:  # newer than state.json, which is written less often than events
        job_state = ends.last_job.state or job_state
        job_reason = ends.last_job.reason or job_reason
    ended = job_state in ev.JOB_ENDS
    end = ends.last.ts if (ends.last and ended) else now
    live = None if ended else (state.supervision() or "lost")
    return RunSummary(
        run=state.run_id,
        dir=str(path),
        profile=state.name or "",
        job_state=job_state or "unknown",
        job_reason=job_reason,
        started=started,
        duration_s=max(0.0, end - started) if (started is not None and end is not None) else None,
        hosts=sorted(state.hosts),
        tasks=len(state.tasks),
        restarts=sum(t.restarts for t in state.tasks.values()),
        live=live,
        skipped_lines=ends.skipped,
        step=ends.last_step,
    )


class _EventEnds:
    """The first event of an events.jsonl, its last complete one, and the last job event within the
    file's tail; lines read on the way that are no events are counted in ``skipped``."""

    def __init__(self, path: Path) -> None:
        self.first: ev.Event | None = None
        self.last: ev.Event | None = None
        self.last_job: ev.JobEvent | None = None
        self.last_step: int | None = None
        self.skipped = 0
        try:  # UnsafePath (a FIFO, a link, another's file) goes to the caller
            with open_trusted(path, "the run's events") as fh:
                head = fh.readline()
                fh.seek(0, 2)
                size = fh.tell()
                fh.seek(max(0, size - _TAIL_BYTES))
                tail = fh.read().split(b"\n")
        except OSError:
            return
        self.first = self._decode(head) if head.strip() else None
        # the tail's first piece is the first line (judged above) or a line the seek cut; the piece
        # after the last newline is empty, or a torn line (judged: a bad line)
        for raw in reversed(tail[1:]):
            wanted = (self.last is None or (self.last_job is None and b'"job"' in raw)
                      or (self.last_step is None and b'"metric"' in raw and b'"step":' in raw))
            if not raw.strip() or not wanted:
                continue
            event = self._decode(raw)
            if event is None:
                continue
            self.last = self.last or event
            if isinstance(event, ev.JobEvent) and self.last_job is None:
                self.last_job = event
            elif isinstance(event, ev.MetricEvent) and event.step is not None and self.last_step is None:
                self.last_step = max(event.step, 0)
            if self.last_job is not None and self.last_step is not None:
                break

    def _decode(self, raw: bytes) -> ev.Event | None:
        try:
            return eventcheck.decode_checked(raw.decode("utf-8"))
        except (UnicodeDecodeError, ev.EventDecodeError):
            self.skipped += 1
            return None


def human_duration(seconds: float | None) -> str:
    if seconds is None:
        return "-"
    seconds = int(seconds)
    if seconds < 60:
        return f"{seconds}s"
    if seconds < 3600:
        return f"{seconds // 60}m{seconds % 60:02d}s"
    return f"{seconds // 3600}h{seconds % 3600 // 60:02d}m"
