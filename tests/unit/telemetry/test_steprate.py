"""Steps/s over a window that ends now, on an injected clock."""

from __future__ import annotations

import pytest

from launcher.telemetry.steprate import POINT_SPACING_S, RATE_WINDOW_S, StepRate


def steady(rate: StepRate, steps_per_s: float, start: float, end: float, every: float = 1.0) -> None:
    t = start
    while t <= end + 1e-9:
        rate.add(t, round(steps_per_s * (t - start)))
        t += every


def test_a_steady_pace_reads_the_same_between_reports() -> None:
    rate = StepRate()
    steady(rate, 2.0, 0.0, 30.0)
    for now in (30.0, 30.5, 30.99):  # within one reporting gap of the last report: no drop yet
        assert rate.rate(now) == pytest.approx(2.0)


def test_no_step_in_the_window_is_zero_and_the_pace_falls_on_the_way() -> None:
    rate = StepRate()
    steady(rate, 2.0, 0.0, 30.0)  # then the step stops moving: no report comes any more
    falling = [rate.rate(30.0 + s) for s in (2.0, 5.0, 8.0)]
    assert all(r is not None for r in falling)
    assert 2.0 > falling[0] > falling[1] > falling[2] > 0
    assert rate.rate(30.0 + RATE_WINDOW_S) == 0.0
    assert rate.rate(30.0 + 50) == 0.0  # 50 s after: 0, not the 2.0/s it had


def test_the_same_step_reported_again_is_no_progress() -> None:
    rate = StepRate()
    steady(rate, 2.0, 0.0, 30.0)
    for t in range(31, 45):
        rate.add(float(t), 60)  # a reader thread reporting the same step every second
    assert rate.rate(44.0) == 0.0


def test_fewer_than_two_reports_is_unknown_and_an_older_step_starts_over() -> None:
    rate = StepRate()
    assert rate.rate(0.0) is None
    rate.add(0.0, 100)
    assert rate.rate(5.0) is None
    rate.add(2.0, 120)
    assert rate.rate(2.0) == pytest.approx(10.0)
    rate.add(4.0, 50)  # back from an older checkpoint
    assert rate.rate(4.0) is None
    rate.add(6.0, 60)
    assert rate.rate(6.0) == pytest.approx(5.0)


def test_memory_is_bounded_by_the_window_and_the_point_spacing() -> None:
    rate = StepRate()
    for i in range(100_000):  # 1000 reports a second for 100 s
        rate.add(i / 1000, i)
    assert len(rate.points) <= RATE_WINDOW_S / POINT_SPACING_S + 3
    assert rate.rate(100.0) == pytest.approx(1000.0, rel=0.01)
