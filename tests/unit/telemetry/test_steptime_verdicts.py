"""The launcher's side of the step-time split: values in metric events -> splits, verdicts that
name the peer, status --json's step_time, the --no-tui line."""

from __future__ import annotations

import io

from launcher import events as ev
from launcher.telemetry.jobview import JobView
from launcher.telemetry.printer import ProgressPrinter
from launcher.telemetry.stepverdict import StepTimes, bar


def split(input: float = 0.0, compute: float = 0.0, peers: float = 0.0, other: float = 0.0,
          sps: float = 0.03) -> dict[str, float]:
    return {"step_time/input": input, "step_time/compute": compute, "step_time/peers": peers,
            "step_time/other": other, "step_time/seconds_per_step": sps}


def test_input_and_compute_bound() -> None:
    times = StepTimes()
    times.apply("worker:0", 100.0, split(input=0.7, compute=0.25, other=0.05))
    times.apply("worker:1", 100.0, split(input=0.05, compute=0.9, other=0.05, sps=0.01))  # not in step
    assert times.verdict("worker:0", now=101.0) == "input-bound"
    assert times.verdict("worker:1", now=101.0) == "compute-bound"
    assert times.as_json("worker:0", now=101.0)["input"] == 0.7  # type: ignore[index]


def test_mwms_waiting_worker_names_the_slow_peer() -> None:
    times = StepTimes()
    times.apply("worker:0", 100.0, split(input=0.02, compute=0.04, peers=0.94))
    times.apply("worker:1", 100.0, split(input=0.71, compute=0.07, peers=0.21, other=0.01))
    times.apply("worker:2", 100.0, split(input=0.02, compute=0.05, peers=0.93))
    assert times.verdict("worker:0", now=100.5) == "waiting for worker:1"
    assert times.verdict("worker:2", now=100.5) == "waiting for worker:1"
    assert times.verdict("worker:1", now=100.5) == "input-bound"


def test_peers_without_a_culprit_and_a_busy_ps() -> None:
    times = StepTimes()
    times.apply("chief:0", 100.0, split(peers=0.9, other=0.1))
    assert times.verdict("chief:0", now=100.0) == "waiting for peers"
    assert times.verdict("chief:0", now=100.0, cpu={"ps:0": 30.0, "ps:1": 99.0}) == "waiting for ps:1"


def test_pss_slow_worker_is_named_from_closures() -> None:
    times = StepTimes()
    times.apply("chief:0", 100.0, {**split(peers=0.97, other=0.03), "closures_per_s/worker:0": 47.5,
                                   "closure_latency_s/worker:0": 0.021, "closures_per_s/worker:1": 30.7,
                                   "closure_latency_s/worker:1": 0.033, "closures_per_s/worker:2": 46.0})
    assert times.slow_worker(100.0) == "worker:1"
    assert times.verdict("chief:0", now=100.0) == "waiting for worker:1"
    assert times.verdict("worker:1", now=100.0) == "slowest worker"
    assert times.verdict("worker:0", now=100.0) is None
    assert times.closures["worker:1"].latency_s == 0.033


def test_a_lost_pss_worker_is_never_the_one_the_chief_waits_for() -> None:
    """Issue 55: the job goes on without a lost worker; the coordinator may still count its closures."""
    view = JobView()
    view.apply(ev.state_event("r", "worker:1", ev.RUNNING, host="c", pid=6, ts=99.0))
    view.apply(ev.metric_event("r", "chief:0", ts=100.0, values={
        **split(peers=0.97, other=0.03), "closures_per_s/worker:0": 47.5, "closures_per_s/worker:1": 0.5,
        "closures_per_s/worker:2": 46.0}))
    assert view.step_times.verdict("chief:0", now=100.0) == "waiting for worker:1"
    view.apply(ev.state_event("r", "worker:1", ev.LOST, host="c", reason="host c lost", ts=100.0))
    assert view.step_times.slow_worker(100.0) is None
    assert view.step_times.verdict("chief:0", now=100.0) == "waiting for peers"


def test_stale_split_has_no_verdict() -> None:
    times = StepTimes()
    times.apply("worker:0", 100.0, split(input=0.9, compute=0.1))
    assert times.verdict("worker:0", now=200.0) is None
    assert times.verdict("worker:0", now=None) == "input-bound"  # a finished run: as last seen


def test_bar_cells_sum_to_width() -> None:
    times = StepTimes()
    times.apply("w", 1.0, split(input=0.33, compute=0.33, peers=0.33, other=0.01))
    cells = bar(times.splits["w"], 8)
    assert sum(n for _, n in cells) == 8


def metric(task: str, ts: float, values: dict[str, float]) -> ev.Event:
    return ev.Event.from_dict({"v": 1, "ts": ts, "run": "r", "task": task, "kind": "metric", "step": 10,
                               "loss": 0.5, "values": values})


def test_jobview_and_progress_line_carry_the_verdict() -> None:
    view = JobView()
    view.apply(ev.Event.from_dict({"v": 1, "ts": 99.0, "run": "r", "task": "worker:0", "kind": "state",
                                   "state": "running", "host": "h", "pid": 1}))
    view.apply(metric("worker:0", 100.0, split(input=0.8, compute=0.2)))
    assert view.step_times.verdict("worker:0", now=100.0) == "input-bound"
    out = io.StringIO()
    printer = ProgressPrinter(out=out, color=False, clock=lambda: 100.5)
    printer.view = view
    printer.progress()
    assert "[input-bound: input 80% compute 20% peers 0% other 0%]" in out.getvalue()


def test_an_untimed_all_reduce_still_names_the_input_bound_peer() -> None:
    # inside XLA the wait for worker:1 reads as compute; the same seconds per step says they are in step
    times = StepTimes()
    times.apply("worker:0", 100.0, split(input=0.02, compute=0.95, other=0.03, sps=0.031))
    times.apply("worker:1", 100.0, split(input=0.85, compute=0.1, other=0.05, sps=0.0305))
    times.apply("worker:2", 100.0, split(input=0.02, compute=0.95, other=0.03, sps=0.2))  # not in step
    assert times.verdict("worker:0", now=100.0) == "waiting for worker:1"
    assert times.verdict("worker:2", now=100.0) == "compute-bound"


def test_a_ps_is_saturated_against_its_hosts_cores() -> None:
    times = StepTimes()
    times.apply("chief:0", 100.0, split(peers=0.9, other=0.1))
    times.cpu.update({"ps:0": 150.0})
    times.cores["ps:0"] = 8
    assert times.verdict("chief:0", now=100.0) == "waiting for peers"  # 150 % of an 8-core host
    times.cores["ps:0"] = 1
    assert times.verdict("chief:0", now=100.0) == "waiting for ps:0"


def test_a_step_that_counts_calls_and_a_split_that_is_missing_are_said() -> None:
    """Issue 46: a loop without an optimizer reports its train calls as the step (`step (calls)`);
    a task with train calls but none timed has `-` and why, never a silent blank."""
    view = JobView()
    for task in ("worker:0", "worker:1"):
        view.apply(ev.Event.from_dict({"v": 1, "ts": 99.0, "run": "r", "task": task, "kind": "state",
                                       "state": "running", "host": "h", "pid": 1}))
    view.apply(ev.metric_event("r", "worker:0", step=2, loss=0.5, ts=100.0,
                               values={"step_time/untimed_calls": 2.0, "step_is_calls": 1.0}))
    view.apply(ev.metric_event("r", "worker:1", step=7, loss=0.5, ts=100.0, values=split(input=0.8, compute=0.2)))
    assert view.tasks["worker:0"].step_is_calls and not view.tasks["worker:1"].step_is_calls
    why = view.step_times.missing("worker:0")
    assert why is not None and why.startswith("no step timed in 2 train calls"), why
    assert view.step_times.missing("worker:1") is None
    out = io.StringIO()
    printer = ProgressPrinter(out=out, color=False, clock=lambda: 100.5)
    printer.view = view
    printer.progress()
    assert "step (calls) 2  loss 0.5000" in out.getvalue() and f"[step time: {why}]" in out.getvalue()
    # a later step without the marker (a report() of the script's own): no longer calls
    view.apply(ev.metric_event("r", "worker:0", step=3, loss=0.4, ts=101.0, values=split(input=0.8, compute=0.2)))
    assert not view.tasks["worker:0"].step_is_calls and view.step_times.missing("worker:0") is None


def _running(view: JobView, task: str, ts: float) -> None:
    view.apply(ev.state_event("r", task, ev.RUNNING, host="h", pid=1, restarts=0, ts=ts))


def test_a_raised_stall_blames_the_frozen_worker_not_its_healthy_peer() -> None:
    """worker:1 frozen (kill -STOP) mid-training: its last window said it waited for worker:0; once
    the stall is raised, no cell blames worker:0 for the 30 s that window stays fresh."""
    from launcher.telemetry.columns import split_cell

    view = JobView()
    for task in ("worker:0", "worker:1"):
        _running(view, task, 99.0)
    view.apply(metric("worker:0", 100.0, split(input=0.5, compute=0.4, peers=0.1)))
    view.apply(metric("worker:1", 100.0, split(input=0.02, compute=0.08, peers=0.9)))
    times = view.step_times
    assert times.verdict("worker:1", now=101.0) == "waiting for worker:0"  # before the freeze: true
    view.apply(ev.sample_event("r", "worker:1", cpu_percent=0.0, rss_bytes=1, proc_state="T", ts=104.0))
    view.apply(ev.condition_event("r", "worker:1", ev.STALLED, True, "step 70 has not advanced for 5s", ts=105.0))
    view.apply(ev.condition_event("r", "worker:0", ev.STALLED, True, "step 70 has not advanced for 5s", ts=105.0))
    assert times.verdict("worker:1", now=106.0) == "stalled"
    assert times.verdict("worker:0", now=106.0) == "waiting for worker:1"
    assert split_cell(view.tasks["worker:0"], times, 106.0)[0].endswith(" wait worker:1")
    assert split_cell(view.tasks["worker:1"], times, 106.0)[0].endswith(" stalled")
    assert "worker:0" not in str(times.as_json("worker:1", now=106.0))
    for task in ("worker:0", "worker:1"):  # the step advances again: the shares judge once more
        view.apply(ev.condition_event("r", task, ev.STALLED, False, "step advanced to 71", ts=120.0))
    assert times.verdict("worker:1", now=121.0) == "waiting for worker:0"


def test_a_stall_captures_suspect_is_the_culprit_and_an_ended_task_clears_its_stall() -> None:
    view = JobView()
    for task in ("worker:0", "worker:1"):
        _running(view, task, 99.0)
    view.apply(metric("worker:0", 100.0, split(input=0.02, compute=0.08, peers=0.9)))
    view.apply(metric("worker:1", 100.0, split(input=0.5, compute=0.4, peers=0.1)))
    times = view.step_times
    view.apply(ev.condition_event("r", "worker:0", ev.STALLED, True, "step 70 has not advanced", ts=105.0))
    assert times.verdict("worker:0", now=106.0) == "stalled"  # no suspect named yet: the stalled task
    view.apply(ev.stacks_event("r", "worker:0", "stacks/1.txt", suspect="worker:1", ts=106.0))
    assert times.verdict("worker:0", now=107.0) == "waiting for worker:1"
    assert times.verdict("worker:1", now=107.0) == "stalled"
    view.apply(ev.state_event("r", "worker:0", ev.FAILED, host="h", restarts=0, exit_code=1, ts=108.0))
    assert not times.stalled and times.stall_suspect is None
    assert times.verdict("worker:1", now=109.0) == "input-bound"  # its own shares again
