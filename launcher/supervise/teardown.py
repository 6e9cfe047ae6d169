"""The job's end: decided once, published after any start under way, then every host swept.

``_finish`` decides the end (nothing restarts from then on); the end event waits for a restart
whose agents are starting, so no task starts after it; then every host's agent stops its tasks,
tasks that never reported an end are marked stopped, leftovers are swept and the feeds closed.
"""

from __future__ import annotations

import threading

from launcher import events as ev
from launcher.errors import HostError
from launcher.remote.session import HostSession
from launcher.supervise.links import HostLinks

#: how long teardown waits for the agents' final events before it sweeps anyway
DRAIN_SECONDS = 5.0


class Teardown(HostLinks):
    """How a job ends: teardown, sweep."""

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

    def _teardown_blocking(self, state: str) -> None:
        by_host = {h: [rt.spec.slug for rt in self.tasks.values() if rt.spec.host == h] for h in self.sessions}
        grace = max((rt.spec.grace_seconds for rt in self.tasks.values()), default=10.0)
        def stop(session: HostSession) -> None:
            # on the open follow channel where there is one; the verb (an exec) where not
            request = {"op": "stop", "tasks": by_host[session.name], "grace": grace, "exit": True}
            try:
                answer = self._ask_agent(session.name, request, timeout=grace + 60.0)
            except HostError:  # no answer in time on the channel: the verb, which also waits
                answer = None
            if answer is None or "error" in answer:
                session.stop_agents(by_host[session.name], grace, exit_agent=True)

        try:
            self._on_hosts(stop)
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
        for line_feed in self._line_feeds:
            line_feed.close()
        for ex in self._executors.values():
            ex.shutdown(wait=False)
        self._done.set()
