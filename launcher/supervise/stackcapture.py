"""Every task's stacks, asked of the host agents: by a live launcher over its open follow
channels (``capture_stacks``: no SSH exec), by the CLI over each host's transport when no
launcher follows (``capture_by_verb``), and once per stall episode (``StallCapture``).

Each host answers for all its tasks at once (``launcher/agent/stackreader.py``, its tasks read in
parallel), and all hosts are asked in parallel; a host that does not answer in time gets a
capture per task that says so. What a live launcher's capture saw of each process's state is
also kept for the causes of failures to come (``OutputTails.note_states``): a peer seen stopped
shortly before another task lost contact with it is named so in that task's cause.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterable, Mapping
from concurrent.futures import ThreadPoolExecutor
from typing import TYPE_CHECKING, Any, Protocol

from launcher import events as ev
from launcher.agent.stackmodel import UNKNOWN, TaskStacks, suspect, user_frame
from launcher.errors import HostError
from launcher.protocol.agentlines import AgentOp, StacksRequest
from launcher.telemetry.stacktext import render, to_json

if TYPE_CHECKING:
    from launcher.remote.session import HostSession
    from launcher.rundir import RunDir
    from launcher.telemetry.causes import OutputTails
    from launcher.telemetry.watchdog import Watchdog


class CaptureOwner(Protocol):
    """What a capture uses of the supervisor (supervise/supervisor.py), named here so that this
    module, which the supervisor imports, does not import it back."""

    @property
    def run_id(self) -> str: ...
    @property
    def rundir(self) -> RunDir: ...
    @property
    def tasks(self) -> Mapping[str, Any]: ...
    @property
    def watchdog(self) -> Watchdog: ...
    @property
    def tails(self) -> OutputTails: ...
    def notice(self, message: str) -> None: ...
    def ask_agent(self, host: str, request: AgentOp, timeout: float = ...) -> dict[str, Any] | None: ...
    def call(self, fn: Callable[[], None]) -> None: ...
    def publish(self, event: ev.Event, line: str | None = None) -> None: ...

DEFAULT_TIMEOUT = 10.0
#: what the agent keeps of the launcher's timeout for the round trip and the JSON
MARGIN_SECONDS = 1.5


def _by_host(placement: Mapping[str, str], tasks: Iterable[str] | None) -> dict[str, list[str]]:
    """task -> host of the wanted tasks (all when ``tasks`` is None), grouped by host."""
    hosts: dict[str, list[str]] = {}
    for task, host in placement.items():
        if tasks is None or task in tasks:
            hosts.setdefault(host, []).append(task)
    return hosts


def _gather(hosts: dict[str, list[str]], ask: Callable[[str, list[str]], Any], timeout: float) -> list[TaskStacks]:
    """Ask every host in parallel (``ask(host, tasks)`` -> the agent's answer), one capture per task."""
    captures: list[TaskStacks] = []
    if not hosts:
        return captures
    with ThreadPoolExecutor(max_workers=min(32, len(hosts)), thread_name_prefix="stacks") as pool:
        futures = {host: pool.submit(ask, host, tasks) for host, tasks in hosts.items()}
        deadline = time.monotonic() + timeout + MARGIN_SECONDS
        for host, future in futures.items():
            tasks = hosts[host]
            try:
                answer = future.result(max(0.0, deadline - time.monotonic()))
            except TimeoutError:
                answer = {"error": f"no answer within {timeout:g} s"}
            except (HostError, OSError) as exc:
                answer = {"error": str(exc)}
            captures.extend(_captures_of(host, tasks, answer))
    return captures


def _captures_of(host: str, tasks: list[str], answer: Any) -> list[TaskStacks]:
    got: dict[str, TaskStacks] = {}
    if isinstance(answer, dict):
        for item in answer.get("stacks") or []:
            try:
                capture = TaskStacks.from_json(item)
            except (KeyError, TypeError, ValueError, IndexError):
                continue
            got[capture.task] = capture
    why = answer.get("error") if isinstance(answer, dict) else None
    why = why or (f"host {host}: no live follow channel" if answer is None else f"host {host} did not answer")
    return [got.get(t) or TaskStacks(t, host, None, UNKNOWN, note=f"no answer: {why}") for t in tasks]


def capture_stacks(sup: CaptureOwner, tasks: list[str] | None = None, native: bool = False,
                   timeout: float = DEFAULT_TIMEOUT) -> list[TaskStacks]:
    """Every (or these) task's stacks through the supervisor's open follow channels; the process
    states they show are handed to the loop as evidence for causes."""
    placement = {task_id: rt.spec.host for task_id, rt in sup.tasks.items()}

    def ask(host: str, wanted: list[str]) -> Any:
        request = StacksRequest(tuple(wanted), native, max(1.0, timeout - MARGIN_SECONDS))
        return sup.ask_agent(host, request, timeout=timeout)

    asked_at = time.time()  # the states were read after this: told as of then
    captures = _gather(_by_host(placement, tasks), ask, timeout)
    sup.call(lambda: sup.tails.note_states(captures, asked_at))
    return captures


def capture_by_verb(sessions: Mapping[str, HostSession], placement: Mapping[str, str], tasks: list[str] | None,
                    native: bool = False, timeout: float = DEFAULT_TIMEOUT) -> list[TaskStacks]:
    """The same without a launcher: the agent's ``stacks`` verb, one exec per host."""

    def ask(host: str, wanted: list[str]) -> Any:
        session = sessions[host]
        args = ["--run-dir", session.base_dir, "--tasks", ",".join(wanted),
                "--timeout", f"{max(1.0, timeout - MARGIN_SECONDS):g}"] + (["--native"] if native else [])
        return session.agent("stacks", *args, timeout=timeout + 30.0)  # an exec's own start-up on top

    return _gather(_by_host(placement, tasks), ask, timeout + 30.0)


def save(sup: CaptureOwner, captures: list[TaskStacks], captured_at: float) -> str:
    """Write a capture into the run dir; its JSON file's path relative to the run dir."""
    return sup.rundir.write_stacks(captured_at, to_json(captures), render(captures))


def _told(sup: CaptureOwner, task: str | None, path: str, captures: list[TaskStacks]) -> ev.Event:
    """The ``stacks`` event of a capture; at a stall with no suspect, the stalled task is named."""
    found = suspect(captures)
    culprit, why = found if found is not None else (task, "it stalled first" if task else "")
    where = _where(next((c for c in captures if c.task == culprit), None))
    return ev.stacks_event(sup.run_id, task, path, culprit, where, why)


def record(sup: CaptureOwner, captures: list[TaskStacks], captured_at: float) -> str:
    """A capture taken on request (``distlaunch stacks``): kept in the run dir and told as a
    ``stacks`` event with no task; the JSON file's path relative to the run dir."""
    path = save(sup, captures, captured_at)
    event = _told(sup, None, path, captures)
    sup.call(lambda: sup.publish(event))
    return path


class StallCapture:
    """Captures every task's stacks when the job's first stall of an episode is raised (again only
    after every stall cleared), on a thread of its own; then publishes a ``stacks`` event and, for
    each task stalled, its condition again with the frame it hangs in (a task that stalls later in
    the episode gets its frame from the same capture)."""

    def __init__(self, sup: CaptureOwner) -> None:
        self.sup = sup
        self._stalled: set[str] = set()
        self._captured = False  # this episode's capture is taken (or under way)
        self._last: tuple[str, list[TaskStacks]] | None = None  # this episode's capture, once published

    def on_condition(self, task: str, active: bool) -> None:
        """A stall was raised or cleared (on the supervisor's loop)."""
        if not active:
            self._stalled.discard(task)
            if not self._stalled:
                self._captured, self._last = False, None  # the episode ended: the next stall captures again
            return
        watchdog = self.sup.watchdog
        self._stalled = {t for t in self._stalled if watchdog.active_reason(t, ev.STALLED) is not None}
        if not self._stalled:
            self._captured, self._last = False, None  # the stalled tasks restarted or ended: a new episode
        self._stalled.add(task)
        if self._last is not None:
            self._name_frames([task], *self._last)
        elif not self._captured:
            self._captured = True
            threading.Thread(target=self._capture, args=(task,), name="stall-stacks", daemon=True).start()

    def _capture(self, task: str) -> None:
        sup = self.sup
        captured_at = time.time()
        captures = capture_stacks(sup)
        try:
            path = save(sup, captures, captured_at)
        except OSError as exc:
            sup.notice(f"cannot write the stacks of the stall of {task}: {exc}")
            return
        event = _told(sup, task, path, captures)
        sup.call(lambda: self._publish(event, path, captures))

    def _publish(self, event: ev.Event, path: str, captures: list[TaskStacks]) -> None:
        """On the loop: the event, then the conditions of the tasks stalled, with their frame."""
        self.sup.publish(event)
        if self._captured:  # else the episode ended while the capture was taken
            self._last = (path, captures)
            self._name_frames(sorted(self._stalled), path, captures)

    def _name_frames(self, tasks: list[str], path: str, captures: list[TaskStacks]) -> None:
        sup = self.sup
        found = suspect(captures)
        by_task = {c.task: c for c in captures}
        for task in tasks:
            reason = sup.watchdog.active_reason(task, ev.STALLED)
            frame = _where(by_task.get(task))
            if reason is None or frame is None:
                continue
            reason += f" in {frame}"
            if found is not None and found[0] != task:
                reason += f"; suspect {found[0]}: {found[1]}"
            sup.publish(ev.condition_event(sup.run_id, task, ev.STALLED, True, f"{reason}; stacks in {path}"))


def _where(capture: TaskStacks | None) -> str | None:
    """``wait_for_peer (hang.py:4)``: the innermost frame of user code, else the newest one."""
    if capture is None:
        return None
    frame = user_frame(capture)
    if frame is None:
        main = capture.main_thread()
        frame = main.frames[-1] if main is not None and main.frames else None
    return frame.label if frame is not None else None
