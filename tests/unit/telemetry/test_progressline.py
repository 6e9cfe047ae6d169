"""The progress line: redrawn on a terminal (a real pty), cleared at the end, absent elsewhere."""

from __future__ import annotations

import io
import os
import pty
import select
import time
from collections.abc import Iterator

import pytest

from launcher.telemetry import progressline
from launcher.telemetry.progressline import Progress


@pytest.fixture
def terminal() -> Iterator[tuple[io.TextIOWrapper, int]]:
    """A pty: (the slave end as a text stream Progress writes to, the master fd to read what it drew)."""
    master, slave = pty.openpty()
    stream = io.TextIOWrapper(os.fdopen(slave, "wb", buffering=0), encoding="utf-8", write_through=True)
    try:
        yield stream, master
    finally:
        stream.close()
        os.close(master)


def read_until(fd: int, needle: str, timeout: float = 10.0) -> str:
    seen = ""
    deadline = time.monotonic() + timeout
    while needle not in seen:
        left = deadline - time.monotonic()
        assert left > 0, f"{needle!r} never drawn; got {seen!r}"
        if select.select([fd], [], [], left)[0]:
            seen += os.read(fd, 4096).decode()
    return seen


def test_a_long_step_draws_counts_bytes_and_a_bar_then_clears(terminal: tuple[io.TextIOWrapper, int]) -> None:
    stream, master = terminal
    line = Progress("syncing code", total=4, unit="workdirs", stream=stream, after=0.05)
    line.advance(nbytes=3 * 1024 * 1024)
    drawn = read_until(master, "1/4 workdirs")
    assert "\rsyncing code  [#####---------------]  1/4 workdirs  3.0M  " in drawn
    line.advance(count=3)
    assert "[####################]  4/4 workdirs" in read_until(master, "4/4")
    line.close()
    cleared = read_until(master, "\r" + " " * len(line.text()) + "\r")
    assert cleared.endswith("\r")


def test_a_short_step_shows_nothing(terminal: tuple[io.TextIOWrapper, int]) -> None:
    stream, master = terminal
    with Progress("pruning", total=2, unit="runs", stream=stream, after=5.0) as line:
        line.advance(2)
    stream.write("end")
    assert read_until(master, "end") == "end"


def test_echo_clears_the_line_before_printing(terminal: tuple[io.TextIOWrapper, int]) -> None:
    stream, master = terminal
    with Progress("pruning", total=2, unit="runs", stream=stream, after=0) as line:
        read_until(master, "0/2 runs")
        line.echo("removed run-1", file=stream)
        width = len("pruning  [--------------------]  0/2 runs  0s")
        assert ("\r" + " " * width + "\rremoved run-1\r\n") in read_until(master, "removed run-1\r\n")


def test_not_a_terminal_or_muted_writes_nothing(terminal: tuple[io.TextIOWrapper, int],
                                                monkeypatch: pytest.MonkeyPatch) -> None:
    pipe = io.StringIO()
    with Progress("exporting", unit="events", stream=pipe, after=0) as line:
        line.advance(5)
    assert pipe.getvalue() == ""
    stream, master = terminal
    monkeypatch.setattr(progressline, "_muted", False)
    progressline.mute()
    with Progress("exporting", unit="events", stream=stream, after=0):
        pass
    stream.write("end")
    assert read_until(master, "end") == "end"


def test_a_count_without_total_has_no_bar() -> None:
    line = Progress("exporting", unit="events", enabled=False)
    line.advance(12345)
    assert line.text() == "exporting  12,345 events  0s"


def test_a_notice_from_another_thread_does_not_land_in_the_line(terminal: tuple[io.TextIOWrapper, int]) -> None:
    stream, master = terminal
    with Progress("connecting", total=3, unit="hosts", stream=stream, after=0):
        read_until(master, "0/3 hosts")
        with progressline.paused():
            stream.write("distlaunch: a notice\n")
        seen = read_until(master, "a notice\r\n")
    width = len("connecting  [--------------------]  0/3 hosts  0s")
    assert seen.endswith("\r" + " " * width + "\rdistlaunch: a notice\r\n")
