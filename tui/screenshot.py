"""Redraw the README's picture of the dashboard: `make screenshot` (python -m tui.screenshot).

The real dashboard is driven through Textual's `run_test` by a recorded run of `make demo`
(docs/demo-run.events.jsonl, the events.jsonl of a real `distlaunch up cluster_profiles/local.toml`
on this repository's development machine) up to a moment of its training, as if it were live at that
moment, and saved as SVG with Textual's own export. Run it again after a change to the UI; give
`--events` to picture another run (any events.jsonl) instead.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

from launcher.events import Event, EventDecodeError
from tui.app import DashboardApp

REPO = Path(__file__).resolve().parent.parent
RECORDING = REPO / "docs" / "demo-run.events.jsonl"
PICTURE = REPO / "docs" / "dashboard.svg"
SIZE = (160, 46)
AT_SECONDS = 35.0
"""The moment pictured, in seconds after the run's first event: well into the demo's 45 s of training."""


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


async def take(events: list[Event], out: Path, size: tuple[int, int] = SIZE) -> Path:
    """Show `events` in the real dashboard (the clock stopped at the last one) and save it as SVG."""
    title = events[0].run.rsplit("-", 3)[0] if events[0].run.count("-") >= 3 else events[0].run
    hosts = {str(e.get("host")) for e in events if e.kind == "state" and e.get("host")}
    now = events[-1].ts
    app = DashboardApp(RecordedUntil(events), None, title=title, strategy="parameter_server",
                       hosts_total=max(1, len(hosts)), clock=lambda: now)
    async with app.run_test(size=size) as pilot:
        deadline = time.monotonic() + 60
        while app.view.events_applied < len(events):
            if time.monotonic() > deadline:
                raise TimeoutError("the dashboard did not take the recording in within 60 s")
            await pilot.pause(0.02)
        app.flush(force_chart=True)
        await pilot.pause()
        while not (app.loss_chart.up_to_date and app.rate_chart.up_to_date):  # drawn in thread workers
            if time.monotonic() > deadline:
                raise TimeoutError("the charts were not drawn within 60 s")
            await pilot.pause(0.02)
        app.flush(force_chart=True)
        app.clear_notifications()
        await pilot.pause()
        saved = app.save_screenshot(out.name, str(out.parent))
    return Path(saved)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tui.screenshot", description=__doc__.splitlines()[0])
    parser.add_argument("--events", type=Path, default=RECORDING, help=f"a run's events.jsonl (default {RECORDING})")
    parser.add_argument("--at", type=float, default=AT_SECONDS, help="seconds into the run (default %(default)s)")
    parser.add_argument("-o", "--output", type=Path, default=PICTURE, help=f"the SVG to write (default {PICTURE})")
    parser.add_argument("--size", default=f"{SIZE[0]}x{SIZE[1]}", help="columns x lines (default %(default)s)")
    args = parser.parse_args(argv)
    try:
        columns, lines = (int(part) for part in args.size.lower().split("x"))
        events = read_recording(args.events, args.at)
    except (OSError, ValueError) as exc:
        print(f"screenshot: {exc}", file=sys.stderr)
        return 2
    os.environ["TZ"] = "UTC"  # the timeline's times of day: the same picture wherever it is made
    time.tzset()
    saved = asyncio.run(take(events, args.output, (columns, lines)))
    print(f"wrote {saved}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
