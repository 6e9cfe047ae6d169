"""A recorded job, an in-memory event source and a recording JobControl for dashboard tests."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path

from launcher import events as ev
from launcher.agent.stackmodel import TaskStacks
from launcher.events import Event
from tui.app import DashboardApp

RUN = "run-test"
T0 = 1_700_000_000.0
TASKS = {"chief:0": ("gpu1", 101), "ps:0": ("gpu1", 102), "ps:1": ("cpu1", 201),
         "worker:0": ("gpu1", 103), "worker:1": ("cpu1", 202)}
VARIABLES = [
    {"name": "embedding", "shape": [30000, 100], "dtype": "float32", "bytes": 12_000_000, "task": "ps:0",
     "device": "/job:ps/replica:0/task:0/device:CPU:0"},
    {"name": "dense/kernel", "shape": [100, 128], "dtype": "float32", "bytes": 51_200, "task": "ps:1",
     "device": "/job:ps/replica:0/task:1/device:CPU:0"},
    {"name": "dense/bias", "shape": [128], "dtype": "float32", "bytes": 512, "task": "ps:1",
     "device": "/job:ps/replica:0/task:1/device:CPU:0"},
    {"name": "out/kernel", "shape": [128, 10], "dtype": "float32", "bytes": 5_120, "task": "ps:0",
     "device": "/job:ps/replica:0/task:0/device:CPU:0"},
]


def recorded_job(steps: int = 10, fail_worker: bool = True) -> list[Event]:
    """Five tasks start, the chief reports placement, trainers report steps/loss, worker:0 has a
    GPU, chief and worker:1 write logs; worker:1 fails at the end (when `fail_worker`)."""
    out: list[Event] = [ev.job_event(RUN, ev.JOB_CREATED, ts=T0), ev.job_event(RUN, ev.JOB_RUNNING, ts=T0)]
    for i, (task, (host, pid)) in enumerate(TASKS.items()):
        out.append(ev.state_event(RUN, task, ev.STARTING, host=host, ts=T0 + 0.1 * i))
        out.append(ev.state_event(RUN, task, ev.RUNNING, host=host, pid=pid, ts=T0 + 0.5 + 0.1 * i))
    out.append(ev.placement_event(RUN, "chief:0", VARIABLES, ts=T0 + 1))
    for s in range(1, steps + 1):
        ts = T0 + 1 + s
        for task in ("chief:0", "worker:0", "worker:1"):
            out.append(ev.metric_event(RUN, task, step=s * 10, loss=2.0 / s, ts=ts))
        out.append(ev.sample_event(RUN, "worker:0", cpu_percent=95.0, rss_bytes=1_500_000_000, ts=ts,
                                   gpus=[{"index": 0, "util_percent": 80.0 + s,
                                          "mem_used_bytes": 3 * 2**30, "mem_total_bytes": 16 * 2**30}],
                                   source="nvml"))
        out.append(ev.sample_event(RUN, "ps:0", cpu_percent=12.5, rss_bytes=300_000_000, ts=ts,
                                   source="proc"))
        out.append(ev.log_event(RUN, "chief:0", "stdout", f"chief step {s * 10} loss {2.0 / s:.3f}", ts=ts))
        out.append(ev.log_event(RUN, "worker:1", "stdout", f"worker batch {s}", ts=ts))
    end = T0 + 2 + steps
    if fail_worker:
        out.append(ev.log_event(RUN, "worker:1", "stderr", "ResourceExhaustedError: OOM", ts=end))
        out.append(ev.state_event(RUN, "worker:1", ev.FAILED, host="cpu1", exit_code=1,
                                  reason="exited with 1", ts=end))
    return out


class MemorySource:
    """Yields a fixed list of events; with `hold_open` it then blocks like a live job until closed."""

    def __init__(self, events: list[Event], hold_open: bool = True) -> None:
        self._events = list(events)
        self._hold_open = hold_open
        self._closed = threading.Event()
        self._more: list[Event] = []
        self._more_ready = threading.Condition()

    def push(self, event: Event) -> None:
        with self._more_ready:
            self._more.append(event)
            self._more_ready.notify_all()

    def events(self) -> Iterator[Event]:
        yield from self._events
        while self._hold_open and not self._closed.is_set():
            with self._more_ready:
                self._more_ready.wait(0.05)
                batch, self._more = self._more, []
            yield from batch

    def close(self) -> None:
        self._closed.set()


class RecordingControl:
    """Stands in for the supervisor: remembers which actions the dashboard asked for. Its
    `capture_stacks` answers with `stacks` (all of them, or those of the tasks asked for); while
    `gate` is set to an unset event it blocks until the event is set, as a slow host would."""

    def __init__(self, stacks: list[TaskStacks] | None = None) -> None:
        self.calls: list[tuple[str, ...]] = []
        self.stacks = list(stacks or [])
        self.gate: threading.Event | None = None

    def restart_task(self, task_id: str) -> None:
        self.calls.append(("restart_task", task_id))

    def stop_task(self, task_id: str) -> None:
        self.calls.append(("stop_task", task_id))

    def teardown(self) -> None:
        self.calls.append(("teardown",))

    def capture_stacks(self, tasks: list[str] | None = None, native: bool = False,
                       timeout: float = 10.0) -> list[TaskStacks]:
        self.calls.append(("capture_stacks", ",".join(tasks) if tasks is not None else "*",
                           "native" if native else ""))
        if self.gate is not None:
            assert self.gate.wait(timeout), "the test never opened the gate"
        return [s for s in self.stacks if tasks is None or s.task in tasks]


def fixed_clock(ts: float = T0 + 15) -> Callable[[], float]:
    return lambda: ts


def make_app(events: list[Event] | None = None, *, control: RecordingControl | None = None,
             live: bool = True, hold_open: bool = True, clock: Callable[[], float] | None = None,
             hosts_total: int = 2, run_dir: Path | None = None) -> DashboardApp:
    return DashboardApp(MemorySource(recorded_job() if events is None else events, hold_open=hold_open),
                        control, title="mnist-ps", strategy="parameter_server", hosts_total=hosts_total,
                        live=live, clock=clock or fixed_clock(), run_dir=run_dir)


async def wait_until(pilot, predicate: Callable[[], bool], timeout: float = 5.0) -> None:
    """Let the app run until `predicate` holds; fail after `timeout` seconds."""
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, "condition not reached in time"
        await pilot.pause(0.02)


async def load(pilot, app: DashboardApp, count: int) -> None:
    """Wait until `count` events are folded in, then flush them to the screen."""
    await wait_until(pilot, lambda: app.state.view.events_applied >= count)
    app.dashboard.flush(force_chart=True)
    await pilot.pause()
    charts = (app.widgets.loss_chart, app.widgets.rate_chart)  # drawn by thread workers
    await wait_until(pilot, lambda: all(chart.up_to_date for chart in charts))
    await pilot.pause()
