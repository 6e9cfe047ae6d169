"""Captures of an eight-worker job as the host agents return them, and its recorded events: the
stacks view's fixtures (the capture itself is tested with real processes in tests/integration)."""

from __future__ import annotations

from pathlib import Path

from launcher import events as ev
from launcher.agent.stackmodel import FAULTHANDLER, PYSPY, SLEEPING, STOPPED, Frame, TaskStacks, ThreadStack
from launcher.events import Event
from launcher.telemetry.stacktext import to_json
from tests.tui.tui_support import RUN, T0

SCRIPT = "/home/ada/job/hang.py"
THREADING = "/usr/lib/python3.11/threading.py"
TF_CONTEXT = "/usr/lib/python3/dist-packages/tensorflow/python/eager/context.py"
WORKERS = [f"worker:{i}" for i in range(8)]
HOSTS = {task: ("node1" if i < 4 else "node2", 4100 + i) for i, task in enumerate(WORKERS)}


def training_frames() -> list[Frame]:
    return [Frame("<module>", SCRIPT, 30), Frame("train", SCRIPT, 22), Frame("train_step", SCRIPT, 12),
            Frame("sync_executors", TF_CONTEXT, 2851)]


def hung_frames() -> list[Frame]:
    return [Frame("<module>", SCRIPT, 30), Frame("train", SCRIPT, 20), Frame("wait_for_peer", SCRIPT, 4),
            Frame("wait", THREADING, 320)]


def heartbeat() -> ThreadStack:
    return ThreadStack("heartbeat", "0x7f3a2c1ff640", [Frame("_bootstrap", THREADING, 995),
                                                       Frame("run", THREADING, 982),
                                                       Frame("wait", THREADING, 324)])


def task_stacks(task: str, frames: list[Frame], *, state: str = SLEEPING, wchan: str = "futex_wait_queue",
                method: str = PYSPY) -> TaskStacks:
    host, pid = HOSTS[task]
    return TaskStacks(task, host, pid, state, wchan, method,
                      [ThreadStack("MainThread", "0x7f3a31b6b740", frames), heartbeat()])


def odd_one_out() -> list[TaskStacks]:
    """worker:1 waits for a peer in the user's own function; the seven others are in a train step."""
    return [task_stacks(t, hung_frames() if t == "worker:1" else training_frames()) for t in WORKERS]


def one_stopped() -> list[TaskStacks]:
    """worker:3 was frozen with SIGSTOP: no stacks can be read from it, its state says why."""
    out = [task_stacks(t, training_frames()) for t in WORKERS if t != "worker:3"]
    host, pid = HOSTS["worker:3"]
    out.insert(3, TaskStacks("worker:3", host, pid, STOPPED, "do_signal_stop", FAULTHANDLER, [],
                             "a stopped process cannot run faulthandler's handler; install py-spy on node1 "
                             "to read it"))
    return out


CAPTURE = "stacks/20231114T221331.000Z.json"
"""Where the supervisor stores the capture it takes at T0 + 11 (`RunDir.write_stacks`)."""


def stall_events(*, with_stacks: bool = True) -> list[Event]:
    """Eight workers reach step 5; worker:1 stalls there and the supervisor captures the stacks, then
    raises the stall again with the frame it hangs in (launcher/stackcapture.py)."""
    out = [ev.job_event(RUN, ev.JOB_CREATED, ts=T0), ev.job_event(RUN, ev.JOB_RUNNING, ts=T0)]
    for task, (host, pid) in HOSTS.items():
        out.append(ev.state_event(RUN, task, ev.STARTING, host=host, ts=T0 + 0.1))
        out.append(ev.state_event(RUN, task, ev.RUNNING, host=host, pid=pid, ts=T0 + 0.5))
    for step in range(1, 6):
        out += [ev.metric_event(RUN, task, step=step, loss=1.0 / step, ts=T0 + step) for task in WORKERS]
    reason = "step 5 has not advanced for 5s (stall_seconds = 5)"
    out.append(ev.condition_event(RUN, "worker:1", ev.STALLED, True, reason, ts=T0 + 10))
    if with_stacks:
        out.append(ev.stacks_event(RUN, "worker:1", CAPTURE, "worker:1", "wait_for_peer (hang.py:4)",
                                   "its stack differs from the other 7 worker tasks", ts=T0 + 11))
        out.append(ev.condition_event(RUN, "worker:1", ev.STALLED, True,
                                      f"{reason} in wait_for_peer (hang.py:4); stacks in {CAPTURE}", ts=T0 + 11))
    return out


def write_capture(run_dir: Path, stacks: list[TaskStacks]) -> Path:
    """The capture file of `stall_events`, as the supervisor stores it at the stall."""
    path = run_dir / CAPTURE
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(to_json(stacks), encoding="utf-8")
    return path
