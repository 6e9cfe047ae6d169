"""The task state machine: what a task's state change means for it and the job.

A task that ends is judged by its restart policy (policy.py): restarted after a back-off, with its
group where the strategy needs that (a parameter server restarts with the chief, a mirrored worker
with its whole group), or the job fails: no restarts left (max_restarts, backoff_limit), a crash
loop (min_uptime), a failure no restart can fix. Stalls (the watchdog) may restart a task too; the
operator may restart or stop one. A restart stops the group, then starts it, unless the job ended meanwhile.
"""

from __future__ import annotations

import threading
import time

from launcher import events as ev
from launcher.events import Event
from launcher.model import START_ORDER
from launcher.remote.session import HostSession
from launcher.rundir import DOWN_MARKER
from launcher.supervise.core import TaskRuntime
from launcher.supervise.policy import (
    backoff_delay,
    crash_loop_reason,
    job_succeeded,
    quick_failures_after,
    restart_group,
    wants_restart,
    why_not_restarted,
)
from launcher.supervise.teardown import Teardown
from launcher.telemetry.watchdog import ConditionChange

#: how often stall and straggler conditions are judged
WATCHDOG_SECONDS = 1.0


class Restarts(Teardown):
    """Task states, restart policies, back-off, crash loops, stalls, manual restarts and stops."""

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
        if (no_retry := self.outputs.no_retry(spec.task_id)) is not None:  # a [[log_policies]] no_retry line
            self._finish(ev.JOB_FAILED, f"{spec.task_id} failed ({reason}); not restarted: {no_retry}")
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

    def _resume_restart(self, group: list[str], due: float) -> None:
        """A restart the last launcher had scheduled when it detached: due at the same time (or now)."""
        if not group:
            return
        for task_id in group:
            self.tasks[task_id].restarting = True
            self.tasks[task_id].restart_pending = True
        self._pending_restarts.append((group, due))
        self._after(max(0.0, due - time.time()), lambda: self._restart_now(group))

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
