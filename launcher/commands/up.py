"""`distlaunch up`: read the profile, prepare the hosts, launch the job and follow it to its end.

What follows a live job (the dashboard or progress lines, [notify], the control socket, the exit
code) is shared with `attach`, which takes over a running job.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import signal
import sys
from collections.abc import Callable
from pathlib import Path
from types import FrameType
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
from launcher.remote.preflight import prepare_hosts
from launcher.rundir import RunDir, new_run_id
from launcher.runrecord import write_record
from launcher.supervise import controlsock
from launcher.supervise.notify import Notifier, NotifyFollower
from launcher.supervise.supervisor import Supervisor
from launcher.telemetry.printer import JsonPrinter, ProgressPrinter


def _progress(quiet: bool) -> Callable[[str], None]:
    def show(msg: str) -> None:
        if not quiet:
            print(f"... {msg}", file=sys.stderr, flush=True)

    return show


def run_up(args: argparse.Namespace) -> int:
    profile = load_profile(Path(args.profile), overrides_from(args))
    plan = build_plan(profile)
    for warning in exposure_warnings(plan):
        notice(f"warning: {warning}")
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
    progress(f"run {run_id} ({rundir.path})")
    pre = prepare_hosts(plan, run_id, rundir.path / "hosts", notice, progress)
    write_record(rundir.path, profile, pre.versions)
    sup = Supervisor(plan, rundir, pre.sessions, pre.ports, detached=args.detach, on_notice=notice)
    feed = sup.subscribe()
    notifying = follow_notify(sup)
    server = start_control_server(run_id, sup)
    interrupted = False

    def on_sigint(_sig: int, _frame: FrameType | None) -> None:
        nonlocal interrupted
        if interrupted:
            raise KeyboardInterrupt
        interrupted = True
        # a raw write: the handler may have interrupted a print to stderr, whose buffer it must
        # not enter again; teardown only puts on a SimpleQueue, which is safe here
        with contextlib.suppress(OSError, ValueError):  # no real stderr (a test's capture)
            os.write(sys.stderr.fileno(), b"distlaunch: interrupted: tearing the job down "
                                          b"(Ctrl-C again to abandon the wait)\n")
        sup.teardown("interrupted by Ctrl-C")

    old_int = signal.signal(signal.SIGINT, on_sigint)
    old_term = signal.signal(signal.SIGTERM, on_sigint)
    try:
        progress(f"starting {len(plan.tasks)} tasks on {len(pre.sessions)} host(s)")
        try:
            sup.launch()
        except (HostError, OSError) as exc:
            raise UserError(f"could not start the job: {exc}; every started task was stopped") from None
        if args.detach:
            sup.detach()
            feed.close()
            sup.wait()
            print(f"{run_id} detached; follow it with `distlaunch attach {run_id}`, "
                  f"stop it with `distlaunch down {run_id}`")
            return 0
        if tui:
            run_dashboard_for(sup, feed, plan, live=True)
        elif args.json:
            JsonPrinter().consume(feed.events())
        else:
            ProgressPrinter().consume(feed.events())
        outcome = sup.wait()
    finally:
        signal.signal(signal.SIGINT, old_int)
        signal.signal(signal.SIGTERM, old_term)
        if server is not None:
            server.close()
        if notifying is not None:
            notifying.finish()
        pre.close()
        rundir.close()
    return report_outcome(sup, outcome, interrupted)


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


def report_outcome(sup: Supervisor, outcome: str | None, interrupted: bool) -> int:
    for host, left in sup.leftovers.items():
        notice(f"host {host}: {len(left)} process(es) of the run survived teardown: "
             + ", ".join(str(p.get("pid")) for p in left))
    if outcome == "detached":
        print(f"{sup.run_id} left running; `distlaunch attach {sup.run_id}` or `distlaunch down {sup.run_id}`")
        return 0
    if outcome == ev.JOB_SUCCEEDED:
        return 0
    if interrupted:
        return 130
    return 1


def run_dashboard_for(sup: Supervisor, feed: Any, plan: Plan, live: bool) -> None:
    from tui.app import run_dashboard

    try:
        result = run_dashboard(feed, sup, title=plan.profile.name, strategy=plan.profile.strategy,
                               hosts_total=len(sup.sessions), live=live, run_dir=sup.rundir.path,
                               bell_on_end=plan.profile.notify.bell)
    except Exception:
        # nothing may be left running because the screen broke: stop the job, then report the crash
        sup.teardown("the dashboard crashed")
        sup.wait(120)
        raise
    if result.action == "teardown" and not result.teardown_requested:
        sup.teardown("torn down from the dashboard")
    elif result.action == "detach":
        sup.detach()
