"""The executor of the restart policy's decisions.

Task events from the links are published here, in order, and a task's state change goes to the
lifecycle (lifecycle.py, the one writer of the tasks' and the job's phases); what a task's end,
a stall, an output policy or the operator's request means for the job is decided by ``decide``
(decide.py, a pure function) and carried out here: a restart group is marked, told and
scheduled after its back-off, then stopped and started on its own thread unless the job ended
meanwhile; a stop goes to the task's host; the job's end goes to the teardown.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Collection, Iterable, Mapping
from typing import Any, Protocol

from launcher import events as ev
from launcher.events import Event
from launcher.model import START_ORDER, Plan
from launcher.protocol.agentlines import AgentOp, StartRequest
from launcher.remote.launchclock import LaunchClock
from launcher.remote.session import HostSession
from launcher.rundir import DOWN_MARKER, RunDir
from launcher.runstate import PendingRecord
from launcher.supervise.agentspec import SpecSource, agent_spec, task_secrets
from launcher.supervise.checkpoints import CheckpointKeeper
from launcher.supervise.decide import (
    Decision,
    ForgetProgress,
    JobFacts,
    OutputStop,
    PolicyEvent,
    RestartGroup,
    RestartRequested,
    Stalled,
    Stop,
    StopRequested,
    Succeed,
    TaskEnded,
    TaskFacts,
    TrackCrashes,
    decide,
)
from launcher.supervise.gpudrain import GpuFaults
from launcher.supervise.hostworker import HostWorker
from launcher.supervise.lifecycle import JobPhase, Lifecycle, PendingRestart, TaskRuntime
from launcher.supervise.outputpolicy import OutputPolicy
from launcher.supervise.policy import restart_group
from launcher.supervise.replan import lost_after
from launcher.supervise.stackcapture import StallCapture
from launcher.supervise.teardown import Teardown
from launcher.telemetry.causes import OutputTails, PeerIndex, with_cause
from launcher.telemetry.watchdog import Watchdog

#: how often stall and straggler conditions are judged
WATCHDOG_SECONDS = 1.0


class RestartOwner(SpecSource, Protocol):
    """What the task state machine uses of the supervisor."""

    @property
    def plan(self) -> Plan: ...
    @property
    def rundir(self) -> RunDir: ...
    @property
    def launch_clock(self) -> LaunchClock | None: ...
    @property
    def tasks(self) -> Mapping[str, TaskRuntime]: ...
    @property
    def workers(self) -> Mapping[str, HostWorker]: ...
    @property
    def watchdog(self) -> Watchdog: ...
    @property
    def outputs(self) -> OutputPolicy: ...
    @property
    def tails(self) -> OutputTails: ...
    @property
    def peers(self) -> PeerIndex: ...
    @property
    def stall_stacks(self) -> StallCapture: ...
    @property
    def end(self) -> Teardown: ...
    @property
    def life(self) -> Lifecycle: ...
    @property
    def checkpoints(self) -> CheckpointKeeper: ...
    @property
    def gpus(self) -> GpuFaults: ...
    def call(self, fn: Callable[[], None]) -> None: ...
    def after(self, delay: float, fn: Callable[[], None]) -> None: ...
    def publish(self, event: Event, line: str | None = None) -> None: ...
    def publish_many(self, batch: list[tuple[Event, str | None]]) -> None: ...
    def on_hosts(self, fn: Callable[[HostSession], None], hosts: list[str] | None = None) -> None: ...
    def ask_agent(self, host: str, request: AgentOp, timeout: float = ...) -> dict[str, Any] | None: ...
    def write_state(self) -> None: ...
    def finish(self, state: str, reason: str) -> None: ...
    def slurm_deciding(self) -> bool: ...
    def slurm_holds_failure(self, judge: Callable[[], None]) -> bool: ...
    def reachable(self, host: str) -> bool: ...
    def in_job(self, host: str) -> bool: ...


class Restarts:
    """What the policy decides of the tasks' events: restarts after their back-off (each a
    ``PendingRestart`` until carried out), stops, the job's end; stalls judged about once a
    second; the operator's restart and stop."""

    def __init__(self, sup: RestartOwner) -> None:
        self.sup = sup
        #: group restarts scheduled and not carried out yet: kept in state.json so `attach` carries them out
        self.pending: list[PendingRestart] = []
        #: set (on the loop) while `launch` still starts tasks: a restart due meanwhile waits for its end
        self.launching = False
        #: task -> the host it left, until its first running event there (which carries ``moved_from``)
        self.moved_from: dict[str, str] = {}
        self._next_watch = 0.0

    # -- what happens: events in, decisions out -------------------------------------------------------

    def on_events(self, events: Iterable[tuple[Event, str | None]]) -> None:
        """Task and job events from a host's stream, in order. Runs of events that change nothing
        here (metrics, logs: nearly all of them) are published together; a task's state change
        is published and acted on in its place."""
        sup = self.sup
        held: list[tuple[Event, str | None]] = []
        for decoded in events:
            event = with_cause(decoded[0], sup.tails, sup.peers)
            if isinstance(event, ev.StateEvent) and event.state == ev.RUNNING and event.task in self.moved_from:
                event = event.with_data(moved_from=self.moved_from.pop(str(event.task)))
            if event is not decoded[0]:
                decoded = (event, None)
            known = event.task in sup.tasks
            raised = sup.outputs.on_event(event) if known else []
            if isinstance(event, ev.StateEvent) and known:
                sup.publish_many(held)
                held = []
                sup.publish(*decoded)
                self.on_task_state(sup.tasks[str(event.task)], event)
                continue
            held.append(decoded)
            if isinstance(event, ev.SampleEvent) and known:
                faults = sup.gpus.faults_in(event)
                if faults:  # named after the sample that showed them; a drain after both
                    sup.publish_many(held)
                    held = []
                    sup.gpus.act(faults)
            if raised:  # log policies and NaN loss: conditions, maybe the job's end (on_nan = stop)
                held.extend((condition, None) for condition in raised)
                stop = sup.outputs.stop_reason()
                decisions = [] if stop is None else self._decide(OutputStop(stop))
                if decisions:
                    sup.publish_many(held)
                    held = []
                    self._carry_out(decisions)
            if isinstance(event, ev.CheckpointEvent) and known:
                sup.checkpoints.on_event(event)
            if isinstance(event, ev.MetricEvent) and known:
                step = event.step
                if step is not None and sup.tasks[str(event.task)].phase == ev.RUNNING:
                    sup.watchdog.on_step(str(event.task), step, time.monotonic())
        sup.publish_many(held)

    def on_task_state(self, rt: TaskRuntime, event: ev.StateEvent) -> None:
        """A task's state event from its agent, already published."""
        sup = self.sup
        state = event.state
        sup.life.reported(rt, event)
        if state != ev.RUNNING:
            sup.watchdog.forget(rt.spec.task_id)
        if sup.life.launch_reported(rt, state, event.restarts):
            sup.end.maybe_end_job()
        if state == ev.RUNNING:
            if sup.launch_clock is not None:
                sup.launch_clock.stamp(rt.spec.host, "first_running")
            sup.life.restart_over(rt)
            self._maybe_running()
        if state not in ev.FINAL_TASK_STATES:
            return
        sup.write_state()
        if all(t.final for t in sup.tasks.values()):
            sup.end.all_final.set()
        if state == ev.FAILED and sup.slurm_holds_failure(lambda: self._judge_end(rt, event)):
            return  # Slurm taking the job back kills the tasks first: its word decides
        self._judge_end(rt, event)

    def _judge_end(self, rt: TaskRuntime, event: ev.StateEvent) -> None:
        """What the policy makes of a task's end: a restart, a stop, the job's end."""
        sup = self.sup
        state = event.state
        if state == ev.FAILED and self._hold_for_peers(rt):
            return
        facts = self.facts()
        sup.life.end_taken(rt)
        uptime = None if rt.started_at is None else event.ts - rt.started_at  # None: started before us (attach)
        self._carry_out(decide(sup.plan, facts, TaskEnded(
            rt.spec.task_id, state, reason=event.reason, permanent=event.permanent,
            uptime=uptime, no_retry=sup.outputs.no_retry(rt.spec.task_id),
            down_requested=state == ev.STOPPED and (sup.rundir.path / DOWN_MARKER).exists())))

    def _hold_for_peers(self, rt: TaskRuntime) -> bool:
        """A task that failed while a host its recovery group needs does not answer (a mirrored
        worker losing its peer) is not judged yet: no restart is spent and no policy ends the job
        for it. Its group restarts, not counted, once the host answers; if the host is lost, the
        re-plan restarts it instead."""
        sup = self.sup
        if rt.stop_asked is not None or sup.end.finishing:
            return False
        group = [t for t in restart_group(sup.plan.profile.strategy, rt.spec.task_id, sup.tasks) if t in sup.tasks]
        # a PSS chief needs every ps: one whose host does not answer failed it (gRPC keepalive
        # fails its calls within ~10 s), and a chief restarted before that host answers fails again
        needs = group + [t for t in sup.tasks if sup.plan.profile.strategy == "parameter_server"
                         and rt.spec.role == "chief" and t.startswith("ps:")]
        silent = sorted({sup.tasks[t].spec.host for t in needs
                         if sup.in_job(sup.tasks[t].spec.host) and not sup.reachable(sup.tasks[t].spec.host)})
        if not silent:
            return False
        sup.life.schedule(sup.tasks[t] for t in group)
        self.pending.append(PendingRestart(group, time.time(), counted=False, waiting_for=tuple(silent)))
        sup.life.job_to(JobPhase.RESTARTING)
        limit = max(lost_after(sup.plan, h) for h in silent)
        sup.publish(ev.job_event(sup.run_id, ev.JOB_RESTARTING,
                                 f"{rt.spec.task_id} failed while host {', '.join(silent)} does not answer; "
                                 f"{', '.join(group)} restart once it answers, or move when it is lost "
                                 f"(after {limit:g} s without contact)"))
        sup.write_state()
        return True

    def facts(self) -> JobFacts:
        """The job as the policy (decide.py) sees it now."""
        sup = self.sup
        return JobFacts({t: TaskFacts(rt.phase, rt.restarts, rt.exit_code, rt.stop_asked is not None, rt.restart,
                                      list(rt.quick_failures))
                         for t, rt in sup.tasks.items()},
                        sup.life.job, sup.life.job_restarts, sup.end.finishing)

    def _decide(self, event: PolicyEvent) -> list[Decision]:
        return decide(self.sup.plan, self.facts(), event)

    def _carry_out(self, decisions: list[Decision]) -> None:
        """Do what the policy decided, in its order."""
        sup = self.sup
        for decision in decisions:
            if isinstance(decision, TrackCrashes):
                rt = sup.tasks[decision.task]
                sup.life.restart_over(rt)  # a restart carried out ended here, even if it never reached running
                sup.life.track_crashes(rt, decision.quick_failures)
            elif isinstance(decision, ForgetProgress):
                sup.watchdog.forget(decision.task)
            elif isinstance(decision, RestartGroup):
                self._schedule(decision)
            elif isinstance(decision, Stop):
                self._stop(decision.task)
            elif isinstance(decision, Succeed):
                sup.end.finish(ev.JOB_SUCCEEDED, decision.reason)
            else:  # through the supervisor: a Slurm job's requeue may explain the failure
                sup.finish(ev.JOB_FAILED, decision.cause)

    def watch(self) -> None:
        """Judge stalls and stragglers about once a second, only while the job runs."""
        sup = self.sup
        now = time.monotonic()
        if now < self._next_watch or sup.end.finishing or sup.life.job != JobPhase.RUNNING:
            return
        self._next_watch = now + WATCHDOG_SECONDS
        for change in sup.watchdog.check(now):
            sup.publish(ev.condition_event(sup.run_id, change.task, change.condition, change.active, change.reason))
            if change.condition == ev.STALLED:
                sup.stall_stacks.on_condition(change.task, change.active)
            if change.active and change.condition == ev.STALLED:
                self._carry_out(self._decide(Stalled(change.task, change.reason)))

    def restart(self, task_id: str) -> None:
        """The operator's restart of one task (and its group)."""
        self._carry_out(self._decide(RestartRequested(task_id)))

    def stop(self, task_id: str) -> None:
        """The operator's stop of one task."""
        self._carry_out(self._decide(StopRequested(task_id)))

    # -- carrying it out ------------------------------------------------------------------------------

    def _schedule(self, restart: RestartGroup) -> None:
        sup = self.sup
        group = list(restart.tasks)
        why = f"{restart.trigger} {restart.why}"
        sup.life.restart_counted()
        sup.life.job_to(JobPhase.RESTARTING)
        sup.publish(ev.job_event(sup.run_id, ev.JOB_RESTARTING,
                                 f"{why}; restarting {', '.join(group)} in {restart.delay:g}s"))
        for task_id in group:
            member = sup.tasks[task_id]
            sup.life.schedule([member])
            sup.publish(ev.state_event(sup.run_id, task_id, ev.RESTARTING, host=member.spec.host,
                                       restarts=member.restarts, reason=why))
        pending = PendingRestart(group, time.time() + restart.delay)
        self.pending.append(pending)
        sup.after(restart.delay, lambda: self.restart_now(pending))
        sup.write_state()

    def resume(self, group: list[str], due: float, counted: bool = True) -> None:
        """A restart the run's last supervisor had scheduled (state.json): due at the same time (or now)."""
        if not group:
            return
        self.sup.life.schedule(self.sup.tasks[t] for t in group)
        pending = PendingRestart(group, due, counted)
        self.pending.append(pending)
        self.sup.after(max(0.0, due - time.time()), lambda: self.restart_now(pending))

    def pending_records(self) -> list[PendingRecord]:
        """The restarts scheduled and not yet carried out, for state.json."""
        return [PendingRecord(p.tasks, p.due, p.counted) for p in self.pending]

    def moved(self, task: str, from_host: str) -> None:
        """``task`` left ``from_host``: its first running event where it went says so."""
        self.moved_from[task] = from_host

    def restart_planned(self, group: list[str], why: str) -> None:
        """Restart ``group`` now, after a host left the job: its members are already marked; the
        restart counts against neither max_restarts nor backoff_limit."""
        pending = PendingRestart(group, time.time(), counted=False)
        self.pending.append(pending)
        self.sup.write_state()
        self.restart_now(pending)

    def cancel_pending(self, tasks: Collection[str] | None = None) -> None:
        """Drop the restarts scheduled or held that restart any of ``tasks`` (None: all): a host
        left, and the re-plan's restart of these tasks replaces them."""
        def cancelled(pending: PendingRestart) -> bool:
            return tasks is None or any(t in tasks for t in pending.tasks)

        for pending in self.pending:
            if cancelled(pending):
                if pending.counted:  # scheduled, never carried out: it spent nothing
                    self.sup.life.restart_uncounted()
                for task_id in pending.tasks:
                    rt = self.sup.tasks.get(task_id)
                    if rt is not None:
                        self.sup.life.dropped(rt)
        self.pending = [p for p in self.pending if not cancelled(p)]

    def host_back(self) -> None:
        """A host answers again: the restarts held for hosts go now (those whose hosts all answer)."""
        for pending in [p for p in self.pending if p.waiting_for]:
            pending.waiting_for = ()
            self.restart_now(pending)

    def launched(self) -> None:
        """The launch has started every task: the restarts that fell due meanwhile go now."""
        self.launching = False
        for pending in [p for p in self.pending if p.after_launch]:
            pending.after_launch = False
            self.restart_now(pending)

    def restart_now(self, pending: PendingRestart) -> None:
        sup = self.sup
        if sup.end.finishing:
            return  # the job's end makes it moot
        if sup.slurm_deciding():
            sup.after(1.0, lambda: self.restart_now(pending))  # Slurm may be requeueing the job: its word first
            return
        if pending not in self.pending:
            return  # cancelled: a host left the job, and the re-plan restarts what it needs
        # a member that ended on a host the job left cannot start there again: it stays ended
        pending.tasks = [t for t in pending.tasks if t in sup.tasks
                         and not (sup.tasks[t].final and not sup.in_job(sup.tasks[t].spec.host))]
        group = pending.tasks
        down = sorted({sup.tasks[t].spec.host for t in group if not sup.reachable(sup.tasks[t].spec.host)})
        if down:
            # stopping a task of a host that does not answer would hang, and starting its peers
            # without it would fail again: the restart waits for the host, or for its loss
            if not pending.waiting_for:
                pending.waiting_for = tuple(down)
                limit = max(lost_after(sup.plan, h) for h in down)
                sup.life.job_to(JobPhase.RESTARTING)
                sup.publish(ev.job_event(sup.run_id, ev.JOB_RESTARTING,
                                         f"restart of {', '.join(group)} waits for host {', '.join(down)}, which "
                                         f"does not answer (lost after {limit:g} s without contact)"))
            return
        if self.launching:
            # a task failed while `launch` still starts the others (a ps dying at once): starting its
            # group now would race the launch's own start of a member that has not started yet (the
            # agent refuses a second start, and the launch failed), and the member it then starts
            # would not be stopped. After the launch, the group is stopped and started as usual.
            pending.after_launch = True
            return
        self.pending = [p for p in self.pending if p is not pending]
        members = [sup.tasks[t] for t in group if t in sup.tasks]
        for rt in members:
            if not rt.final:
                sup.life.ask_stop(rt, "restart")
            sup.life.carried_out(rt, pending.counted)
        sup.write_state()  # no longer pending: a supervisor that takes the run over must not do it again
        threading.Thread(target=self._restart_blocking, args=(members,), name="restart", daemon=True).start()

    def _restart_blocking(self, members: list[TaskRuntime]) -> None:
        """Stop the group, then start it, unless the job ended meanwhile (the stop may take a task's
        whole grace period, and a job that ended must not start anything again)."""
        sup = self.sup
        try:
            running = {h: [rt.spec.slug for rt in members if rt.spec.host == h and rt.stop_asked is not None]
                       for h in sup.sessions}
            grace = max(rt.spec.grace_seconds for rt in members)
            sup.on_hosts(lambda s: s.stop_tasks(running[s.name], grace), [h for h, v in running.items() if v])
            if sup.end.may_start(members):  # either the job ended before this start, or its end waits for it
                try:
                    # one checkpoint for the whole group, where each member restores from
                    sup.checkpoints.before_start(members)
                    self.start_tasks(members)
                except BaseException:
                    for rt in members:
                        sup.life.launch_failed(rt)
                    raise
                finally:
                    sup.call(sup.end.start_done)
        except Exception as exc:
            err = exc
            sup.call(lambda: sup.finish(ev.JOB_FAILED, f"restart failed: {err}"))

    def start_tasks(self, members: list[TaskRuntime]) -> None:
        """Start ``members`` role by role in START_ORDER, hosts in parallel within a role."""
        for role in START_ORDER:
            group = [rt for rt in members if rt.spec.role == role]
            hosts = sorted({rt.spec.host for rt in group})
            if not group:
                continue

            def work(session: HostSession, group: list[TaskRuntime] = group) -> None:
                self.start_on(session, [rt for rt in group if rt.spec.host == session.name])

            self.sup.on_hosts(work, hosts)

    def start_on(self, session: HostSession, rts: list[TaskRuntime]) -> None:
        """Write the specs of ``rts`` and start them through the host's agent: as a request on the
        open follow channel where there is one (no SSH exec, no interpreter to boot), else with
        the `start` verb; one round trip either way."""
        secrets = {rt.spec.slug: task_secrets(self.sup, rt) for rt in rts}
        specs = {rt.spec.slug: agent_spec(self.sup, rt).to_dict() for rt in rts}
        secrets = {slug: env for slug, env in secrets.items() if env}
        request = StartRequest(tuple(specs), secrets, specs)
        clock = self.sup.launch_clock
        if clock is not None:
            clock.stamp(session.name, "start_sent")
        answer = self.sup.ask_agent(session.name, request)
        if answer is None:
            session.start_tasks(request)
        else:
            session.started(answer, list(specs))
        if clock is not None:
            clock.stamp(session.name, "spawned")

    def _maybe_running(self) -> None:
        sup = self.sup
        if sup.end.finishing or sup.life.job == JobPhase.RUNNING:
            return
        if all(rt.phase == ev.RUNNING or rt.final for rt in sup.tasks.values()):
            sup.life.job_to(JobPhase.RUNNING)
            sup.publish(ev.job_event(sup.run_id, ev.JOB_RUNNING, ""))
            sup.write_state()  # `runs` and `status` of a run without events read the job state here

    def _stop(self, task_id: str) -> None:
        rt = self.sup.tasks[task_id]
        self.sup.life.ask_stop(rt, "stop")
        session = self.sup.sessions[rt.spec.host]
        self.sup.workers[rt.spec.host].submit(session.stop_tasks, [rt.spec.slug], rt.spec.grace_seconds)
