"""The job's end: decided once, published after any start under way, then every host swept.

``finish`` decides the end (nothing restarts from then on); the end event waits for a restart
whose agents are starting, so no task starts after it; then every host's agent stops its tasks,
tasks that never reported an end are marked stopped, leftovers are swept and the supervisor closes.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Mapping
from typing import Any, Protocol

from launcher import events as ev
from launcher.errors import HostError
from launcher.events import Event
from launcher.protocol.agentlines import AgentOp, StopRequest
from launcher.remote.session import HostSession
from launcher.supervise.lifecycle import Lifecycle, TaskRuntime

#: how long teardown waits for the agents' final events before it sweeps anyway
DRAIN_SECONDS = 5.0


class EndOwner(Protocol):
    """What the teardown uses of the supervisor."""

    @property
    def run_id(self) -> str: ...
    @property
    def tasks(self) -> Mapping[str, TaskRuntime]: ...
    @property
    def sessions(self) -> Mapping[str, HostSession]: ...
    @property
    def leftovers(self) -> dict[str, list[dict[str, Any]]]: ...
    @property
    def life(self) -> Lifecycle: ...
    def call(self, fn: Callable[[], None]) -> None: ...
    def after(self, delay: float, fn: Callable[[], None]) -> None: ...
    def publish(self, event: Event, line: str | None = None) -> None: ...
    def notice(self, message: str) -> None: ...
    def on_hosts(self, fn: Callable[[HostSession], None], hosts: list[str] | None = None) -> None: ...
    def ask_agent(self, host: str, request: AgentOp, timeout: float = ...) -> dict[str, Any] | None: ...
    def ended(self, state: str, reason: str) -> None: ...
    def in_job(self, host: str) -> bool: ...
    def close(self, outcome: str) -> None: ...


class Teardown:
    """How a job ends: the decision, the end event after any start under way, teardown, sweep."""

    def __init__(self, sup: EndOwner) -> None:
        self.sup = sup
        self.finishing = False
        self.decided: tuple[str, str] | None = None  # the job's end; published once no start is in flight
        self._ended = False
        self._starting = 0  # restarts now starting agents; under _start_gate with finishing
        self._start_gate = threading.Lock()
        self.all_final = threading.Event()  # every task has reported its end

    def finish(self, state: str, reason: str) -> None:
        """Decide the job's end: nothing restarts from here on. The end event and the teardown wait
        for a restart whose start is under way, so that no task starts after the job's end event."""
        with self._start_gate:
            if self.finishing:
                return
            self.finishing = True
            self.decided = (state, reason)
            busy = self._starting > 0
        if busy or self.sup.life.awaiting_launch():
            self.sup.after(DRAIN_SECONDS, self._end_job)  # an agent that never reports must not hold the end
        else:
            self._end_job()

    def may_start(self, members: list[TaskRuntime]) -> bool:
        """Before a restart starts ``members`` (on its thread): either the job ended before this
        start (False: start nothing), or its end now waits for ``start_done``."""
        with self._start_gate:
            if self.decided is not None:
                return False
            self._starting += 1
            for rt in members:
                self.sup.life.launching(rt)
            return True

    def start_done(self) -> None:
        """On the loop, after a start that ``may_start`` let go ended."""
        with self._start_gate:
            self._starting -= 1
        self.maybe_end_job()

    def maybe_end_job(self) -> None:
        """Publish a decided end once no restart is starting agents and every agent a restart
        launched has reported its task running (or ended): its events then precede the end."""
        if self.decided is None or self._ended or self._starting:
            return
        if not self.sup.life.awaiting_launch():
            self._end_job()

    def _end_job(self) -> None:
        if self._ended or self.decided is None:
            return
        self._ended = True
        state, reason = self.decided
        self.sup.ended(state, reason)
        self.sup.publish(ev.job_event(self.sup.run_id, state, reason))
        for rt in self.sup.tasks.values():
            if not rt.final:
                self.sup.life.ask_stop(rt, "the job's end")
        threading.Thread(target=self._teardown_blocking, args=(state,), name="teardown", daemon=True).start()

    def _teardown_blocking(self, state: str) -> None:
        sup = self.sup
        # a host that left the job (lost, drained) is not reached for: its agent stopped its tasks
        hosts = [h for h in sup.sessions if sup.in_job(h)]
        by_host = {h: [rt.spec.slug for rt in sup.tasks.values() if rt.spec.host == h] for h in hosts}
        grace = max((rt.spec.grace_seconds for rt in sup.tasks.values()), default=10.0)

        def stop(session: HostSession) -> None:
            # on the open follow channel where there is one; the verb (an exec) where not
            request = StopRequest(tuple(by_host[session.name]), grace, exit=True)
            try:
                answer = sup.ask_agent(session.name, request, timeout=grace + 60.0)
            except HostError:  # no answer in time on the channel: the verb, which also waits
                answer = None
            if answer is None or "error" in answer:
                session.stop_tasks(by_host[session.name], grace, exit_agent=True)

        try:
            sup.on_hosts(stop, hosts)
        except Exception as exc:
            sup.notice(f"stopping tasks: {exc}")
        if not self.all_final.wait(DRAIN_SECONDS):
            sup.call(self._mark_unreported_stopped)
        self._sweep_all(hosts)
        sup.call(lambda: sup.close(state))

    def _sweep_all(self, hosts: list[str]) -> None:
        def sweep(session: HostSession) -> None:
            left = session.sweep(kill=True)
            if left:
                self.sup.leftovers[session.name] = left

        try:
            self.sup.on_hosts(sweep, hosts)
        except Exception as exc:
            self.sup.notice(f"checking for leftover processes: {exc}")

    def _mark_unreported_stopped(self) -> None:
        for task_id, rt in self.sup.tasks.items():
            if not rt.final:
                self.sup.life.stopped_unreported(rt)
                self.sup.publish(ev.state_event(self.sup.run_id, task_id, ev.STOPPED, host=rt.spec.host,
                                                restarts=rt.restarts, reason="stopped (no final event received)"))
