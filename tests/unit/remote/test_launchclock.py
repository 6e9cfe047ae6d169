"""The launch clock (launcher/remote/launchclock.py): a host's phases in order, and a host that
joins after the launch (a spare taking a task hours later) is no part of the launch record."""

from __future__ import annotations

import threading

from launcher.remote.launchclock import LaunchClock


def test_phases_of_connected_hosts_are_kept_and_a_late_spare_adds_nothing() -> None:
    clock = LaunchClock.begin()
    clock.stamp("a", "connected")
    clock.stamp("a", "agent")
    clock.stamp("a", "agent")  # the first time only
    clock.stamp("spare", "start_sent")  # a move to a spare long after the launch
    record = clock.to_json()
    assert list(record["hosts"]) == ["a"] and list(record["hosts"]["a"]) == ["connected", "agent"]
    assert record["imports"] >= 0


def test_stamps_from_worker_threads_while_the_record_is_written() -> None:
    clock = LaunchClock.begin()
    names = [f"h{i}" for i in range(200)]

    def stamp_all() -> None:
        for name in names:
            clock.stamp(name, "connected")

    thread = threading.Thread(target=stamp_all)
    thread.start()
    while thread.is_alive():
        clock.to_json()  # never "dictionary changed size during iteration"
    thread.join()
    assert len(clock.to_json()["hosts"]) == 200
