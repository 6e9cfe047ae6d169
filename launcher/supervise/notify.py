"""[notify]: run the profile's command (and post to its webhook) on the launcher when the job ends,
a task fails, or an alert starts or clears (``alerts.py``).

The command gets what happened in its environment (``DISTLAUNCH_EVENT`` = ``job_ended`` or
``task_failed``, ``DISTLAUNCH_JOB_STATE``, ``DISTLAUNCH_REASON``, ``DISTLAUNCH_RUN_ID``,
``DISTLAUNCH_RUN_DIR``, ``DISTLAUNCH_PROFILE``, ``DISTLAUNCH_TASK``, ``DISTLAUNCH_HOST``,
``DISTLAUNCH_EXIT_CODE``, ``DISTLAUNCH_CAUSE``: the failed task's cause, or at the job's end its root
cause; for an alert ``DISTLAUNCH_EVENT=alert``, ``DISTLAUNCH_ALERT``, ``DISTLAUNCH_ACTIVE`` (1: started,
0: cleared), ``DISTLAUNCH_SUBJECT``, ``DISTLAUNCH_FIGURE``, ``DISTLAUNCH_MESSAGE``: one line with the
command to look) on top of the launcher's own environment; the profile's task ``env``
(where secrets live) is never passed. It cannot hurt the job: it runs in its own session with
its output in ``<run dir>/notify.log``, is killed after ``timeout_seconds``, and its first
failure gives one warning (later ones are only logged). A webhook gets the same as JSON (with a
Slack-style ``text``), bounded by the same timeout.

Never a flood: an alert that cleared is not told again for ``repeat_minutes`` (nor its next clear),
and at most ``BURST`` alerts go out in ``BURST_SECONDS``; what is held back is written to the
notify log and counted in the next one that goes out.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import threading
import time
from collections import deque
from collections.abc import Callable, Iterable
from pathlib import Path

from launcher import events as ev
from launcher.events import Event
from launcher.model import NotifyConfig
from launcher.rundir import NOTIFY_LOG, private_opener
from launcher.supervise.alerts import Alert, AlertWatch, Thresholds
from launcher.telemetry.jobview import root_cause_text

#: set to 1 in a notify command's environment: the teardown sweep leaves such processes alone
NOTIFY_MARKER = "DISTLAUNCH_NOTIFY"
JOB_ENDED = "job_ended"
TASK_FAILED = "task_failed"
ALERT = "alert"
#: at most this many alerts in BURST_SECONDS; the rest are logged and counted
BURST = 6
BURST_SECONDS = 600.0


class Notifier:
    """Watches a job's events; fires the command for each task failure and once when the job ends."""

    def __init__(self, config: NotifyConfig, *, run_id: str, run_dir: Path, profile_name: str, cwd: Path,
                 on_warning: Callable[[str], None], history_until: float | None = None) -> None:
        assert config.command is not None or config.webhook is not None
        self.command = config.command
        self.webhook = config.webhook
        self.watch = AlertWatch(config.on, Thresholds(
            throughput_drop_percent=config.throughput_drop_percent,
            throughput_window_seconds=config.throughput_window_seconds,
            gpu_idle_minutes=config.gpu_idle_minutes, disk_low_bytes=config.disk_low,
            checkpoint_old_minutes=config.checkpoint_old_minutes))
        self.repeat_seconds = config.repeat_minutes * 60
        self._cleared_at: dict[tuple[str, str], float] = {}
        self._held: set[tuple[str, str]] = set()  # started within repeat_seconds of a clear: its clear is held too
        self._sent: deque[float] = deque()
        self._held_back = 0
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
            old = self._history_until is not None and event.ts <= self._history_until
            for alert in self.watch.feed(event):
                if not old:
                    self._alert(alert)
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

    def _alert(self, alert: Alert) -> None:
        key = (alert.name, alert.subject)
        line = alert.line(self.run_id)
        if alert.active and not alert.one_shot:
            cleared = self._cleared_at.get(key)
            if cleared is not None and alert.ts - cleared < self.repeat_seconds:
                self._held.add(key)
                self._log(f"held back (again within {self.repeat_seconds / 60:g} min of its clear): {line}")
                return
        elif not alert.active:
            self._cleared_at[key] = alert.ts
            if key in self._held:
                self._held.discard(key)
                self._log(f"held back (its start was): {line}")
                return
        while self._sent and self._sent[0] < alert.ts - BURST_SECONDS:
            self._sent.popleft()
        if len(self._sent) >= BURST:
            self._held_back += 1
            self._log(f"held back ({BURST} alerts in {BURST_SECONDS / 60:g} min already): {line}")
            return
        self._sent.append(alert.ts)
        if self._held_back:
            line += f" [{self._held_back} more alert(s) held back: {self.run_dir / NOTIFY_LOG}]"
            self._held_back = 0
        self.fire_async(ALERT, task=alert.subject if ":" in alert.subject else "",
                        host=alert.host, reason=alert.figure, alert=alert.name,
                        active="1" if alert.active else "0", subject=alert.subject, message=line)

    def _log(self, text: str) -> None:
        with contextlib.suppress(OSError), open(self.run_dir / NOTIFY_LOG, "ab", opener=private_opener) as out:
            out.write(f"--- {time.strftime('%Y-%m-%d %H:%M:%S')} {text}\n".encode())

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
             cause: str = "", alert: str = "", active: str = "", subject: str = "", message: str = "") -> None:
        if not message:
            message = _message(self.run_id, what, self.job_state, task, reason, cause)
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
            "DISTLAUNCH_ALERT": alert,
            "DISTLAUNCH_ACTIVE": active,
            "DISTLAUNCH_SUBJECT": subject,
            "DISTLAUNCH_FIGURE": reason if what == ALERT else "",
            "DISTLAUNCH_MESSAGE": message,
        }
        with self._lock:
            self.fired.append(info)
        if self.webhook is not None:
            self._post(what, info)
        if self.command is None:
            return
        env = dict(os.environ)
        env.update(info)
        env[NOTIFY_MARKER] = "1"
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

    def _post(self, what: str, info: dict[str, str]) -> None:
        """The webhook's JSON POST; a failure is logged (and warned once), never raised."""
        body = {key.removeprefix("DISTLAUNCH_").lower(): value for key, value in info.items()}
        body["text"] = info["DISTLAUNCH_MESSAGE"]
        import urllib.error  # here: ~30 ms (http.client, ssl, email) a run without a webhook never needs
        import urllib.request

        request = urllib.request.Request(str(self.webhook), data=json.dumps(body).encode(), method="POST",
                                         headers={"Content-Type": "application/json"})
        problem = ""
        try:
            with urllib.request.urlopen(request, timeout=self.timeout) as answer:
                answer.read(4096)
        except urllib.error.HTTPError as exc:
            problem = f"answered HTTP {exc.code}"
        except (urllib.error.URLError, OSError, ValueError) as exc:
            problem = f"could not be reached ({getattr(exc, 'reason', exc)})"
        self._log(f"webhook {what}: {problem or 'sent'}")
        if problem:
            self._warn_once(f"the [notify] webhook {problem}; the job is not affected")

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


def _message(run_id: str, what: str, job_state: str, task: str, reason: str, cause: str) -> str:
    if what == JOB_ENDED:
        why = f": {cause or reason}" if (cause or reason) else ""
        return f"{run_id}: job {job_state}{why}"
    why = cause or reason
    return f"{run_id}: {task} failed{': ' + why if why else ''} (`distlaunch attach {run_id}`)"


class NotifyFollower:
    """A Notifier following one supervised job: ``finish()`` after the supervisor's ``wait()``."""

    def __init__(self, notifier: Notifier, events: Iterable[Event]) -> None:
        self.notifier = notifier
        self._thread = notifier.follow(events)

    def finish(self) -> None:
        self._thread.join(timeout=30)  # the feed is closed once the supervisor is done
        self.notifier.job_ended()
        self.notifier.wait()
