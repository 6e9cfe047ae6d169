"""After a task exits, the agent reads its output to the end: while lines still come (a loaded host
working through a backlog) past the first few seconds, bounded; a silent pipe held open by a
child that outlived the task ends the wait."""

from __future__ import annotations

import threading
import time
from types import SimpleNamespace

import pytest

from launcher.agent import runner


def _reader(owner: SimpleNamespace, lines: int, every: float, stop: threading.Event) -> threading.Thread:
    def read() -> None:
        for _ in range(lines):
            time.sleep(every)
            owner._lines_read += 1
        stop.wait(30)  # then the pipe stays open and silent (a grandchild holds it)
    thread = threading.Thread(target=read, daemon=True)
    thread.start()
    return thread


def test_the_drain_waits_while_lines_come_and_ends_once_they_stop(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(runner, "READER_DRAIN_SECONDS", 0.3)
    stop = threading.Event()
    owner = SimpleNamespace(_lines_read=0, _readers=[])
    owner._readers = [_reader(owner, 60, 0.02, stop)]  # 1.2 s of backlog, four times the first wait
    began = time.monotonic()
    runner.TaskRunner._drain_readers(owner)  # type: ignore[arg-type]
    took = time.monotonic() - began
    stop.set()
    assert owner._lines_read == 60, "the drain gave up while lines still came"
    assert took < 1.2 + 1.0 + 0.5, took  # one quiet second after the last line, not the 30 s bound


def test_a_silent_held_pipe_ends_the_drain_after_the_first_wait(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(runner, "READER_DRAIN_SECONDS", 0.3)
    stop = threading.Event()
    owner = SimpleNamespace(_lines_read=0, _readers=[])
    owner._readers = [_reader(owner, 0, 0.0, stop)]
    began = time.monotonic()
    runner.TaskRunner._drain_readers(owner)  # type: ignore[arg-type]
    stop.set()
    assert time.monotonic() - began < 1.0
