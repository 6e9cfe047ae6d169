"""each_host: the preflight's calls on every host at once, and a stop that does not wait for a hung one."""

from __future__ import annotations

import threading
import time

import pytest

from launcher.remote.hostpool import each_host


def test_results_come_in_the_hosts_order() -> None:
    def slow_first(n: int) -> int:
        time.sleep(0.2 if n == 0 else 0)
        return n * 10

    assert each_host(slow_first, range(5)) == [0, 10, 20, 30, 40]
    assert each_host(slow_first, []) == []


def test_an_error_leaves_without_waiting_for_a_host_that_hangs() -> None:
    release = threading.Event()

    def call(host: str) -> str:
        if host == "hung":
            release.wait(60)  # a python that never answers
            return host
        raise RuntimeError(f"{host} refused")

    started = time.monotonic()
    try:
        with pytest.raises(RuntimeError, match="bad refused"):
            each_host(call, ["bad", "hung"], leave_wait=0.5)
        assert time.monotonic() - started < 10  # ThreadPoolExecutor's `with` would wait the 60 s
    finally:
        release.set()


def test_calls_under_way_get_the_leave_wait_to_finish() -> None:
    finished: list[str] = []

    def call(host: str) -> str:
        if host == "bad":
            raise RuntimeError("no")
        time.sleep(0.3)  # a channel being opened: it must be recorded before the channels are closed
        finished.append(host)
        return host

    with pytest.raises(RuntimeError):
        each_host(call, ["bad", "a", "b"], leave_wait=10)
    assert sorted(finished) == ["a", "b"]
