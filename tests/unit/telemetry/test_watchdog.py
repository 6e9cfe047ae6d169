"""Stall and straggler judgement on the supervisor's clock."""

from __future__ import annotations

from launcher import events as ev
from launcher.telemetry.watchdog import STRAGGLER_WINDOW_S, Watchdog


def test_stall_is_raised_after_stall_seconds_without_progress_and_cleared_when_the_step_moves() -> None:
    dog = Watchdog({"worker:0": 20.0}, ["worker:0"], 0.7)
    assert dog.check(100.0) == []  # no step yet: nothing to judge
    dog.on_step("worker:0", 5, 100.0)
    dog.on_step("worker:0", 5, 110.0)  # the same step again is no progress
    assert dog.check(119.0) == []
    [change] = dog.check(120.5)
    assert (change.task, change.condition, change.active) == ("worker:0", ev.STALLED, True)
    assert "step 5" in change.reason and "stall_seconds = 20" in change.reason
    assert dog.check(125.0) == []  # raised once
    dog.on_step("worker:0", 6, 126.0)
    [cleared] = dog.check(126.5)
    assert (cleared.condition, cleared.active) == (ev.STALLED, False)


def test_zero_stall_seconds_is_off_and_forget_drops_an_ended_incarnation() -> None:
    dog = Watchdog({"ps:0": 0.0, "worker:0": 10.0}, ["worker:0"], 0.7)
    dog.on_step("ps:0", 1, 0.0)
    dog.on_step("worker:0", 1, 0.0)
    dog.forget("worker:0")
    assert dog.check(1000.0) == []


def _run(dog: Watchdog, rates: dict[str, float], start: float, end: float) -> list:
    changes = []
    t = start
    while t <= end:
        for task, rate in rates.items():
            dog.on_step(task, int(rate * t), t)
        changes += dog.check(t)
        t += 1.0
    return changes


def test_straggler_flagged_after_the_window_below_the_ratio_and_unflagged_when_it_catches_up() -> None:
    workers = ["worker:0", "worker:1", "worker:2"]
    dog = Watchdog({}, workers, 0.7)
    changes = _run(dog, {"worker:0": 10.0, "worker:1": 10.0, "worker:2": 4.0}, 0.0, 12.0 + STRAGGLER_WINDOW_S)
    flagged = [c for c in changes if c.active]
    assert [(c.task, c.condition) for c in flagged] == [("worker:2", ev.STRAGGLER)]
    assert "median" in flagged[0].reason
    # it must have stayed slow for the whole window before being flagged
    early = Watchdog({}, workers, 0.7)
    assert not [c for c in _run(early, {"worker:0": 10.0, "worker:1": 10.0, "worker:2": 4.0}, 0.0, 25.0) if c.active]
    # catching up: worker:2 now runs at the others' pace (a fresh rate window)
    t0 = 12.0 + STRAGGLER_WINDOW_S + 1
    base = {"worker:0": 10.0 * t0, "worker:1": 10.0 * t0, "worker:2": 4.0 * t0}
    later = []
    for k in range(15):
        t = t0 + k
        for task in workers:
            dog.on_step(task, int(base[task] + 10.0 * k), t)
        later += dog.check(t)
    assert [(c.task, c.active) for c in later if c.condition == ev.STRAGGLER] == [("worker:2", False)]


def test_straggler_needs_two_workers_with_steps_and_ratio_zero_turns_it_off() -> None:
    alone = Watchdog({}, ["worker:0", "worker:1"], 0.7)
    assert _run(alone, {"worker:0": 1.0}, 0.0, 60.0) == []
    off = Watchdog({}, ["worker:0", "worker:1"], 0.0)
    assert _run(off, {"worker:0": 10.0, "worker:1": 1.0}, 0.0, 60.0) == []


def test_a_hung_worker_has_no_pace_after_the_window_and_becomes_a_straggler() -> None:
    """The straggler check reads the same window-ending-now rate as the dashboard: 0 once hung."""
    from launcher.telemetry.steprate import RATE_WINDOW_S

    workers = ["worker:0", "worker:1", "worker:2"]
    dog = Watchdog({}, workers, 0.7)
    _run(dog, {"worker:0": 2.0, "worker:1": 2.0, "worker:2": 2.0}, 0.0, 20.0)
    hung_at = 20.0
    changes = []
    t = hung_at + 1
    while t <= hung_at + RATE_WINDOW_S + STRAGGLER_WINDOW_S + 1:
        for task in ("worker:0", "worker:1"):  # worker:2 reports nothing any more
            dog.on_step(task, int(2.0 * t), t)
        changes += dog.check(t)
        t += 1.0
    assert dog.rate("worker:2", hung_at + RATE_WINDOW_S) == 0.0
    assert dog.rate("worker:0", t - 1) == 2.0
    assert [(c.task, c.condition, c.active) for c in changes] == [("worker:2", ev.STRAGGLER, True)]
    assert "0.00 steps/s" in changes[0].reason


def test_straggler_seconds_from_the_profile_sets_how_long_a_worker_may_lag() -> None:
    workers = ["worker:0", "worker:1", "worker:2"]
    rates = {"worker:0": 10.0, "worker:1": 10.0, "worker:2": 4.0}
    quick = Watchdog({}, workers, 0.7, straggler_seconds=5.0)
    flagged = [c for c in _run(quick, rates, 0.0, 12.0) if c.active]
    assert [(c.task, c.condition) for c in flagged] == [("worker:2", ev.STRAGGLER)]
    assert "for 5s" in flagged[0].reason or "for 6s" in flagged[0].reason, flagged[0].reason
    patient = Watchdog({}, workers, 0.7)  # the default window: still below it at 12 s
    assert not [c for c in _run(patient, rates, 0.0, 12.0) if c.active]
