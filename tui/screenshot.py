"""The documentation's pictures of the dashboard: `make screenshot` (the README's) and `make screenshots`
(every view the docs show), i.e. `python -m tui.screenshot [--all]`.

The real dashboard is driven through Textual's `run_test` by a recorded run up to a moment of it, as
if it were live at that moment, a view is opened with its key, and the screen is saved as SVG with
Textual's own export. Two recordings, both the files of real runs on this repository's development
machine (docs/recordings/README.md says how each was made):

- docs/demo-run.events.jsonl: `make demo` (`distlaunch up cluster_profiles/local.toml`), for the
  README's picture (docs/dashboard.svg), the hosts and the placement views;
- docs/recordings/slow-peer/: two MultiWorkerMirrored workers, one with a slow input pipeline and
  then frozen with SIGSTOP, for the step-time panel, the stacks view (the capture the run kept at the
  stall) and the timeline.

Run it again after a change to the UI; give `--events` to picture another run (any events.jsonl)
instead of the README's picture.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import sys
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from launcher.events import Event, EventDecodeError, StateEvent
from tui.app import DashboardApp
from tui.stacks_view import StacksScreen

REPO = Path(__file__).resolve().parent.parent
DOCS = REPO / "docs"
RECORDING = DOCS / "demo-run.events.jsonl"
SLOW_PEER = DOCS / "recordings" / "slow-peer"
PICTURE = DOCS / "dashboard.svg"
PICTURES = DOCS / "img"
SIZE = (168, 46)
AT_SECONDS = 35.0
"""The moment pictured, in seconds after the run's first event: well into the demo's 45 s of training."""
TIMEOUT = 60.0


@dataclass(frozen=True)
class Shot:
    """One picture: a recording up to a moment, a task selected, keys pressed, saved as `output`."""

    output: Path
    events: Path = RECORDING
    at: float = AT_SECONDS
    keys: tuple[str, ...] = ()
    select: str | None = None
    strategy: str = "parameter_server"
    run_dir: Path | None = None  # what the dashboard reads besides the events (a stored stacks capture)


SHOTS = {
    "dashboard": Shot(PICTURE),
    "hosts": Shot(PICTURES / "hosts.svg", keys=("h",)),
    "placement": Shot(PICTURES / "placement.svg", keys=("p",)),
    "step-time": Shot(PICTURES / "step-time.svg", SLOW_PEER / "events.jsonl", at=30.0, select="worker:0",
                      strategy="multi_worker_mirrored"),
    "stacks": Shot(PICTURES / "stacks.svg", SLOW_PEER / "events.jsonl", at=46.0, select="worker:1", keys=("K",),
                   strategy="multi_worker_mirrored", run_dir=SLOW_PEER),
    "timeline": Shot(PICTURES / "timeline.svg", SLOW_PEER / "events.jsonl", at=60.0, keys=("e",),
                     strategy="multi_worker_mirrored"),
}
"""Every picture the docs show, by name: the README's first."""


class RecordedUntil:
    """The events of a recording up to a moment, then an open stream, as a live job's would be."""

    def __init__(self, events: list[Event]) -> None:
        self._events = events
        self._closed = threading.Event()

    def events(self) -> Iterator[Event]:
        yield from self._events
        self._closed.wait()

    def close(self) -> None:
        self._closed.set()


def read_recording(path: Path, at_seconds: float) -> list[Event]:
    """The events of `path` within `at_seconds` of its first one (lines that are no event skipped)."""
    events: list[Event] = []
    for line in path.read_text(encoding="utf-8").splitlines():
        try:
            events.append(Event.from_json(line))
        except EventDecodeError:
            continue
    if not events:
        raise ValueError(f"{path}: no events in it")
    end = events[0].ts + at_seconds
    return [event for event in events if event.ts <= end]


async def _until(pilot: object, done: object, what: str, deadline: float) -> None:
    while not done():  # type: ignore[operator]
        if time.monotonic() > deadline:
            raise TimeoutError(f"{what} within {TIMEOUT:.0f} s")
        await pilot.pause(0.02)  # type: ignore[attr-defined]


async def take(events: list[Event], out: Path, size: tuple[int, int] = SIZE, shot: Shot | None = None) -> Path:
    """Show `events` in the real dashboard (the clock stopped at the last one), do what `shot` says
    (select a task, press keys), and save the screen as SVG."""
    shot = shot or Shot(out)
    title = events[0].run.rsplit("-", 3)[0] if events[0].run.count("-") >= 3 else events[0].run
    hosts = {e.host for e in events if isinstance(e, StateEvent) and e.host}
    now = events[-1].ts
    app = DashboardApp(RecordedUntil(events), None, title=title, strategy=shot.strategy,
                       hosts_total=max(1, len(hosts)), clock=lambda: now, run_dir=shot.run_dir)
    async with app.run_test(size=size) as pilot:
        deadline = time.monotonic() + TIMEOUT
        await _until(pilot, lambda: app.state.view.events_applied >= len(events), "the dashboard did not take the "
                     "recording in", deadline)
        app.dashboard.flush(force_chart=True)  # the table's rows are there before `down` moves in them
        if shot.select is not None:
            for _ in range(len(app.state.view.tasks)):
                if app.widgets.table.selected_task == shot.select:
                    break
                await pilot.press("down")
                await pilot.pause()
        app.dashboard.flush(force_chart=True)
        await pilot.pause()
        charts = (app.widgets.loss_chart, app.widgets.rate_chart)  # drawn by thread workers
        await _until(pilot, lambda: all(chart.up_to_date for chart in charts), "the charts were not drawn", deadline)
        app.dashboard.flush(force_chart=True)
        for key in shot.keys:
            await pilot.press(key)
            await pilot.pause()
        if isinstance(app.screen, StacksScreen):
            screen = app.screen
            await _until(pilot, lambda: screen.captures >= 1, "the stacks view showed no capture", deadline)
        app.dashboard.flush(force_chart=True)
        app.clear_notifications()
        await pilot.pause()
        saved = app.save_screenshot(out.name, str(out.parent))
    return Path(saved)


async def take_all(names: list[str]) -> list[Path]:
    saved = []
    for name in names:
        shot = SHOTS[name]
        shot.output.parent.mkdir(parents=True, exist_ok=True)
        saved.append(await take(read_recording(shot.events, shot.at), shot.output, SIZE, shot))
    return saved


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tui.screenshot", description=__doc__.splitlines()[0])
    parser.add_argument("--all", action="store_true",
                        help=f"every picture of the docs ({', '.join(SHOTS)}) from its recording")
    parser.add_argument("--events", type=Path, default=RECORDING, help=f"a run's events.jsonl (default {RECORDING})")
    parser.add_argument("--at", type=float, default=AT_SECONDS, help="seconds into the run (default %(default)s)")
    parser.add_argument("-o", "--output", type=Path, default=PICTURE, help=f"the SVG to write (default {PICTURE})")
    parser.add_argument("--size", default=f"{SIZE[0]}x{SIZE[1]}", help="columns x lines (default %(default)s)")
    args = parser.parse_args(argv)
    os.environ["TZ"] = "UTC"  # the timeline's times of day: the same picture wherever it is made
    time.tzset()
    if args.all:
        for saved in asyncio.run(take_all(list(SHOTS))):
            print(f"wrote {saved}")
        return 0
    try:
        columns, lines = (int(part) for part in args.size.lower().split("x"))
        events = read_recording(args.events, args.at)
    except (OSError, ValueError) as exc:
        print(f"screenshot: {exc}", file=sys.stderr)
        return 2
    saved = asyncio.run(take(events, args.output, (columns, lines)))
    print(f"wrote {saved}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
