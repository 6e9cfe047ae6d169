"""Autolog's step clock: shares from the counters the training thread bumps (launcher/autolog/steptime.py)."""

from __future__ import annotations

import pytest

from launcher.autolog import steptime
from launcher.autolog.steptime import TIMED_FIRST, Snapshot, StepClock, inside_ratios, shares
from launcher.protocol.metricnames import SECONDS_PER_STEP, STEP_TIME, UNTIMED_CALLS


def snap(at: float, last_end: float, calls: int, call_s: float, *, sampled: int | None = None, eager_input: float = 0.0,
         wait: float = 0.0, between: float = 0.0, graph_input: float = 0.0, graph_peers: float = 0.0,
         step: int | None = None, timed: float = 0.0) -> Snapshot:
    return Snapshot(at, last_end, calls, calls if sampled is None else sampled, call_s, eager_input, wait, between,
                    graph_input, graph_peers, timed, step)


def test_in_graph_input_is_taken_out_of_the_calls() -> None:
    # 10 steps of 31 ms in 0.31 s: 30 ms of each waiting in the graph's IteratorGetNext; the timed
    # twin ran 2 of the 5 timed calls: its share of its calls stands for all ten
    old = snap(0.0, 0.0, 5, 0.0)
    new = snap(0.31, 0.31, 15, 5 * 0.0305, sampled=10, graph_input=2 * 0.030, timed=2 * 0.0305)
    ratios = inside_ratios(old, new)
    assert ratios is not None
    got = shares(old, new, ratios)
    assert got is not None
    assert abs(got["input"] - 0.300 / 0.31) < 1e-6
    assert abs(got["compute"] - 0.005 / 0.31) < 1e-6
    assert abs(got["other"] - 0.005 / 0.31) < 1e-6
    assert abs(sum(got[p] for p in ("input", "compute", "peers", "other")) - 1.0) < 1e-9
    assert abs(got["seconds_per_step"] - 0.031) < 1e-9


def test_eager_input_outside_calls_and_global_step_rate() -> None:
    old = snap(0.0, 0.0, 0, 0.0, step=100)
    new = snap(1.0, 1.0, 10, 0.2, eager_input=0.7, step=120)  # for x in dataset: step(x)
    got = shares(old, new)
    assert got is not None
    assert round(got["input"], 6) == 0.7 and round(got["compute"], 6) == 0.2 and round(got["other"], 6) == 0.1
    assert got["seconds_per_step"] == 1.0 / 20  # the global step moved 20 (two replicas' worth)


def test_coordinator_blocked_schedule_and_join_are_peers() -> None:
    old = snap(0.0, 0.0, 0, 0.0)
    new = snap(1.0, 1.0, 100, 0.8, wait=0.8, between=0.1)
    got = shares(old, new)
    assert got is not None
    assert round(got["peers"], 6) == 0.9 and round(got["other"], 6) == 0.1 and got["compute"] == 0.0


def test_overlapping_collectives_never_exceed_the_calls() -> None:
    new = snap(1.0, 1.0, 10, 0.5, graph_peers=0.9, graph_input=0.1, timed=0.5)
    ratios = inside_ratios(snap(0.0, 0.0, 0, 0.0), new)
    assert ratios is not None and abs(sum(ratios) - 1.0) < 1e-9
    got = shares(snap(0.0, 0.0, 0, 0.0), new, ratios)
    assert got is not None and got["compute"] == 0.0
    assert abs(got["peers"] + got["input"] - 0.5) < 1e-9


def test_no_timed_call_no_ratios_and_short_steps_are_sampled() -> None:
    assert inside_ratios(snap(0.0, 0.0, 0, 0.0), snap(1.0, 1.0, 10, 0.5, graph_input=0.2)) is None
    clock = StepClock()
    timed = 0
    for n in range(1000):
        if not clock.skip():
            clock.call_done(n * 0.001, n * 0.001 + 0.0004, counted=True)  # 0.4 ms steps
            timed += 1
    # the first TIMED_FIRST, then one in ~200
    assert clock.calls == 1000 and 190 <= clock.every <= 210 and TIMED_FIRST + 4 <= timed <= TIMED_FIRST + 6
    slow = StepClock()
    for n in range(5):
        assert not slow.skip()  # 100 ms steps: every one timed
        slow.call_done(n * 0.1, n * 0.1 + 0.1, counted=True)


def test_no_step_no_split_and_closures_per_worker() -> None:
    clock = StepClock()
    assert clock.tick(None) == {}
    clock.closure_done(1, 0.01)
    clock.first_call(0.0)  # the call that traced: the next step starts at its end
    clock.tick(None)  # the window's start
    clock.call_done(0.0, 0.01)
    clock.call_done(0.01, 0.02)
    clock.closure_done(1, 0.05)
    clock.closure_done(1, 0.07)
    clock.closure_done(0, 0.02)
    values = clock.tick(2)
    assert values["closures_per_s/worker:1"] > 0 and values["closures_per_s/worker:0"] > 0
    assert values["closure_latency_s/worker:1"] == 0.06
    assert "step_time/input" in values


def test_a_job_shorter_than_the_window_is_split_from_what_was_seen(monkeypatch: pytest.MonkeyPatch) -> None:
    """Issue 46 §4: one tick, at the end (a job shorter than a read interval): the split is over
    the steps since the calls stopped tracing, not none; the tracing itself is no part of it."""
    now = [100.0]
    monkeypatch.setattr(steptime, "_now", lambda: now[0])
    clock = StepClock()
    clock.first_call(100.0, new=True)  # the call that traced the train function: a step, no step's time
    assert not clock.skip()
    clock.first_call(101.5)  # the next call traced its timed twin: 1.5 s
    t = 101.5
    for _ in range(10):  # 10 steps of 30 ms: 10 ms of Python between calls, 20 ms in each call
        assert not clock.skip()  # the first calls are all timed: one call stands for no job
        clock.call_done(t + 0.01, t + 0.03, counted=True)
        t += 0.03
    now[0] = t
    values = clock.tick(None)
    assert clock.calls == 12 and values[SECONDS_PER_STEP] == pytest.approx(0.03)
    assert values[STEP_TIME + "compute"] == pytest.approx(2 / 3, abs=1e-3)
    assert values[STEP_TIME + "other"] == pytest.approx(1 / 3, abs=1e-3)
    assert UNTIMED_CALLS not in values


def test_train_calls_none_timed_are_said_until_a_split_is(monkeypatch: pytest.MonkeyPatch) -> None:
    now = [100.0]
    monkeypatch.setattr(steptime, "_now", lambda: now[0])
    clock = StepClock()
    assert clock.tick(None) == {}  # nothing trained: nothing to say
    clock.first_call(100.0, new=True)
    clock.skip()
    clock.first_call(101.0)  # two calls, both tracing: a job that ends here has no split
    now[0] = 101.0
    assert clock.tick(2) == {UNTIMED_CALLS: 2.0}
    clock.skip()
    clock.call_done(101.0, 101.02, counted=True)
    now[0] = 101.05
    assert UNTIMED_CALLS not in clock.tick(3) and clock.splits == 1
    now[0] = 112.0  # no call for over a window: no split now, and no "untimed" (a split was given)
    assert clock.tick(3) == {}
