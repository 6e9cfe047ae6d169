"""Autolog's step clock: shares from the counters the training thread bumps (launcher/autolog/steptime.py)."""

from __future__ import annotations

from launcher.autolog.steptime import Snapshot, StepClock, shares


def snap(at: float, last_end: float, calls: int, call_s: float, *, eager_input: float = 0.0, wait: float = 0.0,
         between: float = 0.0, graph_input: float = 0.0, graph_peers: float = 0.0, step: int | None = None) -> Snapshot:
    return Snapshot(at, last_end, calls, call_s, eager_input, wait, between, graph_input, graph_peers, step)


def test_in_graph_input_is_taken_out_of_the_calls() -> None:
    # 10 steps of 31 ms: 30 ms of it waiting in the graph's IteratorGetNext, 0.5 ms between calls
    old = snap(0.0, 1.0, 5, 0.0)
    new = snap(1.0, 1.0 + 10 * 0.031, 15, 10 * 0.0305, graph_input=10 * 0.030, step=None)
    got = shares(old, new)
    assert got is not None
    assert abs(got["input"] - 0.030 / 0.031) < 1e-6
    assert abs(got["compute"] - 0.0005 / 0.031) < 1e-6
    assert abs(got["other"] - 0.0005 / 0.031) < 1e-6
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
    new = snap(1.0, 1.0, 10, 0.5, graph_peers=0.9, graph_input=0.1)
    got = shares(snap(0.0, 0.0, 0, 0.0), new)
    assert got is not None and got["compute"] == 0.0
    assert abs(got["peers"] + got["input"] - 0.5) < 1e-9


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
