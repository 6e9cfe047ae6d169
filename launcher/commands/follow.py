"""A terminal following a job's supervisor: what `up` and `attach` show, and how they end.

The supervisor is a process of its own (supervise/daemon.py); this side is a client of it. It
relays the supervisor's log (its progress, warnings and errors) to stderr, shows the events it
follows over the control socket (the dashboard, `--no-tui` lines or `--json`), passes the user's
stop on, and exits with the job's outcome when it followed the job to its end:

- SIGINT / SIGTERM (`up`), SIGTERM (`attach`): the job is stopped by the supervisor (teardown with
  the signal's name, exit 130 / 143); the client waits for the end. A second Ctrl-C 2 s or more
  later stops waiting: the supervisor finishes the teardown on its own.
- Ctrl-C in `attach`, SIGHUP (a closed terminal, a dropped SSH session), the dashboard's "leave
  running", `up --detach`, and `kill -9` of this process: only the client goes; the job stays
  supervised (`distlaunch attach RUN` shows it again).
"""

from __future__ import annotations

import contextlib
import os
import signal
import sys
import threading
import time
from pathlib import Path
from typing import Any

from launcher.agent import pid_alive
from launcher.agent.leaving import shown as shown_text
from launcher.commands import notice
from launcher.commands.shown import Shown
from launcher.errors import UserError
from launcher.privatedir import open_trusted
from launcher.protocol.controllines import job_exit_code
from launcher.rundir import SUPERVISOR_LOG
from launcher.runstate import load_run_state
from launcher.supervise.daemon import unblock_signals
from launcher.supervise.remotejob import RemoteJob
from launcher.supervise.stopsignals import STOP_REASONS, StopSignals
from launcher.telemetry.printer import JsonPrinter, ProgressPrinter

#: how often the supervisor's log is read for new lines, and its socket tried while it starts
POLL_S = 0.05
#: how long a client waits for the hello of a supervisor that accepted it (its loop takes the cut)
HELLO_TIMEOUT_S = 15.0
#: how long a client that followed the job to its end waits for the supervisor to exit
EXIT_WAIT_S = 300.0


class LogRelay:
    """Copies what the supervisor writes to its log onto this process's stderr, as it comes.
    ``pause`` while a dashboard owns the terminal (the lines stay in the log)."""

    def __init__(self, path: Path, start: int | None) -> None:
        self.path = path
        self._offset = _size(path) if start is None else start
        self._paused = False
        self._stop = threading.Event()
        self._lock = threading.Lock()
        self._thread = threading.Thread(target=self._run, name="supervisor-log", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.wait(POLL_S):
            self.drain()

    def drain(self) -> None:
        with self._lock:
            size = _size(self.path)
            if size <= self._offset:
                return
            if self._paused:
                self._offset = size
                return
            try:
                with open_trusted(self.path, "the supervisor's output") as fh:  # never a FIFO or a link
                    fh.seek(self._offset)
                    data = fh.read(size - self._offset)
            except (OSError, UserError):
                return
            cut = data.rfind(b"\n") + 1  # whole lines only; the rest comes with the next read
            if not cut:
                return
            self._offset += cut
            with contextlib.suppress(OSError):
                os.write(2, data[:cut])

    def pause(self) -> None:
        self.drain()
        with self._lock:
            self._paused = True

    def resume(self) -> None:
        with self._lock:
            self._offset = _size(self.path)
            self._paused = False

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(2.0)
        self.drain()


def _size(path: Path) -> int:
    try:
        return path.stat().st_size
    except OSError:
        return 0


class ClientSignals(StopSignals):
    """The signals of a client. A stop is passed to the supervisor: as the same signal to a
    supervisor this process started (it stops the preflight too), else as a teardown request
    naming the signal. A hang-up only lets go of the terminal."""

    def __init__(self, run_id: str, child: int | None, signums: tuple[int, ...]) -> None:
        super().__init__(self._stop, self._hang_up, signums=signums)
        self.run_id = run_id
        self.child = child
        self.job: RemoteJob | None = None
        self.announce = child is None  # a supervisor this process started says the stop itself
        self.abandon_text = f"stopped waiting: the supervisor finishes the teardown of {run_id} on its own"

    def _stop(self, reason: str, origin: str) -> None:
        if self.child is not None:
            with contextlib.suppress(ProcessLookupError):
                os.kill(self.child, getattr(signal, origin))
            return
        if self.job is not None:  # on a thread: the handler must not wait for a socket
            job = self.job
            threading.Thread(target=lambda: _quietly(lambda: job.teardown(reason, origin)),
                             name="stop", daemon=True).start()

    def _hang_up(self) -> None:
        """The terminal went away: nothing to show any more; the job stays supervised."""


def _quietly(call: object) -> None:
    with contextlib.suppress(Exception):
        call()  # type: ignore[operator]


def follow_supervisor(run_id: str, run_dir: Path, *, child: int | None, shown: Shown,
                      detach: bool = False, attach: bool = False, log_from: int | None = None) -> int:
    """Follow the run's supervisor (``child``: its pid when this process started it) until the
    job ends or the user leaves it; the exit code. ``log_from``: where in supervisor.log this
    client's relay starts (None: at its end, the lines from now on)."""
    relay = LogRelay(run_dir / SUPERVISOR_LOG, start=log_from)
    signums = (signal.SIGTERM, signal.SIGHUP) if attach else (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)
    signals = ClientSignals(run_id, child, signums)
    try:
        with signals:
            unblock_signals()  # held since the fork (supervise/daemon.py): now they reach our handlers
            try:
                return _follow(run_id, child, shown, detach, attach, signals, relay)
            except KeyboardInterrupt:
                if signals.signum is not None:  # Ctrl-C again, 2 s after the first: stop waiting
                    return signals.exit_code or 130
                relay.stop()
                return _left(run_id, "", to_stderr=shown.json)
    finally:
        relay.stop()


def _follow(run_id: str, child: int | None, shown: Shown, detach: bool, attach: bool,
            signals: ClientSignals, relay: LogRelay) -> int:
    job = _connect(run_id, child, supervisor=_recorded_supervisor(relay.path.parent) if child is None else None)
    run_dir = relay.path.parent
    if job is None:  # the supervisor ended before it served (a mistake found by the preflight, say)
        relay.stop()
        if child is not None:
            return _reaped(child)
        notice(f"the supervisor of {run_id} does not answer any more; `distlaunch status {run_id}` says what is left")
        return 1
    signals.job = job
    if signals.signum is not None and child is None:  # a SIGTERM came while it connected: pass it on now
        _quietly(lambda: job.teardown(STOP_REASONS[signals.signum or signal.SIGTERM],
                                      signal.Signals(signals.signum or signal.SIGTERM).name))
    if detach or signals.hung_up:
        _until_launched(job)
        if job.end is not None or job.note is not None:
            return _ended(job, child, signals, relay)
        relay.stop()
        job.close()
        return _left(run_id, f" (pid {job.supervisor_pid})", detached=True, to_stderr=shown.json)
    if shown.tui:
        result = _dashboard(job, shown, signals, relay, run_dir)
        if result == "detach":
            relay.stop()
            return _left(run_id, f" (pid {job.supervisor_pid})")
        if result == "teardown":
            _quietly(lambda: job.teardown("torn down from the dashboard"))
    else:
        _print_lines(job, shown, signals)
    if signals.hung_up and signals.signum is None:
        return 0  # nobody reads what this client would say; the job stays supervised
    code = _ended(job, child, signals, relay)
    if shown.tui:  # the screen is gone: what --no-tui would have ended with, in one line
        line = result_line(run_dir)
        if line is not None:
            with contextlib.suppress(OSError):
                print(line, flush=True)
    return code


def result_line(run_dir: Path) -> str | None:
    """The run, how its job ended, and the step and loss its deciding task got to: what a user
    sees in the terminal once the dashboard is gone (None where the run's files cannot say)."""
    from launcher.commands.status import summarize
    from launcher.supervise.policy import deciding_task

    try:
        summary = summarize(run_dir)
    except (OSError, ValueError, UserError):
        return None
    job, tasks = summary["job"], summary["tasks"]
    text = f"run {summary['run']}: job {job['state']}" + (f": {shown_text(job['reason'])}" if job["reason"] else "")
    decider = deciding_task(tasks)
    seen = tasks.get(decider) if decider else None
    if seen and seen.get("step") is not None:
        loss = seen.get("loss")
        text += f" (step {seen['step']}" + (f", loss {loss:.4g}" if isinstance(loss, float) else "") + ")"
    if job.get("root_cause"):
        text += f"; root cause: {shown_text(job['root_cause'])}"
    return text + f"; `distlaunch status {summary['run']}` for more"


def _connect(run_id: str, child: int | None, supervisor: int | None = None) -> RemoteJob | None:
    """The follow connection, once the supervisor serves it (it first prepares the hosts, for as
    long as that takes); None once the supervisor ``child`` (or the recorded ``supervisor``) is gone."""
    while True:
        job = RemoteJob.follow(run_id, timeout=HELLO_TIMEOUT_S)
        if job is not None:
            return job
        if child is not None:
            pid, status = os.waitpid(child, os.WNOHANG)
            if pid:
                _CHILD_STATUS[child] = status
                return None
        elif supervisor is None or not pid_alive(supervisor):
            return None
        time.sleep(POLL_S)


def _recorded_supervisor(run_dir: Path) -> int | None:
    with contextlib.suppress(OSError, ValueError, UserError):
        return load_run_state(run_dir).supervisor_pid
    return None


#: exit codes of a supervisor that did not end by itself (130 and 143 are its own, after a stop)
_KILLED = {128 + s: s.name for s in (signal.SIGKILL, signal.SIGSEGV, signal.SIGABRT, signal.SIGBUS, signal.SIGQUIT)}

#: exit statuses of supervisors reaped while waiting for their socket
_CHILD_STATUS: dict[int, int] = {}


def _reaped(child: int) -> int:
    """The exit code of the supervisor this process started, once it has exited."""
    status = _CHILD_STATUS.pop(child, None)
    if status is None:
        deadline = time.monotonic() + EXIT_WAIT_S
        while status is None:
            pid, st = os.waitpid(child, os.WNOHANG)
            if pid:
                status = st
            elif time.monotonic() > deadline:
                notice(f"the supervisor (pid {child}) has not exited {EXIT_WAIT_S:.0f} s after the job's end")
                return 1
            else:
                time.sleep(POLL_S)
    code = os.waitstatus_to_exitcode(status)
    return code if code >= 0 else 128 - code  # killed by signal N: 128 + N, as a shell says it


def _until_launched(job: RemoteJob) -> None:
    """Read the stream (without showing it) until the launch is over or the job ended."""
    if job.launched.is_set():
        return
    for _event in job.events():
        if job.launched.is_set():
            return


def _dashboard(job: RemoteJob, shown: Shown, signals: ClientSignals, relay: LogRelay, run_dir: Path) -> str:
    from tui.app import DashboardError, run_dashboard

    relay.pause()
    try:
        result = run_dashboard(job, job, title=shown.title, strategy=shown.strategy,
                               hosts_total=shown.hosts_total, live=True, run_dir=run_dir,
                               bell_on_end=shown.bell, signals=signals)
    except DashboardError as exc:
        # a broken screen ends this client only: the job stays supervised
        raise UserError(f"{exc}; the job goes on: `distlaunch attach {job.run_id}` shows it again") from None
    finally:
        relay.resume()
    if result.action == "detach":
        return "detach"
    if result.action == "teardown" and not result.teardown_requested:
        return "teardown"
    return "quit"


def follow_lines(printer: ProgressPrinter | JsonPrinter, feed: Any) -> None:
    """Print the job's events until it ends. A reader of stdout that went away (`| head`, a
    `timeout` that signalled the whole pipeline) does not end the job's supervision: the rest is
    followed without printing."""
    events = feed.events()
    try:
        printer.consume(events)
    except OSError:  # EPIPE, or EIO from a terminal that hung up
        with contextlib.suppress(OSError):
            null = os.open(os.devnull, os.O_WRONLY)
            os.dup2(null, sys.stdout.fileno())
            os.close(null)
        for _ in events:
            pass



def _print_lines(job: RemoteJob, shown: Shown, signals: ClientSignals) -> None:
    printer = JsonPrinter() if shown.json else ProgressPrinter()
    thread = threading.Thread(target=follow_lines, args=(printer, job), name="printer", daemon=True)
    thread.start()
    while thread.is_alive():  # joined in steps: signal handlers run on this thread
        thread.join(0.5)
        if signals.hung_up and signals.signum is None:
            job.close()
            thread.join(2.0)
            return


def _ended(job: RemoteJob, child: int | None, signals: ClientSignals, relay: LogRelay) -> int:
    """The job ended (or the supervisor went away): the exit code, once the supervisor is gone."""
    job.close()
    pid = child if child is not None else job.supervisor_pid
    # the stream ended before the job did (a dashboard that closed it, a client let go for falling
    # behind, a busy supervisor): follow it again, without the history, to its end
    while job.end is None and pid is not None and pid_alive(pid):
        again = RemoteJob.follow(job.run_id, timeout=HELLO_TIMEOUT_S, history=False)
        if again is None:
            break
        for _event in again.events():
            pass
        again.close()
        job.end, job.note = again.end, None
    if child is not None:
        code = _reaped(child)
        relay.stop()
        if job.end is None and code in _KILLED:
            notice(f"the supervisor of {job.run_id} was killed ({_KILLED[code]}); "
                   f"`distlaunch attach {job.run_id}` within the orphan grace takes the job over")
        return code
    deadline = time.monotonic() + EXIT_WAIT_S
    while pid is not None and pid_alive(pid) and time.monotonic() < deadline:
        time.sleep(POLL_S)
    relay.stop()
    if job.end is None:
        notice(f"the supervisor of {job.run_id} went away; `distlaunch status {job.run_id}` says what is left")
        return 1
    # this client's own stop signal, else the code the supervisor told (its own stop signal's)
    return job_exit_code(job.end.outcome, signals.exit_code if signals.exit_code is not None else job.end.exit_code)


def _left(run_id: str, who: str, detached: bool = False, to_stderr: bool = False) -> int:
    """The client goes, the job stays supervised (said on stderr where stdout is JSON)."""
    verb = "runs" if detached else "goes on"
    with contextlib.suppress(OSError):
        print(f"{run_id} {verb}, supervised in the background{who}; follow it with "
              f"`distlaunch attach {run_id}`, stop it with `distlaunch down {run_id}`",
              file=sys.stderr if to_stderr else sys.stdout, flush=True)
    return 0


__all__ = ["STOP_REASONS", "LogRelay", "Shown", "follow_supervisor"]
