from __future__ import annotations

from launcher.remote.hostclock import TOLERANCE_S, HostClock

NOW = 1_800_000_000.0


def test_a_synced_host_is_left_alone_despite_link_delay() -> None:
    clock = HostClock()
    for i in range(5):
        clock.observe(NOW + i - 0.3, received=NOW + i)  # 300 ms on the wire
    assert clock.offset == 0.0
    assert clock.correct(NOW + 4.5, received=NOW + 5) == NOW + 4.5


def test_a_host_minutes_ahead_or_behind_is_moved_onto_the_launchers_clock() -> None:
    ahead = HostClock()
    for delay in (0.4, 0.1, 0.9):  # the smallest delay gives the best estimate
        ahead.observe(NOW + 300 - delay, received=NOW)
    assert abs(ahead.offset - 299.9) < 1e-6
    assert abs(ahead.correct(NOW + 310, received=NOW + 11) - (NOW + 10.1)) < 1e-6
    assert "300 s ahead" in ahead.describe()

    behind = HostClock()
    behind.observe(NOW - 600.2, received=NOW)
    assert abs(behind.correct(NOW - 590.2, received=NOW + 10.5) - (NOW + 10)) < 1e-6
    assert "600 s behind" in behind.describe()


def test_an_event_from_the_future_before_any_estimate_gets_its_receive_time() -> None:
    clock = HostClock()
    assert clock.correct(NOW + 3600, received=NOW) == NOW
    assert clock.correct(NOW + TOLERANCE_S / 2, received=NOW) == NOW + TOLERANCE_S / 2
    assert clock.correct(NOW - 120, received=NOW) == NOW - 120  # old events (a backlog) keep their time
