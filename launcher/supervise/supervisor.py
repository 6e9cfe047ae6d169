"""The controller of one job: launch or resume it, and carry out the operator's actions.

The work is in layers under it (see core.py): links.py follows the hosts, restarts.py decides what
a task's end means, teardown.py ends the job. This class starts it all and is what the CLI, the
TUI (through JobControl) and the control socket call.
"""

from __future__ import annotations

import functools
import threading
import time
from collections.abc import Callable, Mapping
from typing import Any

from launcher import events as ev
from launcher.agent.stackmodel import TaskStacks
from launcher.events import Event
from launcher.protocol.lines import Launched
from launcher.supervise.core import Feed, LineFeed, TaskRuntime
from launcher.supervise.restarts import Restarts
from launcher.supervise.stackcapture import capture_stacks

__all__ = ["Feed", "Supervisor", "TaskRuntime"]


class Supervisor(Restarts):
    """Runs one job. ``launch()`` starts it; ``wait()`` blocks until it ended."""

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
        except BaseException as exc:
            reason = f"launch failed: {exc}"
            self._call(lambda: self._finish(ev.JOB_FAILED, reason))
            self._call(lambda: self._launched(ok=False))
            self.wait()
            raise
        self._call(self._launched)
        self._call(self.write_state)  # on the loop: the streams' offsets change there, never mid-dump

    def _launched(self, ok: bool = True) -> None:
        """The launch has started every task: the restarts that fell due meanwhile go now. A
        launch that failed tells clients nothing here: its job's end (``End``) is their answer."""
        self._launching = False
        self._launch_failed = not ok
        if ok:
            for line_feed in self._line_feeds:
                line_feed.put_lines([Launched().line()])
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
        self.outputs.replay(history)
        self._loop_thread = threading.Thread(target=self._loop, name="supervisor", daemon=True)
        self._loop_thread.start()
        reachable = [h for h in self.sessions if h not in unreachable]
        # a run an older distlaunch left detached has a `detached` marker on its hosts (the orphan
        # rule off): a supervisor follows it now, so the rule applies again
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

    def _announce(self) -> None:
        self._publish(ev.job_event(self.run_id, ev.JOB_CREATED, self.profile.name))
        for rt in self.tasks.values():
            self._publish(ev.state_event(self.run_id, rt.spec.task_id, ev.PENDING, host=rt.spec.host))

    def restart_task(self, task_id: str) -> None:
        self._call(lambda: self._acted("restart", task_id, lambda: self._manual_restart(task_id)))

    def stop_task(self, task_id: str) -> None:
        self._call(lambda: self._acted("stop", task_id, lambda: self._manual_stop(task_id)))

    def teardown(self, reason: str = "torn down by the user", origin: str = "") -> None:
        """``origin``: where the request came from when not the user's own keys (e.g. "SIGTERM")."""
        self._call(lambda: self._acted("teardown", None, lambda: self._finish(ev.JOB_FAILED, reason), origin))

    def _acted(self, action: str, target: str | None, do: Callable[[], None], origin: str = "") -> None:
        """Record an operator's action in the event stream (the timeline shows it), then do it."""
        if not self._done.is_set() and not (action == "teardown" and self._finishing):
            self._publish(ev.action_event(self.run_id, action, target, origin))
        do()

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
                if gave_up or self._done.is_set():
                    return
                feed = LineFeed()
                feed.put_lines(self.rundir.held_event_lines())
                self._line_feeds.append(feed)
                self.clients += 1
                launched = not self._launching and not self._launch_failed
                answer.append((feed, self.rundir.events_size(), launched))
                taken.set()
            self.write_state()

        self._call(cut)
        deadline = time.monotonic() + timeout
        while not taken.wait(0.2):
            if self._done.is_set() or time.monotonic() > deadline:
                with lock:
                    gave_up = True
                    if not answer:
                        return None
                break
        return answer[0]

    def loop_ended(self) -> bool:
        return self._done.is_set()

    def unfollow(self, feed: LineFeed) -> None:
        """A client left (or fell behind and was dropped)."""

        def drop() -> None:
            if feed in self._line_feeds:
                self._line_feeds.remove(feed)
                self.clients -= 1
                if not self._done.is_set():
                    self.write_state()
            feed.close()

        self._call(drop)

    def capture_stacks(self, tasks: list[str] | None = None, native: bool = False,
                       timeout: float = 10.0) -> list[TaskStacks]:
        """Every (or these) task's stacks, asked over the open follow channels (any thread but the loop)."""
        return capture_stacks(self, tasks, native, timeout)

    def _loop_begins(self) -> None:
        threading.Thread(target=self._ping_streams, name="ping", daemon=True).start()

    def _tick(self) -> None:
        self._check_silence()
        self._watch()
