"""The controller of one job: the coordinator that owns the plan and the supervisor's parts.

It holds the job's plan (a value it may replace: ``replace_plan``), each task's runtime and the
job's counters, and composes the parts (core.py lists them): the loop and the publisher, the host
links, the task state machine that carries out the restart policy's decisions, the teardown and
the stall capture. Each part sees the coordinator only through the ``Protocol`` of what it uses.
It launches or resumes the job and is what the CLI, the TUI (through JobControl) and the control
socket call.
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Callable, Iterable, Mapping
from concurrent.futures import Future
from typing import Any

from launcher import events as ev
from launcher.agent.leaving import shown
from launcher.agent.stackmodel import TaskStacks
from launcher.events import Event
from launcher.model import Plan, Profile
from launcher.profile.overrides import mask_secrets
from launcher.protocol.agentlines import AgentOp
from launcher.protocol.controllines import Launched
from launcher.remote.launchclock import LaunchClock
from launcher.remote.session import HostSession
from launcher.remote.storage import probe_outputs
from launcher.rundir import RunDir
from launcher.runstate import HostRecord, RunState, SlurmJobRecord, TaskRecord, host_to_json
from launcher.supervise.attachstate import arm_watchdog, fold_task_states
from launcher.supervise.checkpoints import CheckpointBook, CheckpointKeeper
from launcher.supervise.core import Feed, LineFeed, Loop, Publisher
from launcher.supervise.gpudrain import GpuFaults
from launcher.supervise.hostjoin import HostAdder
from launcher.supervise.hostloss import HostLoss
from launcher.supervise.hostworker import HostWorker
from launcher.supervise.lifecycle import Lifecycle, TaskRuntime
from launcher.supervise.links import AGENT_REQUEST_SECONDS, HostLinks
from launcher.supervise.outputpolicy import OutputPolicy
from launcher.supervise.regrow import Growth
from launcher.supervise.restarts import Restarts
from launcher.supervise.slurmlife import SlurmLife
from launcher.supervise.stackcapture import StallCapture, capture_stacks
from launcher.supervise.teardown import Teardown
from launcher.telemetry.causes import OutputTails, PeerIndex
from launcher.telemetry.watchdog import Watchdog

__all__ = ["Feed", "Supervisor", "TaskRuntime"]


def boot_id() -> str:
    """This boot of this machine (monotonic times recorded under another boot mean nothing)."""
    try:
        with open("/proc/sys/kernel/random/boot_id", encoding="ascii") as f:
            return f.read().strip()
    except OSError:
        return ""


class Supervisor:
    """Runs one job. ``launch()`` starts it; ``wait()`` blocks until it ended."""

    def __init__(self, plan: Plan, rundir: RunDir, sessions: dict[str, HostSession], ports: dict[str, int], *,
                 on_notice: Callable[[str], None] | None = None) -> None:
        self.plan = plan
        self.rundir = rundir
        self.run_id = rundir.run_id
        self.sessions = sessions
        self.ports = ports
        #: each task's profiler server port (set by `up` from the preflight; kept in state.json)
        self.profiler_ports: dict[str, int] = {}
        #: the launch's phase stamps (set by `up`); a supervisor that took the run over keeps the record it read
        self.launch_clock: LaunchClock | None = None
        self.launch_record: dict[str, Any] = {}
        #: the Slurm job `up` submitted this run as (kept in state.json); None: not submitted
        self.slurm_job: SlurmJobRecord | None = None
        self._notice = on_notice or (lambda _msg: None)
        rundir.on_problem = self._notice  # a full disk on the launcher is told, never fatal
        self.tasks: dict[str, TaskRuntime] = {t.task_id: TaskRuntime(t, ports[t.task_id]) for t in plan.tasks}
        self.life = Lifecycle(lambda: self.tasks)  # the one writer of the tasks' and the job's phases
        self.leftovers: dict[str, list[dict[str, Any]]] = {}
        self.outcome: str | None = None  # Succeeded / Failed / Stopped, once wait() returns
        #: clients that follow the job over the control socket (the dashboard, --no-tui, attach)
        self.clients = 0
        self._launch_failed = False
        self.workers = {h: HostWorker(f"host-{h}") for h in sessions}
        self.tails = OutputTails()  # each task's last output lines: the cause of a failure
        self.peers = self._peer_index()
        self.watchdog = Watchdog({}, [], self.profile.straggler_ratio)
        self.outputs = OutputPolicy(self.run_id, self.profile.log_policies, {})
        self._configure_watch()
        self.loop = Loop(self.run_id, self._notice)
        self.publisher = Publisher(rundir)
        self.links = HostLinks(self, sessions)
        self.end = Teardown(self)
        self.restarts = Restarts(self)
        self.hosts = HostLoss(self, self.links, self.restarts)  # hosts lost, drained or given notice: moves, shrinks
        self.gpus = GpuFaults(self)  # GPUs that err: named on their tasks, their host drained to a spare
        self.stall_stacks = StallCapture(self)  # every task's stacks once per stall episode
        self.checkpoints = CheckpointKeeper(self)  # the tasks' checkpoints, their copies, one per restart
        self.growth = Growth(self, self.hosts)  # lost hosts re-admitted, roles grown back, resizes
        self.hosts.targets = self.growth.targets
        self.hosts.resized = self.growth.record
        self.slurm = SlurmLife(self)  # a Slurm job's requeue and time limit
        self.adder = HostAdder(self, self.hosts, self.growth)  # hosts added to the running job

    # -- the plan, a value ----------------------------------------------------------------------------

    @property
    def profile(self) -> Profile:
        return self.plan.profile

    @property
    def job_state(self) -> str:
        return str(self.life.job)

    @property
    def job_reason(self) -> str:
        return self.life.job_reason

    @property
    def job_restarts(self) -> int:
        return self.life.job_restarts

    def replace_plan(self, plan: Plan, ports: Mapping[str, int] | None = None) -> None:
        """Take ``plan`` as the job's plan from now on (on the loop, or before the launch): the
        handling of a lost host moves tasks between hosts this way. A task kept keeps its runtime
        (state, restarts, incarnation) under its new spec and port; a new task is pending; a task
        the plan no longer has is dropped. What is derived from the plan is derived again here, and
        the parts read the plan and the tasks from here each time: none keeps the old plan."""
        missing = sorted({t.host for t in plan.tasks} - set(self.sessions))
        if missing:
            raise ValueError(f"the new plan places tasks on hosts with no session: {', '.join(missing)}")
        self.ports.update(ports or {})
        tasks: dict[str, TaskRuntime] = {}
        for spec in plan.tasks:
            rt = self.tasks.get(spec.task_id) or TaskRuntime(spec, self.ports[spec.task_id])
            rt.spec, rt.port = spec, self.ports[spec.task_id]
            tasks[spec.task_id] = rt
        self.plan = plan
        self.tasks = tasks
        self.peers = self._peer_index()
        self._configure_watch()

    def _peer_index(self) -> PeerIndex:
        return PeerIndex((t.task_id, t.address, self.ports[t.task_id]) for t in self.plan.tasks)

    def _configure_watch(self) -> None:
        tasks = self.plan.tasks
        self.watchdog.stall_seconds = {t.task_id: t.stall_seconds for t in tasks}
        self.watchdog.workers = [t.task_id for t in tasks if t.role == "worker"]
        self.watchdog.straggler_ratio = self.profile.straggler_ratio
        self.watchdog.straggler_seconds = self.profile.straggler_seconds
        self.outputs.configure(self.profile.log_policies, {t.task_id: t.on_nan for t in tasks})

    # -- what the parts use ---------------------------------------------------------------------------

    def call(self, fn: Callable[[], None]) -> None:
        self.loop.call(fn)

    def after(self, delay: float, fn: Callable[[], None]) -> None:
        self.loop.after(delay, fn)

    def publish(self, event: Event, line: str | None = None) -> None:
        self.publisher.publish(event, line)

    def publish_many(self, batch: list[tuple[Event, str | None]]) -> None:
        self.publisher.publish_many(batch)

    def notice(self, message: str) -> None:
        self._notice(message)

    def knows(self, task: str) -> bool:
        return task in self.tasks

    @property
    def finishing(self) -> bool:
        """The job's end is decided: nothing restarts from here on."""
        return self.end.finishing

    def finish(self, state: str, reason: str) -> None:
        """On the loop: decide the job's end (a submitted Slurm run's first waits for Slurm's word on
        a requeue: supervise/slurmlife.py)."""
        if not self.end.finishing and self.slurm.holds(state, reason):
            return
        self.end.finish(state, reason)

    def slurm_deciding(self) -> bool:
        """An end waits for Slurm's word on a requeue: no restart starts meanwhile."""
        return self.slurm.asking

    def slurm_holds_failure(self, judge: Callable[[], None]) -> bool:
        return self.slurm.holds_failure(judge)

    def ended(self, state: str, reason: str) -> None:
        self.life.job_to(state, reason)

    def on_events(self, events: Iterable[tuple[Event, str | None]]) -> None:
        self.restarts.on_events(events)

    def ask_agent(self, host: str, request: AgentOp,
                  timeout: float = AGENT_REQUEST_SECONDS) -> dict[str, Any] | None:
        return self.links.ask_agent(host, request, timeout)

    def on_hosts(self, fn: Callable[[HostSession], None], hosts: list[str] | None = None) -> None:
        """Run ``fn`` on each host's thread in parallel; re-raise the first error."""
        futures: list[Future[None]] = [self.workers[h].submit(fn, self.sessions[h])
                                       for h in (hosts if hosts is not None else self.sessions)]
        errors = [f.exception() for f in futures]
        for err in errors:
            if err is not None:
                raise err

    def reachable(self, host: str) -> bool:
        """The host is in the job and its link is up."""
        return self.hosts.reachable(host)

    def in_job(self, host: str) -> bool:
        """The host has not left the job (lost or drained): the teardown reaches for it."""
        return host not in self.hosts.gone

    def spare_hosts(self) -> tuple[str, ...]:
        """The hosts still kept ready to replace a lost one (checkpoint copies go there too)."""
        return tuple(self.hosts.spares)

    def host_link(self, host: str, up: bool, why: str) -> None:
        self.hosts.link_changed(host, up, why)
        if up:
            self.restarts.host_back()
            self.checkpoints.link_back(host)

    def host_returned(self, host: str) -> None:
        if self.hosts.host_returned(host):
            self.growth.host_answered(host)

    # -- what the growth part uses --------------------------------------------------------------------

    def submit(self, host: str, fn: Callable[[], None]) -> None:
        self.workers[host].submit(fn)

    def follow_again(self, host: str, offsets: Mapping[str, int]) -> None:
        """On the loop: a re-admitted host is followed again, from where its old incarnation ended."""
        self.links.readmit(host, offsets)

    def restart_planned(self, group: list[str], why: str) -> None:
        self.restarts.restart_planned(group, why)

    def newest_checkpoint(self) -> float:
        """When the newest checkpoint of any task was written (0: none yet)."""
        book = self.checkpoints.book
        return max((cp.ts for t in self.tasks if (cp := book.newest(t)) is not None), default=0.0)

    def stop_tasks(self, tasks: list[str]) -> None:
        """Stop ``tasks`` on purpose (a resize): their end is planned, never a failure."""
        for task_id in tasks:
            rt = self.tasks[task_id]
            self.life.ask_stop(rt, "resize")
            if self.reachable(rt.spec.host):
                self.workers[rt.spec.host].submit(self.sessions[rt.spec.host].stop_tasks, [rt.spec.slug],
                                                  rt.spec.grace_seconds)

    def resize(self, role: str, count: int, timeout: float = 10.0) -> str | None:
        """The operator's resize (any thread but the loop): why it was refused, or None."""
        return self.growth.resize_request(role, count, timeout)

    def add_host(self, spec: str, timeout: float = 240.0) -> str | None:
        """The operator's add-host (any thread but the loop): why not, or None once it is a spare."""
        return self.adder.request(spec, timeout)

    def host_root(self) -> str | None:
        """Where local hosts keep their run dirs (the run dir's ``hosts``)."""
        return str(self.rundir.path / "hosts")

    def take_host(self, session: HostSession, plan: Plan) -> None:
        """On the loop: a host added to the running job (supervise/hostjoin.py), then followed. The
        dicts other threads iterate are replaced, never changed in place."""
        name = session.name
        self.sessions = {**self.sessions, name: session}
        self.workers = {**self.workers, name: HostWorker(f"host-{name}")}
        self.links.add_host(name)
        self.replace_plan(plan)
        self.links.readmit(name, {})

    def _discover_hosts(self) -> None:
        if self.profile.host_discovery:
            threading.Thread(target=self.adder.discover, args=(self.loop.done,), name="host-discovery",
                             daemon=True).start()

    def on_preempted(self, host: str, why: str) -> None:
        """The host's preemption_notice fired (said again at every poll): drained once."""
        if host in self.hosts.gone or self.finishing:
            return
        why = mask_secrets(shown(why), set(self.plan.profile.secrets))  # an agent's words: never obeyed by a terminal
        self.publish(ev.action_event(self.run_id, "drain", host, why))
        error = self.hosts.drain(host, why)
        if error is not None:
            self.notice(f"preemption notice of host {host}: {error}")

    def drain(self, host: str, reason: str, timeout: float = 10.0) -> str | None:
        """The operator's drain (any thread but the loop): why it was refused, or None."""
        return self.hosts.drain_request(host, shown(reason), timeout)

    @property
    def lost_events(self) -> dict[str, int]:
        return self.links.lost_events

    def close(self, outcome: str) -> None:
        """The teardown is over: close the streams and the feeds, record the outcome, end the loop."""
        outcome = self.slurm.closing(outcome)
        self.links.close_streams()
        self.checkpoints.close()
        self.outcome = outcome
        self.write_state()
        self.publisher.close()
        for worker in self.workers.values():
            worker.shutdown(wait=False)
        self.loop.done.set()

    # -- launch and attach ----------------------------------------------------------------------------

    def launch(self) -> None:
        """Start every task (ps first, chief last). On any failure, stop what started and raise."""
        self.restarts.launching = True
        self.loop.start(self._loop_begins, self._tick)
        self.call(self._announce)
        try:
            self.write_state()
            self.on_hosts(lambda s: self.links.start_follower(s.name))  # each starts its host's agent
            self.restarts.start_tasks(list(self.tasks.values()))
        except BaseException as exc:
            reason = f"launch failed: {exc}"
            self.call(lambda: self.finish(ev.JOB_FAILED, reason))
            self.call(lambda: self._launched(ok=False))
            self.wait()
            raise
        self.call(self._launched)
        self.call(self.write_state)  # on the loop: the streams' offsets change there, never mid-dump
        self.slurm.watch_time_limit()
        self._discover_hosts()
        threading.Thread(target=self._say_storage, name="storage-probe", daemon=True).start()

    def _say_storage(self) -> None:
        """One line on whether the hosts share the outputs dir (where checkpoints usually are)."""
        finding = probe_outputs(self.sessions)
        if finding is not None:
            self.notice(finding.line())

    def _launched(self, ok: bool = True) -> None:
        """The launch has started every task: the restarts that fell due meanwhile go now. A
        launch that failed tells clients nothing here: its job's end (``End``) is their answer."""
        self._launch_failed = not ok
        if ok:
            for line_feed in self.publisher.line_feeds:
                line_feed.put_lines([Launched().line()])
        self.restarts.launched()

    def resume(self, state: RunState, history: list[Event], unreachable: Mapping[str, str] | None = None) -> None:
        """Take over a running job from its state.json (attach): replay ``history`` to the
        subscribers, then follow every host from the offsets the last launcher had reached.
        Hosts in ``unreachable`` (name -> why) are reconnected in the background instead."""
        self.launch_record = dict(state.launch)
        self._resume_tasks(state, history)
        self.links.resume_from(state.offsets, history, state.lost_events)
        gone = self._resume_hosts(state)
        unreachable = {h: why for h, why in (unreachable or {}).items() if h not in gone}
        for feed in self.publisher.feeds:
            for event in history:
                feed.put(event)
        arm_watchdog(self.tasks, self.watchdog, history)
        self.outputs.replay(history)
        self.loop.start(self._loop_begins, self._tick)
        self._follow_again([h for h in self.sessions if h not in unreachable and h not in gone], unreachable)
        self.slurm.watch_time_limit()
        self._discover_hosts()

    def _resume_tasks(self, state: RunState, history: list[Event]) -> None:
        """Each task's runtime, the job's counters and the restarts under way as the last
        supervisor left them (its history has the word on the tasks' later states)."""
        for task_id, info in state.tasks.items():
            rt = self.tasks.get(task_id)
            if rt is not None:
                self.life.restore(rt, info.state, info.restarts, info.incarnation or None, info.pid)
        fold_task_states(self.life, self.tasks, history)
        self.life.restore_job(state.job_state, state.job_restarts)
        for pending in state.pending_restarts:
            self.restarts.resume([t for t in pending.tasks if t in self.tasks], pending.due, pending.counted)
        self.restarts.moved_from.update(state.moved_from)
        self.growth.resized.update({r: n for r, n in state.resize_targets.items() if r in self.plan.profile.roles})
        self.growth.history = list(state.resizes)
        self.checkpoints.book = CheckpointBook.from_json(state.checkpoints)

    def _resume_hosts(self, state: RunState) -> list[str]:
        """The hosts' states and moves as the last supervisor left them; the hosts out of the job,
        which are only watched for their return (then retired)."""
        if state.boot_id == boot_id():  # this machine's monotonic clock still counts from the same zero
            # only for hosts already silent then: another host's time may be hours old (state.json
            # is not written at each line), and counting from it would lose it at once
            silent = {h for h, info in state.host_states.items() if info.state == ev.HOST_UNREACHABLE}
            self.links.heard_at({h: t for h, t in state.last_contact.items() if h in silent})
        gone = self.hosts.resume(state.host_states, state.host_losses, state.moves, state.left_behind, state.spares)
        for host in gone:
            self.links.retire(host)
            self.workers[host].submit(self.links.reconnect, host, 1.0)
        return gone

    def _follow_again(self, reachable: list[str], unreachable: Mapping[str, str]) -> None:
        for name in reachable:
            self.links.start_follower(name)
        for name, why in unreachable.items():
            self.links.reconnect_unreachable(name, why)
        self.call(self.write_state)  # on the loop: the streams' offsets change there, never mid-dump

    def _announce(self) -> None:
        self.publish(ev.job_event(self.run_id, ev.JOB_CREATED, self.profile.name, roles=self.hosts.role_sizes()))
        for rt in self.tasks.values():
            self.publish(ev.state_event(self.run_id, rt.spec.task_id, ev.PENDING, host=rt.spec.host))
        for spare in self.hosts.spares:
            self.publish(ev.host_event(self.run_id, spare, ev.HOST_SPARE, "kept ready to replace a lost host"))

    def _loop_begins(self) -> None:
        threading.Thread(target=self.links.ping_streams, args=(self.loop.done,), name="ping", daemon=True).start()

    def _tick(self) -> None:
        self.links.check_silence()
        self.hosts.tick()
        self.growth.tick()
        self.restarts.watch()

    # -- the operator's actions and the clients -------------------------------------------------------

    def restart_task(self, task_id: str) -> None:
        self.call(lambda: self._acted("restart", task_id, lambda: self.restarts.restart(task_id)))

    def stop_task(self, task_id: str) -> None:
        self.call(lambda: self._acted("stop", task_id, lambda: self.restarts.stop(task_id)))

    def teardown(self, reason: str = "torn down by the user", origin: str = "") -> None:
        """Stop the job on purpose (``down``, the dashboard, a stop signal): it ends Stopped, not
        Failed. ``origin``: where the request came from when not the user's own keys (e.g. "SIGTERM").
        A SIGTERM of a submitted Slurm job that Slurm requeues ends the allocation, not the run."""
        self.stop_job(reason, origin)

    def stop_job(self, reason: str, origin: str = "") -> None:
        self.call(lambda: self._acted("teardown", None, lambda: self.finish(ev.JOB_STOPPED, reason), origin))

    def carry_over(self, previous: RunState) -> None:
        """Before the launch in a requeued job's new allocation: the run's counts as its last
        allocation left them (restarts, the checkpoints it knows); each task starts a new
        incarnation, the plan's size (a resize of the last allocation is not carried)."""
        for task_id, info in previous.tasks.items():
            rt = self.tasks.get(task_id)
            if rt is not None:
                rt.restarts = info.restarts
                rt.incarnation = max(info.incarnation or 0, info.restarts) + 1
        self.life.job_restarts = previous.job_restarts
        self.checkpoints.book = CheckpointBook.from_json(previous.checkpoints)

    def _acted(self, action: str, target: str | None, do: Callable[[], None], origin: str = "") -> None:
        """Record an operator's action in the event stream (the timeline shows it), then do it."""
        if not self.loop.done.is_set() and not (action == "teardown" and self.finishing):
            self.publish(ev.action_event(self.run_id, action, target, origin))
        do()

    def subscribe(self) -> Feed:
        return self.publisher.subscribe()

    def wait(self, timeout: float | None = None) -> str | None:
        self.loop.done.wait(timeout)
        return self.outcome

    def loop_ended(self) -> bool:
        return self.loop.done.is_set()

    def follow_from_now(self, timeout: float = 10.0) -> tuple[LineFeed, int, bool] | None:
        """A client's cut of the job (the follow socket): a line feed of every event published
        from now on (starting with the event lines a full disk holds back, which are in no file
        yet), the size of events.jsonl now (the history before the cut) and whether the launch
        is over, all taken on the loop, so nothing falls between history and feed. None when the
        job has ended or its loop did not answer within ``timeout`` (a cut that comes later is
        undone, so no feed is left behind)."""
        answer: list[tuple[LineFeed, int, bool]] = []
        taken = threading.Event()
        lock = threading.Lock()
        gave_up = False

        def cut() -> None:
            with lock:
                if gave_up or self.loop.done.is_set():
                    return
                feed = LineFeed()
                feed.put_lines(self.rundir.held_event_lines())
                self.publisher.line_feeds.append(feed)
                self.clients += 1
                launched = not self.restarts.launching and not self._launch_failed
                answer.append((feed, self.rundir.events_size(), launched))
                taken.set()
            self.write_state()

        self.call(cut)
        deadline = time.monotonic() + timeout
        while not taken.wait(0.2):
            if self.loop.done.is_set() or time.monotonic() > deadline:
                with lock:
                    gave_up = True
                    if not answer:
                        return None
                break
        return answer[0]

    def unfollow(self, feed: LineFeed) -> None:
        """A client left (or fell behind and was dropped)."""

        def drop() -> None:
            if feed in self.publisher.line_feeds:
                self.publisher.line_feeds.remove(feed)
                self.clients -= 1
                if not self.loop.done.is_set():
                    self.write_state()
            feed.close()

        self.call(drop)

    def capture_stacks(self, tasks: list[str] | None = None, native: bool = False,
                       timeout: float = 10.0) -> list[TaskStacks]:
        """Every (or these) task's stacks, asked over the open follow channels (any thread but the loop)."""
        return capture_stacks(self, tasks, native, timeout)

    def write_state(self) -> None:
        self.rundir.write_state(self.run_state().to_json())

    def run_state(self) -> RunState:
        """The job as state.json records it (runstate.py)."""
        profile = self.profile
        return self.slurm.recorded(RunState(
            run_id=self.run_id,
            profile=str(profile.path),
            # a secret given by --set is not kept (a supervisor that takes the run over needs it again)
            overrides_set=[mask_secrets(item, set(profile.secrets)) for item in profile.overrides.sets],
            overrides_args=list(profile.overrides.args),
            name=profile.name,
            strategy=profile.strategy,
            job_state=self.job_state,
            job_reason=self.job_reason,
            job_restarts=self.job_restarts,
            outcome=self.outcome,
            supervisor_pid=os.getpid(),
            clients=self.clients,
            updated=time.time(),
            hosts={h: HostRecord(host_to_json(s.config), s.base_dir, s.python, s.outputs_dir)
                   for h, s in self.sessions.items()},
            tasks={t: TaskRecord(rt.spec.host, rt.spec.slug, rt.spec.address, rt.port, rt.pid, str(rt.phase),
                                 rt.restarts, rt.incarnation, rt.spec.python, self.profiler_ports.get(t))
                   for t, rt in self.tasks.items()},
            offsets=self.links.offsets,
            pending_restarts=self.restarts.pending_records(),
            lost_events=self.lost_events,
            host_states=self.hosts.records(),
            host_losses=self.hosts.losses,
            spares=list(self.hosts.spares),
            moves=self.hosts.moves,
            left_behind=self.hosts.left_behind,
            moved_from=dict(self.restarts.moved_from),
            resize_targets=dict(self.growth.resized),
            resizes=list(self.growth.history),
            checkpoints=self.checkpoints.to_json(),
            last_contact=self.links.last_contact(),
            boot_id=boot_id(),
            roles=self.hosts.role_sizes(),
            launch=self.launch_clock.to_json() if self.launch_clock is not None else self.launch_record,
            slurm=self.slurm_job,
        ))
