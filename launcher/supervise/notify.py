"""[notify]: run the profile's command on the launcher when the job ends or a task fails.

The command gets what happened in its environment (``DISTLAUNCH_EVENT`` = ``job_ended`` or
``task_failed``, ``DISTLAUNCH_JOB_STATE``, ``DISTLAUNCH_REASON``, ``DISTLAUNCH_RUN_ID``,
``DISTLAUNCH_RUN_DIR``, ``DISTLAUNCH_PROFILE``, ``DISTLAUNCH_TASK``, ``DISTLAUNCH_HOST``,
``DISTLAUNCH_EXIT_CODE``, ``DISTLAUNCH_CAUSE``: the failed task's cause, or at the job's end its root
cause) on top of the launcher's own environment; the profile's task ``env``
(where secrets live) is never passed. It cannot hurt the job: it runs in its own session with
its output in ``<run dir>/notify.log``, is killed after ``timeout_seconds``, and its first
failure gives one warning (later ones are only logged).
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import threading
import time
from collections.abc import Callable, Iterable
from pathlib import Path

from launcher import events as ev
from launcher.events import Event
from launcher.model import NotifyConfig
from launcher.rundir import NOTIFY_LOG, private_opener
from launcher.telemetry.jobview import root_cause_text

#: set to 1 in a notify command's environment: the teardown sweep leaves such processes alone
NOTIFY_MARKER = "DISTLAUNCH_NOTIFY"
JOB_ENDED = "job_ended"
TASK_FAILED = "task_failed"


class Notifier:
    """Watches a job's events; fires the command for each task failure and once when the job ends."""

    def __init__(self, config: NotifyConfig, *, run_id: str, run_dir: Path, profile_name: str, cwd: Path,
                 on_warning: Callable[[str], None], history_until: float | None = None) -> None:
        assert config.command is not None
        self.command = config.command
        self.timeout = config.timeout_seconds
        self.run_id = run_id
        self.run_dir = run_dir
        self.profile_name = profile_name
        self.cwd = cwd
        self._warn = on_warning
        self._history_until = history_until  # attach: events up to here were already notified
        self._lock = threading.Lock()
        self._warned = False
        self._pending: list[threading.Thread] = []
        self.job_state = ev.JOB_CREATED
        self.job_reason = ""
        self.ended = False
        #: the job's first task failure: (when it ended, its root-cause line): DISTLAUNCH_CAUSE at the end
        self.first_failure: tuple[float, str] | None = None
        self.fired: list[dict[str, str]] = []

    # -- following the job ------------------------------------------------------------------------

    def follow(self, events: Iterable[Event]) -> threading.Thread:
        """Consume ``events`` on a thread of its own (task failures fire at once, in the background)."""
        thread = threading.Thread(target=self._consume, args=(events,), name="notify", daemon=True)
        thread.start()
        return thread

    def _consume(self, events: Iterable[Event]) -> None:
        for event in events:
            if isinstance(event, ev.JobEvent):
                self.job_state = event.state or self.job_state
                self.job_reason = event.reason
                self.ended = self.job_state in ev.JOB_ENDS
            elif isinstance(event, ev.StateEvent) and event.state == ev.FAILED and event.task:
                self._note_failure(event)
                if self._history_until is not None and event.ts <= self._history_until:
                    continue
                exit_code = event.exit_code
                self.fire_async(TASK_FAILED, task=event.task, host=event.host or "", reason=event.reason,
                                exit_code="" if exit_code is None else str(exit_code), cause=event.cause)

    def _note_failure(self, event: ev.StateEvent) -> None:
        at = float(event.exited_at) if event.exited_at is not None else event.ts
        if self.first_failure is None or at < self.first_failure[0]:
            why = event.reason or f"exit code {event.exit_code}"
            self.first_failure = (at, root_cause_text(str(event.task), why, event.cause, event.culprit or None))

    def job_ended(self) -> None:
        """After the job was torn down (so the teardown sweep never meets the command): notify its end."""
        if self.ended:
            root = self.first_failure[1] if self.first_failure and self.job_state == ev.JOB_FAILED else ""
            self.fire(JOB_ENDED, reason=self.job_reason, cause=root)

    # -- running the command ----------------------------------------------------------------------

    def fire_async(self, what: str, **details: str) -> None:
        thread = threading.Thread(target=self.fire, args=(what,), kwargs=details, name="notify-run", daemon=True)
        with self._lock:
            self._pending = [t for t in self._pending if t.is_alive()]
            self._pending.append(thread)
        thread.start()

    def fire(self, what: str, *, task: str = "", host: str = "", reason: str = "", exit_code: str = "",
             cause: str = "") -> None:
        env = dict(os.environ)
        info = {
            "DISTLAUNCH_EVENT": what,
            "DISTLAUNCH_JOB_STATE": self.job_state,
            "DISTLAUNCH_REASON": reason,
            "DISTLAUNCH_RUN_ID": self.run_id,
            "DISTLAUNCH_RUN_DIR": str(self.run_dir),
            "DISTLAUNCH_PROFILE": self.profile_name,
            "DISTLAUNCH_TASK": task,
            "DISTLAUNCH_HOST": host,
            "DISTLAUNCH_EXIT_CODE": exit_code,
            "DISTLAUNCH_CAUSE": cause,
        }
        env.update(info)
        env[NOTIFY_MARKER] = "1"
        with self._lock:
            self.fired.append(info)
        log = self.run_dir / NOTIFY_LOG
        problem = ""
        try:
            with open(log, "ab", opener=private_opener) as out:
                out.write(f"--- {time.strftime('%Y-%m-%d %H:%M:%S')} {what} {task}\n".encode())
                out.flush()
                proc = subprocess.Popen(["/bin/sh", "-c", self.command], cwd=self.cwd, env=env,
                                        stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT,
                                        start_new_session=True)
                try:
                    code = proc.wait(timeout=self.timeout)
                except subprocess.TimeoutExpired:
                    with contextlib.suppress(ProcessLookupError):
                        os.killpg(proc.pid, signal.SIGKILL)
                    proc.wait()
                    problem = f"did not finish in {self.timeout:g}s and was killed"
                else:
                    if code != 0:
                        problem = f"exited {code}"
        except OSError as exc:
            problem = f"could not be started: {exc.strerror or exc}"
        if problem:
            self._warn_once(f"the [notify] command {problem} (output in {log}); the job is not affected")

    def _warn_once(self, message: str) -> None:
        with self._lock:
            if self._warned:
                return
            self._warned = True
        self._warn(f"warning: {message}")

    def wait(self) -> None:
        """Let running notifications finish (each is bounded by the timeout)."""
        with self._lock:
            pending = list(self._pending)
        for thread in pending:
            thread.join()


class NotifyFollower:
    """A Notifier following one supervised job: ``finish()`` after the supervisor's ``wait()``."""

    def __init__(self, notifier: Notifier, events: Iterable[Event]) -> None:
        self.notifier = notifier
        self._thread = notifier.follow(events)

    def finish(self) -> None:
        self._thread.join(timeout=30)  # the feed is closed once the supervisor is done
        self.notifier.job_ended()
        self.notifier.wait()
