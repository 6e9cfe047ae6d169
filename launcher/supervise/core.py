"""The supervisor's state and its one loop: the inbox, timers, publishing to the run dir and feeds.

One loop thread owns all state. Agents' events arrive from per-host follower streams and
commands from the CLI/TUI arrive as callables, both through one inbox queue; blocking host
operations run on one worker thread per host, so a slow host never stalls the others.

The supervisor is built in layers, each a module of its own, each calling only what the layers
under it define (plus the two decisions below, which the layers above make):

    core.py        this: state, loop, timers, publishing, host threads, state.json
    links.py       the hosts' event streams and agent requests (follow, decode, seq, clock, reconnect)
    teardown.py    the job's end: finish, teardown, sweep, detach
    restarts.py    the task state machine: restart policies, back-off, crash loops, stalls
    supervisor.py  the coordinator: launch, resume (attach), the operator's actions
"""

from __future__ import annotations

import itertools
import os
import queue
import threading
import time
from collections.abc import Callable, Iterator
from concurrent.futures import Future
from dataclasses import dataclass, field
from typing import Any

from launcher import events as ev
from launcher.events import Event
from launcher.model import Plan, TaskSpec
from launcher.paths import log_internal_error
from launcher.profile.overrides import mask_secrets
from launcher.remote.hostclock import HostClock
from launcher.remote.session import HostSession
from launcher.rundir import RunDir, host_to_json
from launcher.supervise.hostworker import HostWorker
from launcher.supervise.outputpolicy import OutputPolicy
from launcher.supervise.stackcapture import StallCapture
from launcher.telemetry.causes import OutputTails, PeerIndex
from launcher.telemetry.watchdog import Watchdog
from launcher.transport import LineStream


@dataclass
class TaskRuntime:
    spec: TaskSpec
    port: int
    state: str = ev.PENDING
    restarts: int = 0
    incarnation: int = 0
    pid: int | None = None
    exit_code: int | None = None
    expected_stop: bool = False  # the supervisor asked for this stop: not a failure
    restarting: bool = False
    restart_pending: bool = False  # a restart is scheduled but not yet carried out
    started_at: float | None = None  # the agent's time of this incarnation's `starting`
    launch_pending: bool = False  # a restart launched its agent, which has not reported running yet
    quick_failures: list[tuple[int | None, float]] = field(default_factory=list)  # (exit, uptime) in a row

    @property
    def final(self) -> bool:
        return self.state in ev.FINAL_TASK_STATES


class Feed:
    """An EventSource for one consumer: every event published after it subscribed."""

    def __init__(self) -> None:
        self._queue: queue.SimpleQueue[Event | list[Event] | None] = queue.SimpleQueue()
        self._closed = False

    def put(self, event: Event | None) -> None:
        if not self._closed:
            self._queue.put(event)

    def put_many(self, batch: list[Event]) -> None:
        """A run of events in one queue item: the consumer wakes once for the lot."""
        if not self._closed and batch:
            self._queue.put(batch)

    def events(self) -> Iterator[Event]:
        while True:
            item = self._queue.get()
            if item is None:
                return
            if isinstance(item, list):
                yield from item
            else:
                yield item

    def close(self) -> None:
        self._closed = True
        self._queue.put(None)


#: unread batches after which a client's line feed is dropped (it reattaches from the history)
MAX_BACKLOG = 20_000


class LineFeed:
    """What a client of the supervisor reads (the follow socket, controlsock.py): every event
    published after it subscribed as its JSON line, and the ``Launched`` marker line
    (protocol/lines.py), in batches."""

    def __init__(self) -> None:
        self._queue: queue.SimpleQueue[list[str] | None] = queue.SimpleQueue()
        self._closed = False
        self.dropped = False  # let go for falling behind

    def put_lines(self, lines: list[str]) -> None:
        """Queue a batch; a client that has left this many unread (it stopped reading: Ctrl-Z,
        a pager) is dropped here, so its backlog cannot grow the supervisor without bound."""
        if self._closed or not lines:
            return
        if self._queue.qsize() >= MAX_BACKLOG:
            self.dropped = True
            self.close()
            return
        self._queue.put(lines)

    def backlog(self) -> int:
        """Batches not yet taken: a client that stopped reading makes this grow."""
        return self._queue.qsize()

    def batches(self) -> Iterator[list[str]]:
        while True:
            item = self._queue.get()
            if item is None:
                return
            yield item

    def close(self) -> None:
        self._closed = True
        self._queue.put(None)



class SupervisorCore:
    """The state of one job and the loop that owns it; the layers above add what it does."""

    def __init__(self, plan: Plan, rundir: RunDir, sessions: dict[str, HostSession],
                 ports: dict[str, int], *,
                 on_notice: Callable[[str], None] | None = None) -> None:
        self.plan = plan
        self.profile = plan.profile
        self.rundir = rundir
        self.run_id = rundir.run_id
        self.sessions = sessions
        self.ports = ports
        #: each task's profiler server port (set by `up` from the preflight; kept in state.json)
        self.profiler_ports: dict[str, int] = {}
        self._notice = on_notice or (lambda _msg: None)
        rundir.on_problem = self._notice  # a full disk on the launcher is told, never fatal
        self.tasks: dict[str, TaskRuntime] = {t.task_id: TaskRuntime(t, ports[t.task_id]) for t in plan.tasks}
        self.job_state = ev.JOB_CREATED
        self.job_reason = ""
        self.job_restarts = 0
        self.leftovers: dict[str, list[dict[str, Any]]] = {}
        self.outcome: str | None = None  # Succeeded / Failed, once wait() returns
        #: clients that follow the job over the control socket (the dashboard, --no-tui, attach)
        self.clients = 0
        self._line_feeds: list[LineFeed] = []
        self._launch_failed = False
        self._inbox: queue.SimpleQueue[Callable[[], None]] = queue.SimpleQueue()
        self._executors = {h: HostWorker(f"host-{h}") for h in sessions}
        self._streams: dict[str, LineStream] = {}
        #: hosts attach could not reach: their `detached` marker is removed once they answer
        self._undetach: set[str] = set()
        self._offsets: dict[str, dict[str, int]] = {h: {} for h in sessions}
        self._host_up: dict[str, bool] = dict.fromkeys(sessions, True)
        self._clocks = {h: HostClock() for h in sessions}
        self._send_locks = {h: threading.Lock() for h in sessions}  # pings and requests on a follow channel
        self._requests: dict[int, tuple[str, Future[dict[str, Any] | None]]] = {}
        self._request_ids = itertools.count(1)
        self._last_seq: dict[str, int] = {}  # per task, the last agent event recorded
        self._tails = OutputTails()  # each task's last output lines: the cause of a failure
        self._peers = PeerIndex((t.task_id, t.address, ports[t.task_id]) for t in plan.tasks)
        self.lost_events: dict[str, int] = {}
        self._last_heard: dict[str, float] = {}  # monotonic time of each host's last stream line
        self._feeds: list[Feed] = []
        self._timers: list[tuple[float, Callable[[], None]]] = []
        #: scheduled group restarts (tasks, due time): kept in state.json so `attach` carries them out
        self._pending_restarts: list[tuple[list[str], float]] = []
        #: set (on the loop) while `launch` still starts tasks: a restart due meanwhile waits for its end
        self._launching = False
        self._after_launch: list[list[str]] = []
        self._finishing = False
        self._end: tuple[str, str] | None = None  # the job's end, decided; published once no start is in flight
        self._ended = False
        self._starting = 0  # restarts now starting agents; under _start_gate with _finishing
        self._start_gate = threading.Lock()
        self._all_final = threading.Event()
        self._done = threading.Event()
        self._loop_thread: threading.Thread | None = None
        self.watchdog = Watchdog({t.task_id: t.stall_seconds for t in plan.tasks},
                                 [t.task_id for t in plan.tasks if t.role == "worker"],
                                 self.profile.straggler_ratio)
        self._next_watch = 0.0
        self.outputs = OutputPolicy(self.run_id, self.profile.log_policies, {t.task_id: t.on_nan for t in plan.tasks})
        self._stall_stacks = StallCapture(self)  # every task's stacks once per stall episode

    def subscribe(self) -> Feed:
        feed = Feed()
        self._feeds.append(feed)
        return feed

    def wait(self, timeout: float | None = None) -> str | None:
        self._done.wait(timeout)
        return self.outcome

    def _call(self, fn: Callable[[], None]) -> None:
        self._inbox.put(fn)

    def _loop(self) -> None:
        self._loop_begins()
        while not self._done.is_set():
            timeout = 0.2
            if self._timers:
                timeout = max(0.0, min(timeout, min(t for t, _ in self._timers) - time.time()))
            try:
                fn = self._inbox.get(timeout=timeout)
            except queue.Empty:
                fn = None
            if fn is not None:
                self._guarded(fn)
            now = time.time()
            due = [f for t, f in self._timers if t <= now]
            self._timers = [(t, f) for t, f in self._timers if t > now]
            for f in due:
                self._guarded(f)
            self._guarded(self._tick)

    def _guarded(self, fn: Callable[[], None]) -> None:
        """One item of the loop. An error in it is told and logged, and the loop goes on: a loop
        that died (an OSError of a full disk, once) left the job with nobody to end it, restart
        its tasks or answer a stop signal."""
        try:
            fn()
        except Exception as exc:
            log = log_internal_error(f"--- supervisor {os.getpid()} of {self.run_id}: loop item failed")
            self._notice(f"internal error in the supervisor ({type(exc).__name__}: {exc}); it goes on "
                         f"(details in {log})")

    def _after(self, delay: float, fn: Callable[[], None]) -> None:
        self._timers.append((time.time() + delay, fn))

    def _publish(self, event: Event, line: str | None = None) -> None:
        if self._line_feeds and line is None:
            line = event.to_json()
        self.rundir.append(event, line)
        for feed in self._feeds:
            feed.put(event)
        for line_feed in self._line_feeds:
            line_feed.put_lines([line])  # type: ignore[list-item]  # set above whenever there are line feeds

    def _publish_many(self, batch: list[tuple[Event, str | None]]) -> None:
        """Publish a run of events with one write per file and one queue item per feed."""
        if not batch:
            return
        if self._line_feeds:
            batch = [(event, line if line is not None else event.to_json()) for event, line in batch]
        self.rundir.append_many(batch)
        events = [event for event, _ in batch]
        for feed in self._feeds:
            feed.put_many(events)
        if self._line_feeds:
            lines = [line for _, line in batch if line is not None]
            for line_feed in self._line_feeds:
                line_feed.put_lines(lines)

    def _on_hosts(self, fn: Callable[[HostSession], None], hosts: list[str] | None = None) -> None:
        """Run ``fn`` on each host's thread in parallel; re-raise the first error."""
        futures: list[Future[None]] = [self._executors[h].submit(fn, self.sessions[h])
                                       for h in (hosts if hosts is not None else self.sessions)]
        errors = [f.exception() for f in futures]
        for err in errors:
            if err is not None:
                raise err

    def write_state(self) -> None:
        state = {
            "run_id": self.run_id,
            "profile": str(self.profile.path),
            # a secret given by --set is not kept (a supervisor that takes the run over needs it again)
            "overrides": {"set": [mask_secrets(item, set(self.profile.secrets))
                                  for item in self.profile.overrides.sets],
                          "args": list(self.profile.overrides.args)},
            "name": self.profile.name,
            "strategy": self.profile.strategy,
            "job_state": self.job_state,
            "job_reason": self.job_reason,
            "job_restarts": self.job_restarts,
            "outcome": self.outcome,
            "supervisor_pid": os.getpid(),
            "launcher_pid": os.getpid(),  # the name readers before the supervisor process knew
            "clients": self.clients,
            "updated": time.time(),
            "hosts": {h: {"config": host_to_json(s.config), "base_dir": s.base_dir, "python": s.python,
                          "outputs_dir": s.outputs_dir}
                      for h, s in self.sessions.items()},
            "tasks": {t: {"host": rt.spec.host, "slug": rt.spec.slug, "address": rt.spec.address,
                          "port": rt.port, "pid": rt.pid, "state": rt.state, "restarts": rt.restarts,
                          "incarnation": rt.incarnation, "python": rt.spec.python,
                          "profiler_port": self.profiler_ports.get(t)}
                      for t, rt in self.tasks.items()},
            "offsets": self._offsets,
            "pending_restarts": [{"tasks": g, "due": due} for g, due in self._pending_restarts],
            "lost_events": self.lost_events,
        }
        self.rundir.write_state(state)

    # -- decided by the layers above -------------------------------------------------------------------

    def _loop_begins(self) -> None:
        """On the loop thread, once, before the first inbox item."""

    def _tick(self) -> None:
        """On the loop thread after every inbox item and due timer (about 5 times a second)."""

    def _on_task_state(self, rt: TaskRuntime, event: Event) -> None:
        """A task's state event from its agent, already published (restarts.py)."""
        raise NotImplementedError

    def _finish(self, state: str, reason: str) -> None:
        """Decide the job's end (teardown.py)."""
        raise NotImplementedError

    def _ask_agent(self, host: str, request: dict[str, Any], timeout: float = 60.0) -> dict[str, Any] | None:
        """A request on the host's follow channel and its answer (links.py); the stall capture uses it."""
        raise NotImplementedError
