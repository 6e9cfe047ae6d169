"""ReplaySource reads a run's events.jsonl back, paced like the recording."""

from __future__ import annotations

import threading
import time
from pathlib import Path

from launcher import events as ev
from tests.tui.tui_support import RUN, T0, load, recorded_job
from tui.app import DashboardApp
from tui.replay import MAX_GAP_S, ReplaySource


def write_run(path: Path, events: list[ev.Event], garbage: bool = False) -> Path:
    lines = [e.to_json() for e in events]
    if garbage:
        lines.insert(1, '{"v": 1, "kind": "nonsense"}')
        lines.append('{"v": 1, "ts": 1, "run": "r", "ta')  # cut off mid-write
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path


def test_speed_zero_yields_every_event_in_order_and_skips_bad_lines(tmp_path: Path) -> None:
    recorded = recorded_job(steps=3)
    source = ReplaySource(write_run(tmp_path / "events.jsonl", recorded, garbage=True), speed=0)
    started = time.monotonic()
    replayed = list(source.events())
    assert time.monotonic() - started < 1.0
    assert replayed == recorded
    assert source.skipped_lines == 2


def test_gaps_are_scaled_and_capped(tmp_path: Path) -> None:
    events = [ev.log_event(RUN, "chief:0", "stdout", "a", ts=T0),
              ev.log_event(RUN, "chief:0", "stdout", "b", ts=T0 + 0.4),
              ev.log_event(RUN, "chief:0", "stdout", "c", ts=T0 + 3600)]  # an hour: capped
    source = ReplaySource(write_run(tmp_path / "events.jsonl", events), speed=2.0)
    stamps = []
    for _ in source.events():
        stamps.append(time.monotonic())
    assert 0.15 <= stamps[1] - stamps[0] < 0.5  # 0.4 s at double speed
    assert MAX_GAP_S * 0.9 <= stamps[2] - stamps[1] < MAX_GAP_S + 0.5


def test_close_ends_a_pause_promptly(tmp_path: Path) -> None:
    events = [ev.log_event(RUN, "chief:0", "stdout", "a", ts=T0),
              ev.log_event(RUN, "chief:0", "stdout", "b", ts=T0 + 100)]
    source = ReplaySource(write_run(tmp_path / "events.jsonl", events), speed=0.001)
    got: list[ev.Event] = []
    reader = threading.Thread(target=lambda: got.extend(source.events()))
    reader.start()
    deadline = time.monotonic() + 5
    while not got and time.monotonic() < deadline:
        time.sleep(0.01)
    source.close()
    reader.join(timeout=2)
    assert not reader.is_alive() and len(got) == 1


async def test_dashboard_replays_a_file(tmp_path: Path) -> None:
    recorded = [*recorded_job(steps=4), ev.job_event(RUN, ev.JOB_FAILED, reason="worker:1 failed", ts=T0 + 9)]
    source = ReplaySource(write_run(tmp_path / "events.jsonl", recorded), speed=0)
    app = DashboardApp(source, None, title="mnist-ps", strategy="parameter_server", hosts_total=2, live=False)
    async with app.run_test(size=(100, 30)) as pilot:
        await load(pilot, app, len(recorded))
        assert app.table.get_cell("chief:0", "step").plain == "40"
        assert "Failed" in str(app.header.render())
