"""The supervisor's part for hosts that leave the job: lost for good, drained, or given notice.

Each host has a state (``up``, ``unreachable``, ``lost``, ``drained``, ``spare``) with its reason
and since when, published as ``host`` events and kept in state.json (``status --json``'s hosts).

* **Lost.** A host whose link stays down, every reconnect failing, for ``host_lost_seconds``
  since its last line (monotonic clocks) is lost: its tasks go to state ``lost``, and what the job
  does next is ``replan.decide_host_gone``'s: move them to a spare, go on without them, or fail
  with the cause. ``check`` makes ``host_lost_seconds`` exceed ``orphan_grace_seconds``, so by then
  the agent there has stopped the old incarnation for want of the supervisor's pings: a
  replacement never runs beside it. The host's link is then only watched for its return, when
  it is retired (``HostSession.retire``: the agent stops what is left, marks the host so nothing
  of the run starts there again, and exits).
* **Drained** (``distlaunch drain``, or the host's ``preemption_notice``): the host's tasks get
  SIGTERM with their grace (their exit is planned, never a failure), then they move as for a lost
  host, without the wait: their agent said they stopped.

Moves and shrinks count against ``max_host_losses``, never against ``max_restarts`` or
``backoff_limit``; the recovery set restarts with a new TF_CONFIG (``replan.recovery_set``).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Collection, Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol

from launcher import events as ev
from launcher.errors import HostError, UserError
from launcher.events import Event
from launcher.model import Plan
from launcher.placement import drop_tasks, move_tasks, tasks_on
from launcher.remote.session import HostSession
from launcher.rundir import RunDir
from launcher.runrecord import record_placement
from launcher.runstate import HostStateRecord
from launcher.supervise.decide import GiveUp, JobFacts
from launcher.supervise.hostworker import HostWorker
from launcher.supervise.lifecycle import ENDS, JobPhase, Lifecycle, TaskRuntime
from launcher.supervise.replan import (
    HostGone,
    Move,
    Nothing,
    Room,
    Shrink,
    decide_host_gone,
    lost_after,
    recovery_set,
)
from launcher.telemetry.watchdog import Watchdog

#: a moved task gets two ports on its new host: TF_CONFIG's and its profiler server's
PORTS_PER_TASK = 2



@dataclass
class HostState:
    state: str
    reason: str = ""
    since: float = 0.0  # wall time of the change, for people


@dataclass
class Recovery:
    """A move or shrink under way (one at a time): the host it answers, and the tasks its restart
    starts (decided when it began: a peer that exits 0 on the planned stop still starts again)."""

    gone: HostGone
    restarts: list[str] = field(default_factory=list)


class LinkView(Protocol):
    """What the host-loss part uses of the hosts' links (links.py)."""

    def is_up(self, host: str) -> bool: ...
    def silent_for(self, host: str) -> float | None: ...
    def retire(self, host: str) -> None: ...
    def forget_task(self, task: str) -> None: ...


class RestartView(Protocol):
    """What the host-loss part uses of the restarts (restarts.py)."""

    def facts(self) -> JobFacts: ...
    def restart_planned(self, group: list[str], why: str) -> None: ...
    def cancel_pending(self, tasks: Collection[str] | None = None) -> None: ...
    def moved(self, task: str, from_host: str) -> None: ...


class LossOwner(Protocol):
    """What the host-loss part uses of the supervisor."""

    @property
    def run_id(self) -> str: ...
    @property
    def rundir(self) -> RunDir: ...
    @property
    def plan(self) -> Plan: ...
    @property
    def tasks(self) -> Mapping[str, TaskRuntime]: ...
    @property
    def sessions(self) -> Mapping[str, HostSession]: ...
    @property
    def workers(self) -> Mapping[str, HostWorker]: ...
    @property
    def life(self) -> Lifecycle: ...
    @property
    def profiler_ports(self) -> dict[str, int]: ...
    @property
    def watchdog(self) -> Watchdog: ...
    @property
    def finishing(self) -> bool: ...
    @property
    def job_state(self) -> str: ...
    def call(self, fn: Callable[[], None]) -> None: ...
    def publish(self, event: Event, line: str | None = None) -> None: ...
    def notice(self, message: str) -> None: ...
    def finish(self, state: str, reason: str) -> None: ...
    def write_state(self) -> None: ...
    def replace_plan(self, plan: Plan, ports: Mapping[str, int] | None = None) -> None: ...


class HostLoss:
    def __init__(self, sup: LossOwner, links: LinkView, restarts: RestartView) -> None:
        self.sup = sup
        self.links = links
        self.restarts = restarts
        profile = sup.plan.profile
        self.spares = [s for s in profile.spares if s in sup.sessions]
        now = time.time()
        self.states: dict[str, HostState] = {h: HostState(ev.HOST_SPARE if h in self.spares else ev.HOST_UP, "", now)
                                             for h in sup.sessions}
        self.gone: set[str] = set()  # lost or drained: out of the job for good
        self.losses = 0
        #: host -> slugs of the tasks it ran before they moved (stopped there if it comes back)
        self.left_behind: dict[str, list[str]] = {}
        #: every move and shrink so far, for the run record (resolved.json)
        self.moves: list[dict[str, Any]] = []
        self.under_way: Recovery | None = None
        #: hosts gone while a recovery was under way: each is decided on the plan the one before made
        self.waiting: list[HostGone] = []
        #: tasks a recovery's restart left to the next one (another host went meanwhile)
        self.carried: set[str] = set()
        #: task -> why: PSS workers the job went on without and no restart (``Shrink.in_place``);
        #: they stay in the plan and in every view as ``lost``
        self.left: dict[str, str] = {}
        #: each role's target size (regrow.py's, which knows the operator's resizes)
        self.targets: Callable[[], Mapping[str, int]] = dict
        #: a role's size changed by a loss (role, before, after, why): the size's history (regrow.py's)
        self.resized: Callable[[str, int, int, str], None] = lambda *_: None

    # -- what is reported -----------------------------------------------------------------------------

    def records(self) -> dict[str, HostStateRecord]:
        """Each host's state for state.json; an unreachable one's silence so far, where known."""
        out: dict[str, HostStateRecord] = {}
        for host, st in self.states.items():
            silent = self.links.silent_for(host)
            out[host] = HostStateRecord(st.state, st.reason, st.since,
                                        round(silent, 1) if st.state == ev.HOST_UNREACHABLE and silent is not None
                                        else None)
        return out

    def resume(self, recorded: Mapping[str, HostStateRecord], losses: int, moves: list[dict[str, Any]],
               left_behind: Mapping[str, list[str]], spares: list[str] | None) -> list[str]:
        """Attach: the host states the last supervisor had reached; returns the hosts out of the job."""
        self.moves = list(moves)
        self.left = {m["task"]: str(m.get("why", "")) for m in self.moves
                     if m.get("in_place") and isinstance(m.get("task"), str) and m["task"] in self.sup.tasks}
        self.left_behind = {h: list(v) for h, v in left_behind.items()}
        for host, info in recorded.items():
            if host in self.states:
                self.states[host] = HostState(info.state or ev.HOST_UP, info.reason,
                                              info.since if info.since else time.time())
        self.gone = {h for h, st in self.states.items() if st.state in (ev.HOST_LOST, ev.HOST_DRAINED)}
        if spares is not None:  # those still unused (one that was unreachable then is one still), added ones too
            self.spares = [s for s in spares if s in self.states and s not in self.gone]
        else:
            self.spares = [s for s in self.spares if self.states[s].state == ev.HOST_SPARE]
        self.losses = losses
        return sorted(self.gone)

    def _set(self, host: str, state: str, reason: str) -> None:
        self.states[host] = HostState(state, reason, time.time())
        self.sup.publish(ev.host_event(self.sup.run_id, host, state, reason))

    def link_changed(self, host: str, up: bool, reason: str) -> None:
        """The links' word that a host's stream went down or came back (not for gone hosts)."""
        if host in self.gone:
            return
        if up:
            self.states[host] = HostState(ev.HOST_SPARE if host in self.spares else ev.HOST_UP, reason, time.time())
        else:
            self.states[host] = HostState(ev.HOST_UNREACHABLE, reason, time.time())
        sup = self.sup
        if sup.finishing or not any(not sup.tasks[t].final for t in tasks_on(sup.plan, host)):
            return
        # the job's state says it: never "Running" as if nothing happened while a host's tasks are out of reach
        limit = lost_after(sup.plan, host)
        said = f"host {host} answers again" if up else \
            f"host {host} does not answer ({reason}); lost after {limit:g} s without contact"
        sup.publish(ev.job_event(sup.run_id, sup.job_state, said))
        sup.write_state()

    def reachable(self, host: str) -> bool:
        return host not in self.gone and self.links.is_up(host)

    # -- lost -----------------------------------------------------------------------------------------

    def tick(self) -> None:
        """On the loop: a host silent for long enough (``replan.lost_after``) is lost."""
        if self.sup.finishing:
            return
        for host in list(self.states):
            if host in self.gone or self.links.is_up(host):
                continue
            silent = self.links.silent_for(host)
            if silent is not None and silent >= lost_after(self.sup.plan, host):
                self.lose(host, f"no contact for {silent:.0f} s")

    def lose(self, host: str, why: str) -> None:
        sup = self.sup
        if host in self.gone:
            return
        self.gone.add(host)
        self.links.retire(host)
        self._set(host, ev.HOST_LOST, why)
        what = f"host {host} lost ({why})"
        self.left_behind[host] = [sup.tasks[t].spec.slug for t in tasks_on(sup.plan, host)]
        for task_id in tasks_on(sup.plan, host):
            rt = sup.tasks[task_id]
            if rt.phase in ENDS and not rt.restarting:
                continue
            sup.life.lost(rt)
            sup.watchdog.forget(task_id)
            sup.publish(ev.state_event(sup.run_id, task_id, ev.LOST, host=host, restarts=rt.restarts, reason=what))
        sup.write_state()
        if host in self.spares:
            self.spares.remove(host)
            sup.notice(f"spare host {host} lost ({why}); {len(self.spares)} spare(s) left")
            return
        self._decide(HostGone(host, why))

    def host_returned(self, host: str) -> bool:
        """On the host's thread: a gone host answers again. Nothing of the run may run there: retire it.
        Whether it was told so (a lost host told so may be re-admitted later: regrow.py)."""
        state = self.states[host].state
        slugs = self.left_behind.get(host, [])
        try:
            left = self.sup.sessions[host].retire(f"run {self.sup.run_id} left this host ({state})", slugs)
        except HostError as exc:
            self.sup.notice(f"host {host} left the job but could not be told so: {exc}")
            return False
        said = "nothing of the run runs there" if not left else f"{', '.join(left)} could not be stopped there"
        self.sup.call(lambda: self.sup.notice(f"host {host} told that the run left it ({state}): {said}, and "
                                              "nothing of it starts there again"))
        # fencing: a host where something of its old incarnation still runs is never re-admitted
        return state == ev.HOST_LOST and not left

    # -- drained --------------------------------------------------------------------------------------

    def drain(self, host: str, reason: str) -> str | None:
        """On the loop: move the job off ``host``; why not (one line), or None once under way."""
        sup = self.sup
        if host not in self.states:
            return f"no host {host!r} in this run; its hosts: {', '.join(sorted(self.states))}"
        if host in self.gone:
            return f"host {host} already left the job ({self.states[host].state})"
        if sup.finishing:
            return "the job is ending"
        if not self.reachable(host):  # a drain stops the tasks first, which needs the host
            return (f"host {host} does not answer; it is lost after {lost_after(sup.plan, host):g} s "
                    "without contact, and its tasks move then")
        self.gone.add(host)
        self.left_behind[host] = [sup.tasks[t].spec.slug for t in tasks_on(sup.plan, host)]
        self._set(host, ev.HOST_DRAINED, reason)
        sup.write_state()
        if host in self.spares:
            self.spares.remove(host)
            self.links.retire(host)
            sup.workers[host].submit(self.host_returned, host)
            return None
        self._decide(HostGone(host, reason, drained=True))
        return None

    def drain_request(self, host: str, reason: str, timeout: float) -> str | None:
        """The operator's drain, from any thread but the loop: why it was refused, or None."""
        sup = self.sup
        answer: list[str | None] = []
        done = threading.Event()

        def act() -> None:
            if not sup.finishing:
                sup.publish(ev.action_event(sup.run_id, "drain", host, reason))
            answer.append(self.drain(host, reason))
            done.set()

        sup.call(act)
        if not done.wait(timeout):
            return "the supervisor did not answer in time"
        return answer[0]

    def record_placement(self) -> None:
        """Where each task runs now, and the moves that led there, in the run record (resolved.json)."""
        sup = self.sup
        placement = {t: {"host": rt.spec.host, "address": rt.spec.address, "port": rt.port}
                     for t, rt in sup.tasks.items()}
        try:
            record_placement(sup.rundir.path, placement, self.moves)
        except (OSError, UserError) as exc:  # a FIFO or damaged record never holds up a move
            sup.notice(f"could not update the run record: {exc}")

    def _stop_drained(self, host: str, tasks: tuple[str, ...], then: Callable[[], None]) -> None:
        """Stop the drained host's tasks (SIGTERM, their grace, SIGKILL) on its thread, then ``then``
        on the loop; the host is retired after."""
        sup = self.sup
        slugs = [sup.tasks[t].spec.slug for t in tasks]
        grace = max((sup.tasks[t].spec.grace_seconds for t in tasks), default=10.0)
        session = sup.sessions[host]

        def work() -> None:
            try:
                session.stop_tasks(slugs, grace)
            except HostError as exc:
                # not known stopped: no move before the orphan rule has stopped them there, so the
                # host goes the way of a lost one (it is lost after host_lost_seconds without contact)
                said = f"draining host {host}: {exc}; its tasks move once it is lost"
                sup.call(lambda: self._drain_failed(host, said))
                return
            sup.call(then)
            sup.call(lambda: self.links.retire(host))
            self.host_returned(host)

        sup.workers[host].submit(work)

    def _drain_failed(self, host: str, said: str) -> None:
        """On the loop: the drained host did not confirm its tasks stopped: undo the move under way;
        the host is lost when it has been silent for host_lost_seconds (or answers again)."""
        self.sup.notice(said)
        self.under_way = None
        self.losses -= 1
        self.gone.discard(host)
        self.states[host] = HostState(ev.HOST_UNREACHABLE, said, time.time())
        self.sup.write_state()
        if self.waiting:
            self._decide(self.waiting.pop(0))

    # -- the decision and its carrying out ------------------------------------------------------------

    def _decide(self, gone: HostGone) -> None:
        if self.under_way is not None:  # one at a time: the next is decided on the plan the first made
            self.waiting.append(gone)
            return
        sup = self.sup
        decision = decide_host_gone(sup.plan, self.restarts.facts(), gone,
                                    Room(tuple(s for s in self.spares if self.reachable(s)), self.losses,
                                         tuple(self.left)))
        if isinstance(decision, Shrink) and decision.in_place:
            self._shrink_in_place(gone, decision)
            return
        if isinstance(decision, Nothing):
            sup.notice(f"host {gone.host} left the job; none of its tasks was still needed")
            if gone.drained:
                self._stop_drained(gone.host, (), lambda: None)
            carried = [t for t in sup.plan.tasks if t.task_id in self.carried]
            self.carried = set()
            if carried:  # the restart the move before this one left to it
                self.restarts.restart_planned([t.task_id for t in carried], "restarting after the hosts left")
            return
        if isinstance(decision, GiveUp):
            self.restarts.cancel_pending()
            if gone.drained:  # its tasks' ends are planned, and the teardown reaches the host to stop them
                self.gone.discard(gone.host)
                for task_id in tasks_on(sup.plan, gone.host):
                    sup.life.ask_stop(sup.tasks[task_id], "drain")
            sup.finish(ev.JOB_FAILED, decision.cause)
            return
        self.losses += 1
        # the whole recovery set's ends from here on are planned (an MWMS peer saving and exiting 42)
        changed = decision.tasks if isinstance(decision, Move) else ()
        after = self._next_plan(decision)
        recovering = {*recovery_set(after, changed, self._states()), *decision.tasks,
                      *(t for t in self.carried if t in sup.tasks)} - set(self.left)
        self.carried = set()
        self.under_way = Recovery(gone, [t.task_id for t in after.tasks if t.task_id in recovering])
        self.restarts.cancel_pending(recovering)
        for task_id in recovering:
            rt = sup.tasks[task_id]
            sup.life.schedule([rt])
            if not rt.final:
                sup.life.ask_stop(rt, "move")
        sup.life.job_to(JobPhase.RESTARTING)
        sup.publish(ev.job_event(sup.run_id, ev.JOB_RESTARTING, self._describe(decision)))
        sup.write_state()

        def go_on() -> None:
            if isinstance(decision, Move):
                if not self._usable(decision.to_host):
                    self._spare_failed(decision, "it no longer answers")
                    return
                self._pick_ports(decision)
            else:
                self._apply(after, {}, decision.tasks, (), decision.why)

        if gone.drained:
            self._stop_drained(gone.host, decision.tasks, go_on)
        else:
            go_on()

    def _shrink_in_place(self, gone: HostGone, decision: Shrink) -> None:
        """On the loop: ParameterServerStrategy workers leave and nothing restarts: the chief's
        coordinator gives their closures to the other workers. They stay in the plan, ``lost``."""
        sup = self.sup
        self.losses += 1
        self.restarts.cancel_pending(decision.tasks)
        before = {role: size["running"] for role, size in self.role_sizes().items()}
        now = time.time()
        for task_id in decision.tasks:
            self.left[task_id] = decision.why
            self.moves.append({"task": task_id, "from": gone.host, "to": None, "why": decision.why, "ts": now,
                               "in_place": True})
            if gone.drained:  # stopped on purpose: their end is planned
                sup.life.ask_stop(sup.tasks[task_id], "drain")
        self.record_placement()
        went = f"host {gone.host} {'drained' if gone.drained else 'lost'}"
        for role, size in self.role_sizes().items():
            if size["running"] != before.get(role, size["running"]):
                self.resized(role, before[role], size["running"], went)
        said = (f"the job goes on without {', '.join(decision.tasks)} ({decision.why}); nothing restarts: "
                + ", ".join(self.role_line(role) for role in sorted({t.split(':', 1)[0] for t in decision.tasks})))
        sup.notice(said)
        sup.publish(ev.job_event(sup.run_id, sup.job_state, said, roles=self.role_sizes()))
        sup.write_state()
        if gone.drained:
            self._stop_drained(gone.host, decision.tasks, lambda: None)
        carried = [t.task_id for t in sup.plan.tasks if t.task_id in self.carried]
        self.carried = set()
        if carried:  # the restart the move before this one left to it
            self.restarts.restart_planned(carried, "restarting after the hosts left")

    def role_sizes(self) -> dict[str, dict[str, int]]:
        """Each role's size: tasks the job goes on with (``running``), ``planned`` (its count, or the
        operator's resize), ``min`` and ``max``."""
        sup = self.sup
        targets = self.targets()
        out: dict[str, dict[str, int]] = {}
        for role, config in sup.plan.profile.roles.items():
            if config.count <= 0:
                continue
            placed = sum(1 for t in sup.plan.tasks if t.role == role)
            running = placed - sum(1 for t in self.left if t.split(":", 1)[0] == role)
            out[role] = {"running": running, "planned": targets.get(role, config.count), "min": config.fewest,
                         "max": config.most}
        return out

    def role_line(self, role: str) -> str:
        """``worker 1/2, min 1``."""
        size = self.role_sizes().get(role)
        if size is None:
            return role
        return f"{role} {size['running']}/{size['planned']}, min {size['min']}"

    def _usable(self, spare: str) -> bool:
        return spare in self.spares and self.reachable(spare)

    def _states(self) -> dict[str, str]:
        return {t: str(rt.phase) for t, rt in self.sup.tasks.items()}

    def _next_plan(self, decision: Move | Shrink) -> Plan:
        if isinstance(decision, Move):
            return move_tasks(self.sup.plan, decision.tasks, decision.to_host)
        return drop_tasks(self.sup.plan, decision.tasks)

    @staticmethod
    def _describe(decision: Move | Shrink) -> str:
        if isinstance(decision, Move):
            return (f"{', '.join(decision.tasks)} moving from {decision.from_host} to {decision.to_host} "
                    f"({decision.why})")
        return f"going on without {', '.join(decision.tasks)} ({decision.why})"

    def _pick_ports(self, move: Move) -> None:
        """On the spare's thread: its free ports (a spare that cannot answer is skipped for the next)."""
        sup = self.sup
        session = sup.sessions[move.to_host]

        def work() -> None:
            try:
                ports = session.pick_ports(PORTS_PER_TASK * len(move.tasks))
            except HostError as exc:
                err = exc
                sup.call(lambda: self._spare_failed(move, str(err)))
                return
            sup.call(lambda: self._apply(move_tasks(sup.plan, move.tasks, move.to_host), dict(zip(
                move.tasks, ports[::2], strict=False)), move.tasks, move.tasks, move.why, move, ports[1::2]))

        sup.workers[move.to_host].submit(work)

    def _spare_failed(self, move: Move, why: str) -> None:
        if move.to_host in self.spares:
            self.spares.remove(move.to_host)
        if move.to_host not in self.gone:
            self.states[move.to_host] = HostState(ev.HOST_UNREACHABLE, f"failed as a replacement: {why}",
                                                  time.time())
        self.sup.notice(f"spare host {move.to_host} cannot take {', '.join(move.tasks)} ({why}); trying the next")
        current, self.under_way = self.under_way, None
        self.losses -= 1
        if current is not None:
            self._decide(current.gone)

    def _apply(self, after: Plan, ports: dict[str, int], leaving: tuple[str, ...], moved: tuple[str, ...],
               why: str, move: Move | None = None, profiler: list[int] | None = None) -> None:
        """On the loop: take the new plan, say what moved, restart the recovery set (not counted)."""
        sup = self.sup
        if move is not None and not self._usable(move.to_host):  # the spare left while its ports were picked
            self._spare_failed(move, "it left the job meanwhile")
            return
        recovery, self.under_way = self.under_way, None
        if sup.finishing:
            return
        before = sup.plan
        # the whole cluster restarts: the workers it went on without in place leave its TF_CONFIG now
        after, self.left = drop_tasks(after, self.left), {}
        sup.replace_plan(after, ports)
        for task_id, port in zip(moved, profiler or [], strict=False):
            sup.profiler_ports[task_id] = port
        for task_id in leaving:
            self.links.forget_task(task_id)
        if move is not None:
            self.spares.remove(move.to_host)
            self._set(move.to_host, ev.HOST_UP, f"replaces {move.from_host}")
            for task_id in moved:
                self.restarts.moved(task_id, move.from_host)
                sup.notice(f"{task_id} moved from {move.from_host} to {move.to_host} ({why})")
                self.moves.append({"task": task_id, "from": move.from_host, "to": move.to_host, "why": why,
                                   "ts": time.time()})
        else:
            self.moves.extend({"task": task_id, "from": before.task(task_id).host, "to": None,
                               "why": why, "ts": time.time()} for task_id in leaving)
        self.record_placement()
        if move is None:
            sup.notice(f"the job goes on without {', '.join(leaving)} ({why}); "
                       + ", ".join(f"{role}: {sum(1 for t in after.tasks if t.role == role)} task(s)"
                                   for role in sorted({t.split(':', 1)[0] for t in leaving})))
        group = [t for t in (recovery.restarts if recovery else []) if t in sup.tasks]
        if before.tasks != after.tasks:
            sup.write_state()
        if self.waiting:  # another host went meanwhile: its re-plan restarts these too, once
            self.carried.update(group)
            self._decide(self.waiting.pop(0))
            return
        if group:
            self.restarts.restart_planned(group, self._describe(move) if move else f"going on without "
                                         f"{', '.join(leaving)} ({why})")
