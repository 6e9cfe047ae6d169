"""The supervisor's part for a job that grows back: lost hosts re-admitted, resizes carried out.

* **Re-admission.** A lost host that answers again is first retired (hostloss.py: the agent stops
  what is left of its old incarnation and marks the host). Once ``readmit_after_seconds`` have
  passed since its loss, it gets a fresh preflight (the agent uploaded again, python, TensorFlow,
  workdir and scripts of one task of each role as a move would place it there); a host that fails
  it is skipped with one line. Then the supervisor lifts the host's mark with a new incarnation
  token (``HostSession.readmit``; each token works once, so nothing of the old incarnation can
  run there again), follows it from where the old incarnation's events end, and keeps it as a
  spare.
* **Growing.** Each tick, ``growth.decide_grow`` says whether a role below its target grows and
  onto which host; this part places the tasks and starts them, alone (a ParameterServerStrategy
  worker back at its own address, a custom task) or with a planned restart of the cluster from
  one checkpoint. Neither counts as a failure or a restart.
* **Resize.** ``distlaunch resize RUN worker=N`` sets a role's target; a smaller one stops the
  highest-index tasks on purpose (parameter_server and custom: nothing else restarts, the tasks
  stay in the plan as ``stopped``; multi_worker_mirrored: a planned restart without them).
Each change of size is one ``resize`` event and one line.
"""

from __future__ import annotations

import dataclasses
import functools
import secrets
import threading
import time
from collections.abc import Callable, Mapping
from typing import Any, Protocol

from launcher import events as ev
from launcher.errors import HostError
from launcher.model import Plan, TaskSpec
from launcher.placement import drop_tasks, is_rehearsal, move_tasks, rehearsal
from launcher.plan import place_task, tf_address
from launcher.remote.session import HostSession
from launcher.remote.taskcheck import describe_all, host_checks
from launcher.supervise.growth import Grow, GrowRoom, Hold, check_target, decide_grow, decide_shrink, targets_of
from launcher.supervise.hostloss import PORTS_PER_TASK, HostLoss, HostState
from launcher.supervise.lifecycle import Lifecycle, TaskRuntime
from launcher.supervise.replan import live_size, recovery_set


class GrowOwner(Protocol):
    """What the growth part uses of the supervisor."""

    @property
    def run_id(self) -> str: ...
    @property
    def plan(self) -> Plan: ...
    @property
    def tasks(self) -> Mapping[str, TaskRuntime]: ...
    @property
    def sessions(self) -> Mapping[str, HostSession]: ...
    @property
    def life(self) -> Lifecycle: ...
    @property
    def finishing(self) -> bool: ...
    @property
    def job_state(self) -> str: ...
    @property
    def profiler_ports(self) -> dict[str, int]: ...
    def call(self, fn: Callable[[], None]) -> None: ...
    def publish(self, event: ev.Event, line: str | None = None) -> None: ...
    def notice(self, message: str) -> None: ...
    def write_state(self) -> None: ...
    def replace_plan(self, plan: Plan, ports: Mapping[str, int] | None = None) -> None: ...
    def submit(self, host: str, fn: Callable[[], None]) -> None: ...
    def follow_again(self, host: str, offsets: Mapping[str, int]) -> None: ...
    def restart_planned(self, group: list[str], why: str) -> None: ...
    def newest_checkpoint(self) -> float: ...
    def stop_tasks(self, tasks: list[str]) -> None: ...


#: re-admissions of one host refused in a row before it is no longer tried
READMIT_TRIES = 5
#: the least wait between two tries (readmit_after_seconds where longer)
READMIT_RETRY_MIN_S = 30.0


class Growth:
    def __init__(self, sup: GrowOwner, hosts: HostLoss) -> None:
        self.sup = sup
        self.hosts = hosts
        #: role -> the operator's target (``resize``)
        self.resized: dict[str, int] = {}
        #: hosts that answered again after their loss and were retired: candidates for re-admission
        self.returned: set[str] = set()
        self._busy: set[str] = set()  # hosts whose re-admission is under way
        #: host -> (re-admissions refused so far, monotonic time of the next try)
        self._refused: dict[str, tuple[int, float]] = {}
        self.last_grow: float | None = None  # monotonic
        self.started_at = time.time()  # when the cluster last (re)started: at-checkpoint counts from here
        self.growing = False
        #: why the next grow onto a host happens (``host c re-admitted after 300 s``)
        self.why: dict[str, str] = {}
        self.asked = False
        self.hold_said = ""
        #: every resize so far (state.json's ``resizes``): role, before, after, why, ts
        self.history: list[dict[str, Any]] = []

    # -- re-admission ---------------------------------------------------------------------------------

    def host_answered(self, host: str) -> None:
        """On any thread: a lost host answered again and was told the run left it."""
        if self.sup.plan.profile.readmit_after_seconds > 0:
            self.sup.call(lambda: self.returned.add(host))

    def tick(self) -> None:
        """On the loop: re-admit the hosts whose cooldown is over; grow where the policy says."""
        sup = self.sup
        if sup.finishing:
            return
        cooldown = sup.plan.profile.readmit_after_seconds
        for host in sorted(self.returned - self._busy):
            state = self.hosts.states[host]
            if state.state != ev.HOST_LOST:
                self.returned.discard(host)
                continue
            waited = time.time() - state.since
            if self._refused.get(host, (0, 0.0))[1] > time.monotonic():
                continue  # refused last time: tried again once its wait is over
            if cooldown > 0 and waited >= cooldown:
                self._busy.add(host)
                sup.submit(host, functools.partial(self._readmit, host, waited))
        if not self.growing:
            self._grow()

    def _readmit(self, host: str, waited: float) -> None:
        """On the host's thread: a fresh preflight, then the mark lifted for a new incarnation."""
        sup = self.sup
        session = sup.sessions[host]
        try:
            problems = preflight_again(sup.plan, host, session)
        except HostError as exc:
            problems = [str(exc)]
        if problems:
            line = f"host {host} answers again but is not re-admitted: {problems[0]}"
            sup.call(lambda: self._skipped(host, line))
            return
        token = f"{sup.run_id}:{host}:{secrets.token_hex(8)}"
        try:
            offsets = session.readmit(token)
        except HostError as exc:
            line = f"host {host} answers again but is not re-admitted: {exc}"
            sup.call(lambda: self._skipped(host, line))
            return
        sup.call(lambda: self._readmitted(host, waited, token, offsets))

    def _skipped(self, host: str, line: str) -> None:
        """A re-admission refused (its preflight failed: a full disk, a missing Python): tried again
        after another cooldown (at least ``READMIT_RETRY_MIN_S``), up to ``READMIT_TRIES`` times."""
        self._busy.discard(host)
        tries = self._refused.get(host, (0, 0.0))[0] + 1
        if tries >= READMIT_TRIES:
            self.returned.discard(host)
            self._refused.pop(host, None)
            line += f"; refused {tries} times, not tried again unless it is lost and answers again"
        else:
            wait = max(self.sup.plan.profile.readmit_after_seconds, READMIT_RETRY_MIN_S)
            self._refused[host] = (tries, time.monotonic() + wait)
            line += f"; tried again in {wait:.0f} s"
        self.sup.notice(line)
        self.sup.publish(ev.host_event(self.sup.run_id, host, ev.HOST_LOST, line))

    def _readmitted(self, host: str, waited: float, token: str, offsets: Mapping[str, int]) -> None:
        """On the loop: the host is a spare again, followed from where its old incarnation ended."""
        self._busy.discard(host)
        self.returned.discard(host)
        self._refused.pop(host, None)
        if self.sup.finishing:
            return
        hosts = self.hosts
        hosts.gone.discard(host)
        hosts.left_behind.pop(host, None)
        if host not in hosts.spares:
            hosts.spares.append(host)
        said = f"re-admitted after {waited:.0f} s as a new incarnation ({token.rsplit(':', 1)[-1]})"
        hosts.states[host] = HostState(ev.HOST_SPARE, said, time.time())
        self.sup.publish(ev.host_event(self.sup.run_id, host, ev.HOST_SPARE, said))
        self.why[host] = f"host {host} re-admitted after {waited:.0f} s"
        self.sup.follow_again(host, offsets)
        self.sup.notice(f"host {host} {said}; it is a spare again")
        self.sup.write_state()

    # -- growing --------------------------------------------------------------------------------------

    def targets(self) -> dict[str, int]:
        return targets_of(self.sup.plan, self.resized)

    def room(self) -> GrowRoom:
        sup, hosts = self.sup, self.hosts
        usable = [h for h in sup.sessions if hosts.reachable(h)]
        spares = tuple(s for s in hosts.spares if s in usable)
        own = tuple(h for h in usable if h not in spares)
        since = None if self.last_grow is None else time.monotonic() - self.last_grow
        left = {t: sup.plan.task(t).host for t in hosts.left if t in sup.tasks}
        return GrowRoom(own + spares, left, self.targets(), since, sup.newest_checkpoint() > self.started_at,
                        self.asked, spares)

    def _grow(self) -> None:
        sup = self.sup
        if self.growing or self.hosts.under_way is not None or sup.job_state != ev.JOB_RUNNING:
            return
        decision = decide_grow(sup.plan, self.room())
        self.asked = False
        if isinstance(decision, Hold):
            if decision.why != self.hold_said:
                self.hold_said = decision.why
                sup.notice(decision.why)
            return
        if not isinstance(decision, Grow):
            return
        self.hold_said = ""
        self.growing = True
        self.last_grow = time.monotonic()
        reason = next((self.why.pop(h) for _, h in decision.placements if h in self.why), "")
        if not reason:
            reason = (f"resized to {self.targets()[decision.role]}" if decision.role in self.resized
                      else "back to its planned count")
        in_place = [t for t, h in decision.placements if t in sup.tasks and sup.plan.task(t).host == h]
        if not decision.restart and len(in_place) == len(decision.placements):
            self._start_in_place(decision, reason)
            return
        self._replan(decision, reason)

    def _took(self, hosts: set[str]) -> None:
        for host in hosts:
            if host in self.hosts.spares:
                self.hosts.spares.remove(host)
                self.hosts.states[host] = HostState(ev.HOST_UP, "took a task of a grow", time.time())
                self.sup.publish(ev.host_event(self.sup.run_id, host, ev.HOST_UP, "took a task of a grow"))

    def _start_in_place(self, decision: Grow, reason: str) -> None:
        """The tasks start alone where the plan has them (the coordinator knows their address)."""
        sup = self.sup
        tasks = [t for t, _ in decision.placements]
        for task in tasks:
            self.hosts.left.pop(task, None)
            # a new incarnation of the host numbers the task's events afresh: the numbers its old
            # incarnation reached must not make the new one's first events look like duplicates
            self.hosts.links.forget_task(task)
        self._took({h for _, h in decision.placements})
        sup.life.schedule([sup.tasks[t] for t in tasks])
        self._said(decision, reason, tasks)
        sup.restart_planned(tasks, f"{decision.role} {decision.before} -> {decision.after}: {reason}")
        self.growing = False

    def _replan(self, decision: Grow, reason: str) -> None:
        """Place the tasks (a port each on its host), then restart the cluster with them."""
        sup = self.sup
        by_host: dict[str, list[str]] = {}
        for task, host in decision.placements:
            by_host.setdefault(host, []).append(task)
        picked: dict[str, list[int]] = {}
        lock = threading.Lock()

        def pick(host: str, tasks: list[str]) -> None:
            try:
                ports = sup.sessions[host].pick_ports(PORTS_PER_TASK * len(tasks))
            except HostError as exc:
                err = str(exc)
                sup.call(lambda: self._failed(f"{decision.role} could not grow onto host {host}: {err}"))
                return
            with lock:
                picked[host] = ports
                done = len(picked) == len(by_host)
            if done:
                sup.call(lambda: self._apply(decision, reason, by_host, picked))

        for host, tasks in by_host.items():
            sup.submit(host, functools.partial(pick, host, tasks))

    def _failed(self, line: str) -> None:
        self.growing = False
        self.sup.notice(line)

    def _apply(self, decision: Grow, reason: str, by_host: Mapping[str, list[str]],
               picked: Mapping[str, list[int]]) -> None:
        sup = self.sup
        self.growing = False
        if sup.finishing:
            return
        spares = set(self.hosts.spares)
        if self.hosts.under_way is not None or sup.job_state != ev.JOB_RUNNING or any(
                (h not in spares and h not in (t.host for t in sup.plan.tasks)) or not self.hosts.reachable(h)
                for h in by_host):
            # a move, a loss or the job's end came while the ports were picked: the next tick decides again
            sup.notice(f"{decision.role} {decision.before} -> {decision.after} given up: the job changed meanwhile")
            return
        after = sup.plan
        ports: dict[str, int] = {}
        added: list[str] = []
        for host, tasks in by_host.items():
            for task, port, profiler in zip(tasks, picked[host][::2], picked[host][1::2], strict=False):
                after = self._placed(after, task, host)
                ports[task], sup.profiler_ports[task] = port, profiler
                added.append(task)
                self.hosts.left.pop(task, None)
                # its events start again at 0 where it goes: the old numbers must not drop them
                self.hosts.links.forget_task(task)
        if decision.restart:
            # the cluster restarts: a worker still absent must not be in the TF_CONFIG it waits for
            absent = [t for t in self.hosts.left if t in sup.tasks and t not in added]
            if absent:
                after = drop_tasks(after, absent)
        self._took(set(by_host))
        sup.replace_plan(after, ports)
        group = [t for t in recovery_set(after, tuple(added), {t: str(rt.phase) for t, rt in sup.tasks.items()})
                 if t not in self.hosts.left]
        for task in group:
            rt = sup.tasks[task]
            sup.life.schedule([rt])
            if not rt.final and task not in added:
                sup.life.ask_stop(rt, "grow")
        if decision.restart:
            sup.notice(decision.restart_why)
            self.started_at = time.time()
        self._said(decision, reason, added)
        sup.restart_planned(group, f"{decision.role} {decision.before} -> {decision.after}: {reason}")

    @staticmethod
    def _placed(plan: Plan, task: str, host: str) -> Plan:
        """``plan`` with ``task`` on ``host``: moved there if the plan has it, else a new task."""
        if any(t.task_id == task for t in plan.tasks):
            return move_tasks(plan, [task], host)
        profile = plan.profile
        role, index = task.split(":", 1)
        config = profile.hosts[host]
        spec = place_task(profile, profile.roles[role], int(index), config, tf_address(config, plan.addresses),
                          sum(1 for t in plan.tasks if t.host == host), ())
        return dataclasses.replace(plan, tasks=tuple(_in_order([*plan.tasks, spec], plan)))

    def _said(self, decision: Grow, reason: str, tasks: list[str]) -> None:
        sup = self.sup
        event = ev.resize_event(sup.run_id, decision.role, decision.before, decision.after, reason, tasks,
                                decision.restart)
        self._kept(event)
        sup.notice(event.line())
        sup.publish(event)
        sup.publish(ev.job_event(sup.run_id, sup.job_state, event.line(), roles=self.hosts.role_sizes()))
        sup.write_state()

    def _kept(self, event: ev.ResizeEvent) -> None:
        self.record(event.role, event.before, event.after, event.reason)

    def record(self, role: str, before: int, after: int, why: str) -> None:
        """On the loop: one change of a role's size, kept for state.json (``status`` shows them)."""
        self.history.append({"role": role, "before": before, "after": after, "why": why, "ts": time.time()})

    # -- resize ---------------------------------------------------------------------------------------

    def resize(self, role: str, target: int) -> str | None:
        """On the loop: the operator's new size for ``role``; why not (one line), or None."""
        sup = self.sup
        refused = check_target(sup.plan, role, target)
        if refused is not None:
            return refused
        if sup.finishing:
            return "the job is ending"
        if self.growing or self.hosts.under_way is not None or sup.job_state != ev.JOB_RUNNING:
            return (f"the job is {sup.job_state.lower()}" if sup.job_state != ev.JOB_RUNNING
                    else "a move or a grow is under way") + "; resize again once it is Running"
        self.resized[role] = target
        sup.write_state()  # kept at once: a grow may only hold, and a supervisor that dies forgets nothing
        left = {t: sup.plan.task(t).host for t in self.hosts.left if t in sup.tasks}
        now = live_size(sup.plan, role, tuple(left))
        if target > now:
            self.asked = True
            self._grow()
            return None
        leaving = decide_shrink(sup.plan, role, target, left)
        if not leaving:
            return None
        why = f"resized to {target}"
        event = ev.resize_event(sup.run_id, role, now, target, why, list(leaving),
                                sup.plan.profile.strategy == "multi_worker_mirrored")
        self._kept(event)
        for task in leaving:
            sup.life.ask_stop(sup.tasks[task], "resize")
        if sup.plan.profile.strategy != "multi_worker_mirrored":
            for task in leaving:  # they stay in the plan, stopped: the rest goes on, nothing restarts
                self.hosts.left[task] = why
            sup.notice(event.line())
            sup.publish(event)
            sup.publish(ev.job_event(sup.run_id, sup.job_state, event.line(), roles=self.hosts.role_sizes()))
            sup.write_state()
            sup.stop_tasks(list(leaving))
            return None
        after = drop_tasks(sup.plan, leaving)
        group = list(recovery_set(after, (), {t: str(rt.phase) for t, rt in sup.tasks.items()}))
        for task in group:
            sup.life.schedule([sup.tasks[task]])
            sup.life.ask_stop(sup.tasks[task], "resize")
        sup.notice(event.line())
        sup.publish(event)
        sup.stop_tasks([*leaving, *group])
        sup.replace_plan(after)
        self.started_at = time.time()
        sup.write_state()
        sup.restart_planned(group, event.line())
        return None

    def resize_request(self, role: str, target: int, timeout: float) -> str | None:
        """The operator's resize, from any thread but the loop: why it was refused, or None."""
        answer: list[str | None] = []
        done = threading.Event()

        def act() -> None:
            answer.append(self.resize(role, target))
            done.set()

        self.sup.call(act)
        if not done.wait(timeout):
            return "the supervisor did not answer in time"
        return answer[0]


def _in_order(tasks: list[TaskSpec], plan: Plan) -> list[TaskSpec]:
    """The plan's start order: roles as the plan has them, each by index."""
    order = {t.role: i for i, t in reversed(list(enumerate(plan.tasks)))}
    return sorted(tasks, key=lambda t: (order.get(t.role, len(order)), t.index))


def preflight_again(plan: Plan, host: str, session: HostSession) -> list[str]:
    """A returning host's fresh preflight: the agent uploaded again; python and TensorFlow; the
    workdir, script and modules of one task of each role as a move would place it there. Problem
    lines (empty: it passed)."""
    spared = dataclasses.replace(plan, profile=dataclasses.replace(plan.profile, spares=(host,)))
    only = tuple(t for t in rehearsal(spared).tasks if t.host == host and is_rehearsal(t.task_id))
    checks = host_checks(dataclasses.replace(plan, tasks=only))
    need_tf = plan.profile.strategy != "custom"
    answer = session.prepare_and_preflight("0.0.0.0", [], 0, checks.get(host, []), need_tf)
    problems = describe_all(host, list(answer.get("failed") or []))
    tf = answer.get("tensorflow") or {}
    if need_tf and tf.get("error"):
        problems.append(f"host {host}: `import tensorflow` fails with {session.python} ({tf['error']})")
    return problems
