"""`distlaunch up`: read the profile, prepare the hosts, launch the job and follow it to its end.

What follows a live job (the dashboard or progress lines, [notify], the control socket, the exit
code) is shared with `attach`, which takes over a running job.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import resource
import sys
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

from launcher import events as ev
from launcher.commands import notice
from launcher.commands.check import exposure_warnings
from launcher.errors import HostError, UserError
from launcher.model import Plan
from launcher.paths import runs_root
from launcher.plan import build_plan
from launcher.profile.overrides import overrides_from
from launcher.profile.reader import load_profile
from launcher.remote.preflight import Preflight, prepare_hosts
from launcher.rundir import (
    RunDir,
    new_run_id,
)
from launcher.runrecord import write_record
from launcher.supervise import controlsock
from launcher.supervise.notify import Notifier, NotifyFollower
from launcher.supervise.stopsignals import JobSignals, StoppedBeforeStart, StopSignals
from launcher.supervise.supervisor import Supervisor
from launcher.telemetry.printer import JsonPrinter, ProgressPrinter
from launcher.telemetry.progressline import mute


def _progress(quiet: bool) -> Callable[[str], None]:
    def show(msg: str) -> None:
        if not quiet:
            print(f"... {msg}", file=sys.stderr, flush=True)

    return show


def run_up(args: argparse.Namespace) -> int:
    if args.json:
        mute()  # stderr belongs to whatever reads the event stream
    profile = load_profile(Path(args.profile), overrides_from(args))
    plan = build_plan(profile)
    for warning in exposure_warnings(plan):
        notice(f"warning: {warning}")
    raise_open_files_limit(len({t.host for t in plan.tasks}))
    run_id = args.run_id or new_run_id(profile.name)
    target = Path(args.run_dir).expanduser() if args.run_dir else runs_root() / run_id
    if (target / "state.json").exists():
        raise UserError(f"{target} already holds run {run_id}; give another --run-id or --run-dir")
    rundir = RunDir.create(run_id, Path(args.run_dir) if args.run_dir else None)
    tui = not (args.no_tui or args.json or args.detach)
    if tui and not (sys.stdin.isatty() and sys.stdout.isatty()):
        notice("not a terminal: showing progress lines instead of the dashboard (--no-tui)")
        tui = False
    progress = _progress(quiet=False)
    signals = JobSignals(run_id)
    with signals:
        pre: Preflight | None = None
        try:
            progress(f"run {run_id} ({rundir.path})")
            pre = prepare_hosts(plan, run_id, rundir.path / "hosts", notice, progress)
            write_record(rundir.path, profile, pre.versions)
            sup = Supervisor(plan, rundir, pre.sessions, pre.ports, detached=args.detach, on_notice=notice)
            signals.bind(sup)
        except StoppedBeforeStart as stop:
            if pre is not None:
                pre.close()
            rundir.append(ev.job_event(run_id, ev.JOB_FAILED, f"{stop} before any task started"))
            rundir.close()
            notice(f"{stop} before any task started; nothing runs on any host")
            return signals.exit_code or 1
        outcome = _follow_job(args, plan, rundir, pre, sup, signals, tui, progress)
    return report_outcome(sup, outcome, signals.exit_code)


def _follow_job(args: argparse.Namespace, plan: Plan, rundir: RunDir, pre: Preflight, sup: Supervisor,
                signals: JobSignals, tui: bool, progress: Callable[[str], None]) -> str | None:
    """Launch the job and show it until it ends, or is detached (`--detach`, SIGHUP)."""
    run_id = sup.run_id
    feed = sup.subscribe()
    notifying = follow_notify(sup)
    server = start_control_server(run_id, sup)
    try:
        progress(f"starting {len(plan.tasks)} tasks on {len(pre.sessions)} host(s)")
        # lines (and JSON) stream while the tasks start: on many hosts the launch takes seconds
        printer = None
        if not (tui or args.detach):
            printer = _start_printer(JsonPrinter() if args.json else ProgressPrinter(), feed)
        try:
            sup.launch()
        except (HostError, OSError) as exc:
            _finish_printer(printer, feed)  # the stopped tasks' lines first, then the one-line error
            raise UserError(f"could not start the job: {exc}; every started task was stopped") from None
        if args.detach or signals.hung_up:  # a hang-up during the preflight: the job starts detached
            sup.detach(origin="SIGHUP" if signals.hung_up else "")
            _finish_printer(printer, feed)
            return sup.wait()
        if printer is not None:
            while printer.is_alive():  # joined in steps: signal handlers run on this thread
                printer.join(0.5)
        else:
            run_dashboard_for(sup, feed, plan, live=True, signals=signals)
        return sup.wait()
    finally:
        if server is not None:
            server.close()
        if notifying is not None:
            notifying.finish()
        pre.close()
        rundir.close()


#: open files the launcher holds besides its hosts' connections (run dir files, pipes, sockets)
BASE_OPEN_FILES = 64


def raise_open_files_limit(hosts: int) -> None:
    """Each host holds one connection (a socket; with the openssh transport, pipes to an ssh
    process too): the usual soft limit of 1,024 open files ends a launch at several hundred hosts.
    The soft limit goes up to the hard one; where even that is short, one line says so."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if hard != resource.RLIM_INFINITY and soft < hard:
        with contextlib.suppress(ValueError, OSError):
            resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
            soft = hard
    need = BASE_OPEN_FILES + 4 * hosts
    if soft != resource.RLIM_INFINITY and soft < need:
        notice(f"warning: {hosts} hosts may need {need} open files and the limit is {soft}; "
               "raise it (`ulimit -n`, or the hard limit in /etc/security/limits.conf)")


def _start_printer(printer: ProgressPrinter | JsonPrinter, feed: Any) -> threading.Thread:
    thread = threading.Thread(target=follow_lines, args=(printer, feed), name="printer", daemon=True)
    thread.start()
    return thread


def _finish_printer(printer: threading.Thread | None, feed: Any) -> None:
    """Close the feed and let the printer write what it holds (bounded: the feed has ended)."""
    feed.close()
    if printer is not None:
        printer.join(5.0)


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


def follow_notify(sup: Supervisor, history_until: float | None = None) -> NotifyFollower | None:
    """Run the profile's [notify] command for this job's task failures and its end (None: no command)."""
    config = sup.profile.notify
    if not config.command:
        return None
    notifier = Notifier(config, run_id=sup.run_id, run_dir=sup.rundir.path, profile_name=sup.profile.name,
                        cwd=sup.profile.directory, on_warning=notice, history_until=history_until)
    return NotifyFollower(notifier, sup.subscribe().events())


def start_control_server(run_id: str, sup: Supervisor) -> controlsock.ControlServer | None:
    try:
        return controlsock.ControlServer(run_id, sup)
    except OSError as exc:
        notice(f"control socket unavailable ({exc}); `restart` from another terminal will not work")
        return None


def report_outcome(sup: Supervisor, outcome: str | None, stopped_code: int | None) -> int:
    """The launcher's exit code; ``stopped_code``: the stop signal's code (130, 143) if one came."""
    for host, left in sup.leftovers.items():
        notice(f"host {host}: {len(left)} process(es) of the run survived teardown: "
             + ", ".join(str(p.get("pid")) for p in left))
    if outcome == "detached":
        print(f"{sup.run_id} detached; follow it with `distlaunch attach {sup.run_id}`, "
              f"stop it with `distlaunch down {sup.run_id}`")
        return 0
    if outcome == ev.JOB_SUCCEEDED:
        return 0
    if stopped_code is not None:
        return stopped_code
    return 1


def run_dashboard_for(sup: Supervisor, feed: Any, plan: Plan, live: bool, signals: StopSignals | None = None) -> None:
    from tui.app import run_dashboard

    try:
        result = run_dashboard(feed, sup, title=plan.profile.name, strategy=plan.profile.strategy,
                               hosts_total=len(sup.sessions), live=live, run_dir=sup.rundir.path,
                               bell_on_end=plan.profile.notify.bell, signals=signals)
    except Exception:
        # nothing may be left running because the screen broke: stop the job, then report the crash
        sup.teardown("the dashboard crashed")
        sup.wait(120)
        raise
    if result.action == "teardown" and not result.teardown_requested:
        sup.teardown("torn down from the dashboard")
    elif result.action == "detach":
        sup.detach()
