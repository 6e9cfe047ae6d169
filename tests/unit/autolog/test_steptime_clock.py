"""Autolog's step clock: shares from the counters the training thread bumps (launcher/autolog/steptime.py)."""

from __future__ import annotations

from launcher.autolog.steptime import Snapshot, StepClock, inside_ratios, shares


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
    assert clock.calls == 1000 and 190 <= clock.every <= 210 and 5 <= timed <= 7  # the first, then one in ~200
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
