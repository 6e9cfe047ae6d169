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
        assert app.widgets.table.get_cell("chief:0", "step").plain == "40"
        assert "Failed" in str(app.widgets.header.render())


async def test_the_header_says_a_stopped_job_is_stopped_and_an_old_down_still_reads(tmp_path: Path) -> None:
    """A job stopped on purpose is Stopped in the header, in the colour of no failure; a run
    recorded before Stopped existed (Failed: stopped by `distlaunch down`) still replays."""
    for state, reason in ((ev.JOB_STOPPED, "stopped by `distlaunch down`"),
                          (ev.JOB_FAILED, "stopped by `distlaunch down`")):
        recorded = [*recorded_job(steps=4), ev.job_event(RUN, state, reason=reason, ts=T0 + 9)]
        source = ReplaySource(write_run(tmp_path / f"{state}.jsonl", recorded), speed=0)
        app = DashboardApp(source, None, title="mnist-ps", strategy="parameter_server", hosts_total=2, live=False)
        async with app.run_test(size=(100, 30)) as pilot:
            await load(pilot, app, len(recorded))
            assert state in str(app.widgets.header.render())
            assert app.state.view.ended


def _slow_recording(tmp_path: Path, seconds: int = 40) -> Path:
    """One chief step per recorded second: at speed 1 the replay takes `seconds` seconds."""
    events = [ev.state_event(RUN, "chief:0", ev.RUNNING, host="gpu1", pid=1, ts=T0)]
    events += [ev.metric_event(RUN, "chief:0", step=s, loss=1.0 / s, ts=T0 + s) for s in range(1, seconds + 1)]
    return write_run(tmp_path / "events.jsonl", events)


def _steps(source: ReplaySource, got: list[ev.Event]) -> threading.Thread:
    reader = threading.Thread(target=lambda: got.extend(source.events()), daemon=True)
    reader.start()
    return reader


def _wait(predicate, timeout: float = 10.0) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, "not reached in time"
        time.sleep(0.01)


def test_pause_holds_the_stream_and_seek_moves_in_recorded_time(tmp_path: Path) -> None:
    source = ReplaySource(_slow_recording(tmp_path), speed=1.0)
    got: list[ev.Event] = []
    reader = _steps(source, got)
    try:
        _wait(lambda: len(got) >= 2)
        source.set_paused(True)
        held = len(got)
        time.sleep(1.5)  # longer than any paced gap: nothing may arrive while paused
        assert len(got) == held
        source.seek(20)  # forwards while paused: the skipped events come at once, then it holds again
        _wait(lambda: got[-1].ts >= T0 + 20)
        assert got[-1].ts < T0 + 22 and source.generation == 0
        source.set_paused(False)
        source.seek(-15)  # backwards: the file starts over, consumers see a new generation
        _wait(lambda: source.generation == 1)
        _wait(lambda: source.position is not None and source.position >= T0 + 5)
        assert source.position < T0 + 12
    finally:
        source.close()
        reader.join(timeout=5)
    assert not reader.is_alive()


async def test_dashboard_replay_keys_pause_seek_and_show_the_speed(tmp_path: Path) -> None:
    source = ReplaySource(_slow_recording(tmp_path), speed=1.0)
    app = DashboardApp(source, None, title="mnist-ps", strategy="parameter_server", hosts_total=1, live=False)
    async with app.run_test(size=(120, 30)) as pilot:

        async def until(predicate, timeout: float = 10.0) -> None:
            deadline = time.monotonic() + timeout
            while not predicate():
                assert time.monotonic() < deadline, "not reached in time"
                await pilot.pause(0.02)

        def step() -> int:
            text = app.widgets.table.get_cell("chief:0", "step").plain if app.widgets.table.row_count else ""
            return int(text) if text.isdigit() else 0

        await until(lambda: step() >= 1)
        assert "(replay 1x)" in str(app.widgets.header.render())
        await pilot.press("space")
        await until(lambda: "(replay 1x, paused)" in str(app.widgets.header.render()))
        await pilot.press("plus", "plus")
        await until(lambda: "(replay 4x, paused)" in str(app.widgets.header.render()))
        await pilot.press("right", "right")  # 20 s forwards, while paused: the skipped events come at once
        await until(lambda: step() >= 15)
        assert step() < 24
        await pilot.press("left")  # back 10 s: the picture is rebuilt from the start of the recording
        await until(lambda: source.generation == 1 and 0 < step() < 15)
        await pilot.press("minus")
        await until(lambda: "(replay 2x, paused)" in str(app.widgets.header.render()))
        await pilot.press("space")
        await until(lambda: "paused" not in str(app.widgets.header.render()))
