"""A job whose tasks stand in every situation a task-table row or a `status` line draws differently:
running with GPUs, a split and a checkpoint, counting calls, a NaN loss, stalled, failed, silent host, lost host,
a ParameterServerStrategy worker's closures, one never heard of."""

from __future__ import annotations

from launcher import events as ev
from launcher.telemetry.jobview import JobView

RUN = "r-columns"
T0 = 1000.0
NOW = T0 + 30.0


def columns_events() -> list[ev.Event]:
    out: list[ev.Event] = []
    view = _Collect(out)
    gpu = {"index": 0, "util_percent": 85.0, "mem_used_bytes": 3 << 30, "mem_total_bytes": 16 << 30}
    for i, task in enumerate(("chief:0", "worker:0", "worker:1", "worker:2", "worker:3", "ps:0", "ps:1")):
        view.apply(ev.state_event(RUN, task, ev.RUNNING, host="a" if i % 2 else "b", pid=100 + i, ts=T0))
    for k in range(6):
        ts = T0 + 2 + k * 3
        view.apply(ev.metric_event(RUN, "chief:0", step=100 + 40 * k, loss=0.5 - k / 100, ts=ts,
                                   values={"step_time/input": 0.7, "step_time/compute": 0.2,
                                           "step_time/peers": 0.0, "step_time/other": 0.1,
                                           "step_time/seconds_per_step": 0.05}))
        view.apply(ev.metric_event(RUN, "worker:0", step=10 * k, loss=None, ts=ts, values={"step_is_calls": 1}))
    view.apply(ev.checkpoint_event(RUN, "chief:0", "/data/ckpt", step=260, files=["checkpoint", "ckpt-3.index"],
                                   nbytes=4096, seconds=0.2, api="checkpoint_manager", host="b", ts=T0 + 18))
    view.apply(ev.sample_event(RUN, "chief:0", cpu_percent=123.0, rss_bytes=700 << 20, gpus=[gpu], ts=T0 + 25))
    view.apply(ev.sample_event(RUN, "worker:0", cpu_percent=40.0, rss_bytes=300 << 20, ts=T0 + 25))
    view.apply(ev.metric_event(RUN, "worker:1", step=7, loss=float("nan"), ts=T0 + 26))
    view.apply(ev.condition_event(RUN, "worker:1", ev.STALLED, True, "no step for 300 s", ts=T0 + 26))
    view.apply(ev.state_event(RUN, "worker:2", ev.FAILED, host="a", exit_code=1, restarts=2,
                              reason="exit code 1", ts=T0 + 10))
    view.apply(ev.metric_event(RUN, "worker:3", step=55, loss=1.25, ts=T0 + 5, values={"step_time/untimed_calls": 2}))
    view.apply(ev.host_event(RUN, "a", ev.HOST_UNREACHABLE, "no answer", ts=T0 + 12))
    view.apply(ev.metric_event(RUN, "chief:0", values={"closures_per_s/ps:1": 12.5,
                                                       "closure_latency_s/ps:1": 0.04}, ts=T0 + 27))
    view.apply(ev.state_event(RUN, "evaluator:0", ev.PENDING, ts=T0 + 1))
    view.apply(ev.state_event(RUN, "ps:2", ev.LOST, host="c", restarts=1, reason="host c lost", ts=T0 + 20))
    return out


class _Collect:
    def __init__(self, out: list[ev.Event]) -> None:
        self.apply = out.append


def columns_job() -> JobView:
    view = JobView()
    for event in columns_events():
        view.apply(event)
    return view
