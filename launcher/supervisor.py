"""The controller: task state machine, restart and success policies, teardown.

One loop thread owns all state. Agents' events arrive from per-host follower streams and
commands from the CLI/TUI arrive as callables, both through one inbox queue; blocking host
operations run on one worker thread per host, so a slow host never stalls the others.
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import itertools
import json
import os
import queue
import threading
import time
from collections.abc import Callable, Iterator, Mapping
from concurrent.futures import Future
from dataclasses import dataclass, field
from typing import Any

from launcher import events as ev
from launcher.errors import HostError, HostGone
from launcher.events import Event, EventDecodeError
from launcher.hostclock import HostClock
from launcher.hostworker import HostWorker
from launcher.model import START_ORDER, Plan, TaskSpec
from launcher.plan import render_command, split_secrets, tf_config
from launcher.policy import (
    backoff_delay,
    crash_loop_reason,
    job_succeeded,
    quick_failures_after,
    restart_group,
    wants_restart,
    why_not_restarted,
)
from launcher.remote import HostSession
from launcher.rundir import DOWN_MARKER, RunDir, host_to_json
from launcher.stackcapture import StallCapture, capture_stacks
from launcher.stackmodel import TaskStacks
from launcher.transport import LineStream
from launcher.watchdog import ConditionChange, Watchdog

#: how long teardown waits for the agents' final events before it sweeps anyway
DRAIN_SECONDS = 5.0
RECONNECT_MAX_DELAY = 10.0
#: a follower prints at least a `#hb` line every second; this much silence means the link is dead
#: (a partitioned TCP connection only errors out after minutes of retransmissions)
STREAM_SILENCE_SECONDS = 5.0
#: followers touch their host's lease only while these pings arrive (agent `follow --pinged`)
PING_SECONDS = 1.0
#: how often stall and straggler conditions are judged
WATCHDOG_SECONDS = 1.0
#: how long a start sent on a follow channel may wait for the host agent's answer
AGENT_REQUEST_SECONDS = 60.0


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


class Supervisor:
    """Runs one job. ``launch()`` starts it; ``wait()`` blocks until it ended or was detached."""

    def __init__(self, plan: Plan, rundir: RunDir, sessions: dict[str, HostSession],
                 ports: dict[str, int], *, detached: bool = False,
                 on_notice: Callable[[str], None] | None = None) -> None:
        self.plan = plan
        self.profile = plan.profile
        self.rundir = rundir
        self.run_id = rundir.run_id
        self.sessions = sessions
        self.ports = ports
        self.detached = detached
        self._notice = on_notice or (lambda _msg: None)
        rundir.on_problem = self._notice  # a full disk on the launcher is told, never fatal
        self.tasks: dict[str, TaskRuntime] = {t.task_id: TaskRuntime(t, ports[t.task_id]) for t in plan.tasks}
        self.job_state = ev.JOB_CREATED
        self.job_reason = ""
        self.job_restarts = 0
        self.leftovers: dict[str, list[dict[str, Any]]] = {}
        self.outcome: str | None = None  # Succeeded / Failed / detached, once wait() returns
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
        self._stall_stacks = StallCapture(self)  # every task's stacks once per stall episode

    # -- public: consumers and control ------------------------------------------------------------

    def subscribe(self) -> Feed:
        feed = Feed()
        self._feeds.append(feed)
        return feed

    def launch(self) -> None:
        """Start every task (ps first, chief last). On any failure, stop what started and raise."""
        self._launching = True
        self._loop_thread = threading.Thread(target=self._loop, name="supervisor", daemon=True)
        self._loop_thread.start()
        self._call(self._announce)
        try:
            self.write_state()
            self._on_hosts(lambda s: self._start_follower(s.name))  # each starts its host's agent
            self._start_tasks(list(self.tasks.values()))
            if self.detached:
                self._on_hosts(lambda s: s.set_detached(True))
        except BaseException as exc:
            reason = f"launch failed: {exc}"
            self._call(lambda: self._finish(ev.JOB_FAILED, reason))
            self._call(self._launched)
            self.wait()
            raise
        self._call(self._launched)
        self._call(self.write_state)  # on the loop: the streams' offsets change there, never mid-dump

    def _launched(self) -> None:
        """The launch has started every task: the restarts that fell due meanwhile go now."""
        self._launching = False
        groups, self._after_launch = self._after_launch, []
        for group in groups:
            self._restart_now(group)

    def resume(self, state: dict[str, Any], history: list[Event],
               unreachable: Mapping[str, str] | None = None) -> None:
        """Take over a running job from its state.json (attach): replay ``history`` to the
        subscribers, then follow every host from the offsets the last launcher had reached.
        Hosts in ``unreachable`` (name -> why) are reconnected in the background instead."""
        unreachable = dict(unreachable or {})
        for task_id, info in state.get("tasks", {}).items():
            rt = self.tasks.get(task_id)
            if rt is None:
                continue
            rt.state = str(info.get("state") or ev.PENDING)
            rt.restarts = int(info.get("restarts") or 0)
            rt.incarnation = int(info.get("incarnation") or rt.restarts)
            rt.pid = info.get("pid")
        self._fold_task_states(history)
        for host, offsets in (state.get("offsets") or {}).items():
            if host in self._offsets:
                self._offsets[host] = {slug: int(n) for slug, n in offsets.items()}
        self.job_state = str(state.get("job_state") or ev.JOB_RUNNING)
        self.job_restarts = int(state.get("job_restarts") or 0)
        self.detached = False
        for pending in state.get("pending_restarts") or []:
            self._resume_restart([str(t) for t in pending.get("tasks", []) if t in self.tasks],
                                 float(pending.get("due") or 0.0))
        for event in history:
            seq = event.data.get("seq")
            if event.task is not None and isinstance(seq, int):
                self._last_seq[event.task] = max(seq, self._last_seq.get(event.task, -1))
            for feed in self._feeds:
                feed.put(event)
        self.lost_events = dict(state.get("lost_events") or {})
        self._arm_watchdog(history)
        self._loop_thread = threading.Thread(target=self._loop, name="supervisor", daemon=True)
        self._loop_thread.start()
        reachable = [h for h in self.sessions if h not in unreachable]
        self._on_hosts(lambda s: s.set_detached(False), reachable)
        for name in reachable:
            self._start_follower(name)
        for name, why in unreachable.items():
            self._host_up[name] = False
            self._undetach.add(name)
            self._call(functools.partial(self._publish, ev.host_event(self.run_id, name, "unreachable",
                                                                      f"{why}; reconnecting")))
            self._executors[name].submit(self._reconnect, name, 1.0)
        self._call(self.write_state)  # on the loop: the streams' offsets change there, never mid-dump

    def _fold_task_states(self, history: list[Event]) -> None:
        """Attach: each task's state, pid and restarts as its events last told them. state.json is
        written on a task's end, not on every start, so after a restart it can still say
        ``failed`` for a task that runs again: a chief taken for failed was never watched for a
        stall, and the job waited for it for good. The launcher's own ``restarting`` marks are
        left out, as the supervisor that published them kept the task's state meanwhile."""
        for event in history:
            rt = self.tasks.get(event.task) if event.kind == ev.STATE and event.task else None
            state = event.get("state")
            if rt is None or state == ev.RESTARTING:
                continue
            restarts = event.get("restarts")
            if isinstance(restarts, int):
                if restarts < rt.restarts:
                    continue  # an earlier incarnation's late word
                rt.restarts = restarts
                rt.incarnation = max(rt.incarnation, restarts)
            rt.state = str(state)
            if event.get("pid") is not None:
                rt.pid = int(event.get("pid"))

    def _arm_watchdog(self, history: list[Event]) -> None:
        """Attach: each running task's last step of its current incarnation counts as reached now,
        so a task that stalled while no launcher watched is flagged ``stall_seconds`` after the
        attach (it sends no new step that would start its record otherwise)."""
        last_step: dict[str, int] = {}
        for event in history:
            if event.task is None:
                continue
            if event.kind == ev.STATE and event.get("state") == ev.STARTING:
                last_step.pop(event.task, None)  # a new incarnation starts counting again
            elif event.kind == ev.METRIC and isinstance(event.get("step"), int):
                last_step[event.task] = int(event.get("step"))
        now = time.monotonic()
        for task_id, step in last_step.items():
            rt = self.tasks.get(task_id)
            if rt is not None and rt.state == ev.RUNNING:
                self.watchdog.on_step(task_id, step, now)

    def _resume_restart(self, group: list[str], due: float) -> None:
        """A restart the last launcher had scheduled when it detached: due at the same time (or now)."""
        if not group:
            return
        for task_id in group:
            self.tasks[task_id].restarting = True
            self.tasks[task_id].restart_pending = True
        self._pending_restarts.append((group, due))
        self._after(max(0.0, due - time.time()), lambda: self._restart_now(group))

    def _announce(self) -> None:
        self._publish(ev.job_event(self.run_id, ev.JOB_CREATED, self.profile.name))
        for rt in self.tasks.values():
            self._publish(ev.state_event(self.run_id, rt.spec.task_id, ev.PENDING, host=rt.spec.host))

    def wait(self, timeout: float | None = None) -> str | None:
        self._done.wait(timeout)
        return self.outcome

    def restart_task(self, task_id: str) -> None:
        self._call(lambda: self._acted("restart", task_id, lambda: self._manual_restart(task_id)))

    def stop_task(self, task_id: str) -> None:
        self._call(lambda: self._acted("stop", task_id, lambda: self._manual_stop(task_id)))

    def teardown(self, reason: str = "torn down by the user", origin: str = "") -> None:
        """``origin``: where the request came from when not the user's own keys (e.g. "SIGTERM")."""
        self._call(lambda: self._acted("teardown", None, lambda: self._finish(ev.JOB_FAILED, reason), origin))

    def detach(self, origin: str = "") -> None:
        self._call(lambda: self._acted("detach", None, self._detach, origin))

    def _acted(self, action: str, target: str | None, do: Callable[[], None], origin: str = "") -> None:
        """Record an operator's action in the event stream (the timeline shows it), then do it."""
        if not self._done.is_set() and not (action in ("teardown", "detach") and self._finishing):
            self._publish(ev.action_event(self.run_id, action, target, origin))
        do()

    # -- the loop ------------------------------------------------------------------------------

    def _call(self, fn: Callable[[], None]) -> None:
        self._inbox.put(fn)

    def _loop(self) -> None:
        threading.Thread(target=self._ping_streams, name="ping", daemon=True).start()
        while not self._done.is_set():
            timeout = 0.2
            if self._timers:
                timeout = max(0.0, min(timeout, min(t for t, _ in self._timers) - time.time()))
            try:
                fn = self._inbox.get(timeout=timeout)
            except queue.Empty:
                fn = None
            if fn is not None:
                fn()
            now = time.time()
            due = [f for t, f in self._timers if t <= now]
            self._timers = [(t, f) for t, f in self._timers if t > now]
            for f in due:
                f()
            self._check_silence()
            self._watch()

    def _after(self, delay: float, fn: Callable[[], None]) -> None:
        self._timers.append((time.time() + delay, fn))

    def _publish(self, event: Event, line: str | None = None) -> None:
        self.rundir.append(event, line)
        for feed in self._feeds:
            feed.put(event)

    def _publish_many(self, batch: list[tuple[Event, str | None]]) -> None:
        """Publish a run of events with one write per file and one queue item per feed."""
        if not batch:
            return
        self.rundir.append_many(batch)
        events = [event for event, _ in batch]
        for feed in self._feeds:
            feed.put_many(events)

    # -- host work (on host threads) -------------------------------------------------------------

    def _on_hosts(self, fn: Callable[[HostSession], None], hosts: list[str] | None = None) -> None:
        """Run ``fn`` on each host's thread in parallel; re-raise the first error."""
        futures: list[Future[None]] = [self._executors[h].submit(fn, self.sessions[h])
                                       for h in (hosts if hosts is not None else self.sessions)]
        errors = [f.exception() for f in futures]
        for err in errors:
            if err is not None:
                raise err

    def agent_spec(self, rt: TaskRuntime) -> dict[str, Any]:
        spec = rt.spec
        session = self.sessions[spec.host]
        env, _secret = split_secrets(spec.env, self.profile.secrets)  # secrets go by stdin, not spec.json
        env["TF_CONFIG"] = json.dumps(tf_config(self.plan, spec.task_id, self.ports))
        metrics = self.profile.metrics
        patterns = {k: v for k, v in (("step", metrics.step), ("loss", metrics.loss)) if v}
        patterns.update(metrics.extra)
        return {
            "run": self.run_id, "task": spec.task_id, "host": spec.host,
            "incarnation": rt.incarnation, "restarts": rt.restarts,
            "command": render_command(spec.command, port=rt.port, run_dir=session.base_dir,
                                      outputs=session.outputs_dir),
            "workdir": spec.workdir, "env": env, "gpus": list(spec.gpus),
            "grace_seconds": spec.grace_seconds,
            "orphan_grace_seconds": self.profile.orphan_grace_seconds,
            "sample_interval": self.profile.sample_interval, "metrics": patterns,
            "setup": list(spec.setup), "shell": spec.shell or "",
            "autolog": spec.autolog,
        }

    def _start_on(self, session: HostSession, rts: list[TaskRuntime]) -> None:
        """Write the specs of ``rts`` and start them through the host's agent: as a request on the
        open follow channel where there is one (no SSH exec, no interpreter to boot), else with
        the `start` verb; one round trip either way."""
        secrets = {rt.spec.slug: split_secrets(rt.spec.env, self.profile.secrets)[1] for rt in rts}
        specs = {rt.spec.slug: self.agent_spec(rt) for rt in rts}
        secrets = {slug: env for slug, env in secrets.items() if env}
        answer = self._ask_agent(session.name, {"op": "start", "specs": specs, "tasks": list(specs),
                                                "secrets": secrets})
        if answer is None:
            session.start_tasks(specs, secrets)
        else:
            session.started(answer, list(specs))

    def capture_stacks(self, tasks: list[str] | None = None, native: bool = False,
                       timeout: float = 10.0) -> list[TaskStacks]:
        """Every (or these) task's stacks, asked over the open follow channels (any thread but the loop)."""
        return capture_stacks(self, tasks, native, timeout)

    def _ask_agent(self, host: str, request: dict[str, Any],
                   timeout: float = AGENT_REQUEST_SECONDS) -> dict[str, Any] | None:
        """Send ``request`` as a JSON line on the host's follow channel and wait for its ``#re``
        answer; None when there is no live channel to send it on, or it ended before the answer
        came (the caller uses the verb then; a live agent refuses to start a task twice)."""
        stream = self._streams.get(host)
        if stream is None or not self._host_up.get(host):
            return None
        request_id = next(self._request_ids)
        answer: Future[dict[str, Any] | None] = Future()
        self._requests[request_id] = (host, answer)
        line = (json.dumps({**request, "id": request_id}, separators=(",", ":")) + "\n").encode()
        with self._send_locks[host]:
            sent = stream.send(line, timeout)
        if not sent:
            self._requests.pop(request_id, None)
            return None
        try:
            return answer.result(timeout)  # None: the channel ended; the caller uses the verb
        except TimeoutError:
            raise HostError(f"host {host}: its agent did not answer within {timeout:g} s") from None
        finally:
            self._requests.pop(request_id, None)

    def _on_answer(self, line: str) -> None:
        with contextlib.suppress(ValueError, TypeError, AttributeError):
            answer = json.loads(line[4:])
            waiting = self._requests.get(int(answer.get("id")))
            if waiting is not None and not waiting[1].done():
                waiting[1].set_result(answer)

    def _fail_requests(self, host: str) -> None:
        """The host's follow channel ended: requests waiting on it go by the `start` verb instead."""
        for where, waiting in list(self._requests.values()):
            if where == host and not waiting.done():
                waiting.set_result(None)

    def _start_follower(self, host: str) -> None:
        session = self.sessions[host]
        offsets = dict(self._offsets[host])

        pending: list[tuple[str, float]] = []
        pending_lock = threading.Lock()

        def drain() -> None:
            with pending_lock:
                batch = pending[:]
                pending.clear()
            self._on_lines(host, batch)

        def on_line(line: str) -> None:
            self._last_heard[host] = time.monotonic()  # here, not on the loop: a busy loop is no silence
            if line.startswith("#re "):  # an answer to _ask_agent, whose caller waits on a host thread
                self._on_answer(line)
                return
            with pending_lock:  # lines that arrive while the loop is busy go to it in one call
                pending.append((line, time.time()))
                first = len(pending) == 1
            if first:
                self._call(drain)

        def on_close(code: int | None) -> None:
            self._fail_requests(host)
            self._call(lambda: self._on_stream_closed(host, stream))

        self._last_heard[host] = time.monotonic()
        channel = session.take_channel()  # the preflight's channel, waiting to become this stream
        stream: LineStream
        if channel is not None:
            stream = self._streams[host] = channel  # before attach: a channel that ended is told at once
            channel.attach(on_line, on_close)
            return
        stream = session.follow(offsets, on_line, on_close)
        self._streams[host] = stream

    # -- events from agents ------------------------------------------------------------------------

    def _on_lines(self, host: str, batch: list[tuple[str, float]]) -> None:
        """The lines a host's stream delivered while the loop was busy, in order. Runs of events
        that change nothing here (metrics, logs: nearly all of them) are published together; a
        task's state change is published and acted on in its place."""
        held: list[tuple[Event, str | None]] = []
        for line, received in batch:
            decoded = self._decode(host, line, received)
            if decoded is None:
                continue
            event = decoded[0]
            if event.kind == ev.STATE and event.task in self.tasks:
                self._publish_many(held)
                held = []
                self._publish(*decoded)
                self._on_task_state(self.tasks[event.task], event)
                continue
            held.append(decoded)
            if event.kind == ev.METRIC and event.task in self.tasks:
                step = event.get("step")
                if isinstance(step, int) and self.tasks[event.task].state == ev.RUNNING:
                    self.watchdog.on_step(event.task, step, time.monotonic())
        self._publish_many(held)

    def _decode(self, host: str, line: str, received: float) -> tuple[Event, str | None] | None:
        """The event a stream line carries and the text to store for it (None: encode it again),
        or None for a heartbeat, an undecodable line or an event already recorded."""
        if not line or line.startswith("#"):
            if line.startswith("#hb "):
                with contextlib.suppress(ValueError):
                    self._observe_clock(host, float(line[4:]), received)
            return None
        try:
            event = Event.from_json(line)
        except EventDecodeError:
            return None
        if event.task is not None:
            slug = event.task.replace(":", "-")
            offsets = self._offsets[host]
            size = len(line) if line.isascii() else len(line.encode())
            offsets[slug] = offsets.get(slug, 0) + size + 1
            if not self._in_sequence(event):
                return None
        ts = self._clocks[host].correct(event.ts, received)
        if ts == event.ts:
            return event, line
        # a host whose clock is off: its times moved onto ours
        data = dict(event.data)
        if isinstance(data.get("exited_at"), int | float):  # the task's end, for the root cause
            data["exited_at"] = self._clocks[host].correct(float(data["exited_at"]), received)
        return dataclasses.replace(event, ts=ts, data=data), None

    def _in_sequence(self, event: Event) -> bool:
        """False for an event already recorded (a resend after attach from older offsets);
        a gap in the task's ``seq`` is told and kept in state.json."""
        seq = event.data.get("seq")
        task = str(event.task)
        if not isinstance(seq, int):
            return True
        last = self._last_seq.get(task, -1)
        if seq <= last:
            return False
        if seq > last + 1:
            missing = seq - last - 1
            self.lost_events[task] = self.lost_events.get(task, 0) + missing
            self._notice(f"{task}: {missing} event(s) lost between its agent and the launcher "
                         f"(seq {last + 1}..{seq - 1})")
        self._last_seq[task] = seq
        return True

    def _observe_clock(self, host: str, host_ts: float, received: float) -> None:
        clock = self._clocks[host]
        was_off = clock.offset != 0.0
        clock.observe(host_ts, received)
        if clock.offset != 0.0 and not was_off:
            self._notice(f"host {host}: {clock.describe()}; its event times are corrected by the launcher "
                         "(sync its clock with NTP)")

    def _on_task_state(self, rt: TaskRuntime, event: Event) -> None:
        state = str(event.get("state"))
        rt.state = state
        if state != ev.RUNNING:
            self.watchdog.forget(rt.spec.task_id)
        if rt.launch_pending and state != ev.STARTING and event.get("restarts") == rt.restarts:
            rt.launch_pending = False  # running, or already ended: this incarnation has reported
            self._maybe_end_job()
        if event.get("pid") is not None:
            rt.pid = int(event.get("pid"))
        if state in (ev.STARTING, ev.RUNNING):
            if state == ev.STARTING:
                rt.started_at = event.ts
            if state == ev.RUNNING:
                rt.restarting = False
                self._maybe_running()
            return
        if state not in ev.FINAL_TASK_STATES:
            return
        rt.exit_code = event.get("exit_code")
        self.write_state()
        if all(t.final for t in self.tasks.values()):
            self._all_final.set()
        if rt.expected_stop:
            rt.expected_stop = False
            return
        if self._finishing:
            return
        if state == ev.SUCCEEDED:
            if job_succeeded(self.profile.success_policy, {t: r.state for t, r in self.tasks.items()}):
                decider = "all workers" if self.profile.success_policy == "all_workers" else rt.spec.task_id
                self._finish(ev.JOB_SUCCEEDED, f"{decider} exited 0")
            elif rt.spec.restart == "always":
                self._schedule_restart(rt, "exited 0 (restart policy always)")
            return
        if state == ev.STOPPED and self._down_requested():
            self._finish(ev.JOB_FAILED, "stopped by `distlaunch down`")
            return
        if rt.restart_pending:
            # already in a pending group restart (a chief crashing because its ps died): that restart
            # starts it again; its own policy must not call the consequence a permanent failure
            return
        # a restart carried out ended here, even if this incarnation never reached running
        rt.restarting = False
        reason = str(event.get("reason") or f"exit code {rt.exit_code}")
        self._count_quick_failure(rt, event)
        self._on_failure(rt, reason, permanent=bool(event.get("permanent")))

    def _count_quick_failure(self, rt: TaskRuntime, event: Event) -> None:
        if rt.started_at is None:  # its start was before this launcher (attach): the uptime is unknown
            rt.quick_failures = []
            return
        rt.quick_failures = quick_failures_after(rt.quick_failures, rt.exit_code, event.ts - rt.started_at,
                                                 rt.spec.min_uptime)

    def _on_failure(self, rt: TaskRuntime, reason: str, permanent: bool = False) -> None:
        spec = rt.spec
        if permanent:
            self._finish(ev.JOB_FAILED, f"{spec.task_id} failed ({reason}); not restarted: no restart can fix "
                         "this")
            return
        crash_loop = crash_loop_reason(spec, rt.quick_failures, rt.restarts)
        if crash_loop is not None:
            self._finish(ev.JOB_FAILED, crash_loop)
        elif not wants_restart(spec.restart, rt.exit_code, False):
            self._finish(ev.JOB_FAILED, f"{spec.task_id} failed ({reason}); not restarted: "
                         f"{why_not_restarted(spec.restart, rt.exit_code)}")
        elif (spent := self._out_of_restarts(rt, f"failed ({reason})")) is not None:
            self._finish(ev.JOB_FAILED, spent)
        else:
            self._schedule_restart(rt, f"failed ({reason})")

    def _watch(self) -> None:
        """Judge stalls and stragglers about once a second, only while the job runs."""
        now = time.monotonic()
        if now < self._next_watch or self._finishing or self.job_state != ev.JOB_RUNNING:
            return
        self._next_watch = now + WATCHDOG_SECONDS
        for change in self.watchdog.check(now):
            self._publish(ev.condition_event(self.run_id, change.task, change.condition, change.active,
                                             change.reason))
            if change.condition == ev.STALLED:
                self._stall_stacks.on_condition(change.task, change.active)
            if change.active and change.condition == ev.STALLED:
                self._on_stall(self.tasks[change.task], change)

    def _on_stall(self, rt: TaskRuntime, change: ConditionChange) -> None:
        spec = rt.spec
        if spec.on_stall != "restart" or rt.restarting or self.job_state != ev.JOB_RUNNING:
            return
        spent = self._out_of_restarts(rt, f"stalled ({change.reason})")
        if spent is not None:
            self._finish(ev.JOB_FAILED, spent)
        else:
            self.watchdog.forget(spec.task_id)
            self._schedule_restart(rt, f"stall: {change.reason}", delay=0.0)

    def _out_of_restarts(self, rt: TaskRuntime, what: str) -> str | None:
        """Why ``rt`` may not restart again (its max_restarts or the job's backoff_limit), else None."""
        spec = rt.spec
        if rt.restarts >= spec.max_restarts:
            return f"{spec.task_id} {what} after {rt.restarts} restarts (max_restarts = {spec.max_restarts})"
        if self.job_restarts >= self.profile.backoff_limit:
            return f"{spec.task_id} {what}; the job used all {self.profile.backoff_limit} restarts (backoff_limit)"
        return None

    def _schedule_restart(self, rt: TaskRuntime, why: str, delay: float | None = None) -> None:
        group = restart_group(self.profile.strategy, rt.spec.task_id, self.tasks)
        group = [t for t in group if not self.tasks[t].restarting]
        if not group:
            return
        self.job_restarts += 1
        wait = backoff_delay(rt.restarts) if delay is None else delay
        self.job_state = ev.JOB_RESTARTING
        self._publish(ev.job_event(self.run_id, ev.JOB_RESTARTING,
                                   f"{rt.spec.task_id} {why}; restarting {', '.join(group)} in {wait:g}s"))
        for task_id in group:
            member = self.tasks[task_id]
            member.restarting = True
            member.restart_pending = True
            self._publish(ev.state_event(self.run_id, task_id, ev.RESTARTING, host=member.spec.host,
                                         restarts=member.restarts, reason=f"{rt.spec.task_id} {why}"))
        self._pending_restarts.append((group, time.time() + wait))
        self._after(wait, lambda: self._restart_now(group))
        self.write_state()

    def _restart_now(self, group: list[str]) -> None:
        if self._finishing:
            return  # a detach keeps it in state.json for `attach`; a teardown makes it moot
        if self._launching:
            # a task failed while `launch` still starts the others (a ps dying at once): starting its
            # group now would race the launch's own start of a member that has not started yet (the
            # agent refuses a second start, and the launch failed), and the member it then starts
            # would not be stopped. After the launch, the group is stopped and started as usual.
            self._after_launch.append(group)
            return
        self._pending_restarts = [(g, due) for g, due in self._pending_restarts if g != group]
        members = [self.tasks[t] for t in group]
        for rt in members:
            if not rt.final:
                rt.expected_stop = True
            rt.restarts += 1
            rt.incarnation += 1
            rt.restart_pending = False
        threading.Thread(target=self._restart_blocking, args=(members,), name="restart", daemon=True).start()

    def _restart_blocking(self, members: list[TaskRuntime]) -> None:
        """Stop the group, then start it, unless the job ended meanwhile (the stop may take a task's
        whole grace period, and a job that ended must not start anything again)."""
        try:
            running = {h: [rt.spec.slug for rt in members if rt.spec.host == h and rt.expected_stop]
                       for h in self.sessions}
            grace = max(rt.spec.grace_seconds for rt in members)
            self._on_hosts(lambda s: s.stop_agents(running[s.name], grace), [h for h, v in running.items() if v])
            with self._start_gate:  # either the job ended before this start, or its end waits for it
                go = self._end is None  # a detach (also _finishing) still lets the restart happen
                if go:
                    self._starting += 1
                    for rt in members:
                        rt.launch_pending = True
            if go:
                try:
                    self._start_tasks(members)
                except BaseException:
                    for rt in members:
                        rt.launch_pending = False
                    raise
                finally:
                    self._call(self._start_done)
        except Exception as exc:
            err = exc
            self._call(lambda: self._finish(ev.JOB_FAILED, f"restart failed: {err}"))

    def _start_done(self) -> None:
        with self._start_gate:
            self._starting -= 1
        self._maybe_end_job()

    def _maybe_end_job(self) -> None:
        """Publish a decided end once no restart is starting agents and every agent a restart
        launched has reported its task running (or ended): its events then precede the end."""
        if self._end is None or self._ended or self._starting:
            return
        if not any(rt.launch_pending for rt in self.tasks.values()):
            self._end_job()

    def _start_tasks(self, members: list[TaskRuntime]) -> None:
        """Start ``members`` role by role in START_ORDER, hosts in parallel within a role."""
        for role in START_ORDER:
            group = [rt for rt in members if rt.spec.role == role]
            hosts = sorted({rt.spec.host for rt in group})
            if not group:
                continue

            def work(session: HostSession, group: list[TaskRuntime] = group) -> None:
                self._start_on(session, [rt for rt in group if rt.spec.host == session.name])

            self._on_hosts(work, hosts)

    def _maybe_running(self) -> None:
        if self._finishing or self.job_state == ev.JOB_RUNNING:
            return
        if all(rt.state == ev.RUNNING or rt.final for rt in self.tasks.values()):
            self.job_state = ev.JOB_RUNNING
            self._publish(ev.job_event(self.run_id, ev.JOB_RUNNING, ""))
            self.write_state()  # `runs` and `status` of a run without events read the job state here

    def _down_requested(self) -> bool:
        return (self.rundir.path / DOWN_MARKER).exists()

    # -- manual actions ---------------------------------------------------------------------------

    def _manual_restart(self, task_id: str) -> None:
        rt = self.tasks.get(task_id)
        if rt is None or self._finishing or rt.restarting:
            return
        self._schedule_restart(rt, "restart requested", delay=0.0)

    def _manual_stop(self, task_id: str) -> None:
        rt = self.tasks.get(task_id)
        if rt is None or rt.final or self._finishing:
            return
        rt.expected_stop = True
        session = self.sessions[rt.spec.host]
        self._executors[rt.spec.host].submit(session.stop_agents, [rt.spec.slug], rt.spec.grace_seconds)

    # -- links -----------------------------------------------------------------------------------------

    def _on_stream_closed(self, host: str, stream: LineStream, why: str = "event stream lost") -> None:
        if self._finishing or self._done.is_set() or self._streams.get(host) is not stream:
            return
        self._host_up[host] = False
        del self._streams[host]  # its late on_close must not count as a second loss
        self._publish(ev.host_event(self.run_id, host, "unreachable", f"{why}; reconnecting"))
        self._executors[host].submit(stream.close)  # off the loop: closing may wait for its reader
        self._executors[host].submit(self._reconnect, host, 1.0)

    def _ping_streams(self) -> None:
        """Tell every follower the launcher still reads it; on its own thread, as a send into a
        dead link may block. Without pings a partitioned host's follower would keep the lease fresh."""
        while not self._done.wait(PING_SECONDS):
            for host, stream in list(self._streams.items()):
                with self._send_locks[host]:  # never inside a request line
                    stream.send(b"\n")

    def _check_silence(self) -> None:
        """Treat a stream that sent nothing, not even a heartbeat, for STREAM_SILENCE_SECONDS as lost."""
        if self._finishing:
            return
        now = time.monotonic()
        for host, stream in list(self._streams.items()):
            silent = now - self._last_heard.get(host, now)
            if self._host_up[host] and silent > STREAM_SILENCE_SECONDS:
                self._on_stream_closed(host, stream, f"no heartbeat for {silent:.0f}s")

    def _reconnect(self, host: str, delay: float) -> None:
        """On the host's thread: reconnect with back-off; the loop then resumes the stream."""
        session = self.sessions[host]
        while not self._finishing and not self._done.is_set():
            time.sleep(delay)
            try:
                session.host.close()
                session.host.connect()
                if host in self._undetach:
                    session.set_detached(False)
                    self._undetach.discard(host)
            except HostGone as exc:  # e.g. the Slurm allocation ended: the job cannot go on
                self._call(functools.partial(self._finish, "Failed", str(exc)))
                return
            except HostError:
                delay = min(delay * 2, RECONNECT_MAX_DELAY)
                continue
            self._call(functools.partial(self._resume_stream, host, delay))
            return

    def _resume_stream(self, host: str, delay: float) -> None:
        """On the loop: follow the host's agents again from the offsets already received."""
        if self._finishing:
            return
        try:
            self._start_follower(host)
        except HostError:
            self._executors[host].submit(self._reconnect, host, min(delay * 2, RECONNECT_MAX_DELAY))
            return
        self._host_up[host] = True
        self._publish(ev.host_event(self.run_id, host, "up", "reconnected"))

    # -- the end -----------------------------------------------------------------------------------------

    def _finish(self, state: str, reason: str) -> None:
        """Decide the job's end: nothing restarts from here on. The end event and the teardown wait
        for a restart whose start is under way, so that no task starts after the job's end event."""
        with self._start_gate:
            if self._finishing:
                return
            self._finishing = True
            self._end = (state, reason)
            busy = self._starting > 0
        if busy or any(rt.launch_pending for rt in self.tasks.values()):
            self._after(DRAIN_SECONDS, self._end_job)  # an agent that never reports must not hold the end
        else:
            self._end_job()

    def _end_job(self) -> None:
        if self._ended or self._end is None:
            return
        self._ended = True
        state, reason = self._end
        self.job_state = state
        self.job_reason = reason
        self._publish(ev.job_event(self.run_id, state, reason))
        for rt in self.tasks.values():
            if not rt.final:
                rt.expected_stop = True
        threading.Thread(target=self._teardown_blocking, args=(state,), name="teardown", daemon=True).start()

    def _teardown_blocking(self, state: str) -> None:
        by_host = {h: [rt.spec.slug for rt in self.tasks.values() if rt.spec.host == h] for h in self.sessions}
        grace = max((rt.spec.grace_seconds for rt in self.tasks.values()), default=10.0)
        try:
            self._on_hosts(lambda s: s.stop_agents(by_host[s.name], grace, exit_agent=True))
        except Exception as exc:
            self._notice(f"stopping tasks: {exc}")
        if not self._all_final.wait(DRAIN_SECONDS):
            self._call(self._mark_unreported_stopped)
        self._sweep_all()
        self._call(lambda: self._close(state))

    def _sweep_all(self) -> None:
        def sweep(session: HostSession) -> None:
            left = session.sweep(kill=True)
            if left:
                self.leftovers[session.name] = left

        try:
            self._on_hosts(sweep)
        except Exception as exc:
            self._notice(f"checking for leftover processes: {exc}")

    def _mark_unreported_stopped(self) -> None:
        for task_id, rt in self.tasks.items():
            if not rt.final:
                rt.state = ev.STOPPED
                self._publish(ev.state_event(self.run_id, task_id, ev.STOPPED, host=rt.spec.host, restarts=rt.restarts,
                                             reason="stopped (no final event received)"))

    def _close(self, outcome: str) -> None:
        for stream in self._streams.values():
            stream.close()
        self.outcome = outcome
        self.write_state()
        for feed in self._feeds:
            feed.close()
        for ex in self._executors.values():
            ex.shutdown(wait=False)
        self._done.set()

    def _detach(self) -> None:
        if self._finishing:
            return
        self._finishing = True
        self.detached = True

        def mark_and_close() -> None:
            try:
                self._on_hosts(lambda s: s.set_detached(True))
            finally:
                self._call(lambda: self._close("detached"))

        threading.Thread(target=mark_and_close, name="detach", daemon=True).start()

    # -- state.json --------------------------------------------------------------------------------------

    def write_state(self) -> None:
        state = {
            "run_id": self.run_id,
            "profile": str(self.profile.path),
            "overrides": {"set": list(self.profile.overrides.sets), "args": list(self.profile.overrides.args)},
            "name": self.profile.name,
            "strategy": self.profile.strategy,
            "job_state": self.job_state,
            "job_reason": self.job_reason,
            "job_restarts": self.job_restarts,
            "outcome": self.outcome,
            "detached": self.detached,
            "launcher_pid": os.getpid(),
            "updated": time.time(),
            "hosts": {h: {"config": host_to_json(s.config), "base_dir": s.base_dir, "python": s.python,
                          "outputs_dir": s.outputs_dir}
                      for h, s in self.sessions.items()},
            "tasks": {t: {"host": rt.spec.host, "slug": rt.spec.slug, "address": rt.spec.address,
                          "port": rt.port, "pid": rt.pid, "state": rt.state, "restarts": rt.restarts,
                          "incarnation": rt.incarnation, "python": rt.spec.python}
                      for t, rt in self.tasks.items()},
            "offsets": self._offsets,
            "pending_restarts": [{"tasks": g, "due": due} for g, due in self._pending_restarts],
            "lost_events": self.lost_events,
        }
        self.rundir.write_state(state)
