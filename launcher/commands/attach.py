"""`distlaunch attach RUN`: become the launcher of a running job again.

A detached run (or one whose launcher died within the orphan grace) is taken over from its
state.json: the profile is planned again with the ports the run already uses, every host is
reconnected, and each agent's event file is followed from where the last launcher stopped,
so the history is complete and policies apply again. A host that does not answer (a partition)
does not stop the attach while another does: it is followed once the supervisor's reconnect
loop reaches it, as after a link lost mid-run; otherwise its tasks' orphan grace would run out
on every host while the user waits for one link.

`distlaunch replay RUN` opens the dashboard on a finished run's events.
"""

from __future__ import annotations

import argparse
import signal
import sys
from pathlib import Path

from launcher import events as ev
from launcher.commands import notice
from launcher.commands.runhosts import open_sessions
from launcher.commands.up import follow_notify, report_outcome, run_dashboard_for, start_control_server
from launcher.errors import UserError
from launcher.plan import build_plan
from launcher.remote.preflight import PreflightError
from launcher.rundir import (
    RunDir,
    find_run,
    launcher_alive,
    read_events,
    read_state,
)
from launcher.runrecord import load_recorded_profile
from launcher.supervise.stopsignals import StopSignals
from launcher.supervise.supervisor import Supervisor
from launcher.telemetry.printer import ProgressPrinter


def attach_run(path: Path, tui: bool) -> int:
    state = read_state(path)
    run_id = str(state["run_id"])
    if state.get("outcome") in (ev.JOB_SUCCEEDED, ev.JOB_FAILED):
        raise UserError(f"run {run_id} already ended ({state['outcome']}); see it with `distlaunch replay {run_id}`")
    if launcher_alive(state) and not state.get("detached"):
        raise UserError(f"run {run_id} is still followed by its launcher (pid {state['launcher_pid']}); "
                        f"use that terminal, or `distlaunch status {run_id}`")
    profile = load_recorded_profile(path, state)  # as the run started: the file may have been edited since
    plan = build_plan(profile)
    known = set(state.get("tasks", {}))
    if {t.task_id for t in plan.tasks} != known:
        raise UserError(f"{profile.path}: its tasks changed since run {run_id} started; attach needs the "
                        "profile as it was (restore it, or `distlaunch down` the run)")
    ports = {t: int(info["port"]) for t, info in state["tasks"].items()}
    print(f"... reconnecting to {len(state.get('hosts', {}))} host(s) of {run_id}", file=sys.stderr)
    sessions, unreachable = open_sessions(state)
    if unreachable and len(unreachable) == len(sessions):
        for session in sessions.values():
            session.host.close()
        raise PreflightError(list(unreachable.values()))
    for why in unreachable.values():  # a partition must not keep the rest of the job from its launcher
        notice(f"{why}; attached without it, reconnecting in the background")
    rundir = RunDir.open(path)
    sup = Supervisor(plan, rundir, sessions, ports, on_notice=notice)
    feed = sup.subscribe()
    history = list(read_events(path))
    notifying = follow_notify(sup, history_until=max((e.ts for e in history), default=None))
    sup.resume(state, history, unreachable=unreachable)
    server = start_control_server(run_id, sup)
    # SIGTERM stops the job and SIGHUP detaches it, as for `up`; Ctrl-C detaches (below)
    signals = StopSignals(lambda reason, origin: sup.teardown(reason, origin),
                          lambda: sup.detach(origin="SIGHUP"), signums=(signal.SIGTERM, signal.SIGHUP))
    try:
        with signals:
            try:
                if tui and sys.stdout.isatty():
                    run_dashboard_for(sup, feed, plan, live=True, signals=signals)
                else:
                    ProgressPrinter().consume(feed.events())
                outcome = sup.wait()
            except KeyboardInterrupt:
                sup.detach()
                outcome = sup.wait()
    finally:
        if server is not None:
            server.close()
        if notifying is not None:
            notifying.finish()
        for session in sessions.values():
            session.host.close()
        rundir.close()
    return report_outcome(sup, outcome, stopped_code=signals.exit_code)


def run_attach(args: argparse.Namespace) -> int:
    return attach_run(find_run(args.run), tui=not args.no_tui)


def run_replay(args: argparse.Namespace) -> int:
    from tui.app import run_dashboard
    from tui.replay import ReplaySource

    path = find_run(args.run)
    state = read_state(path)
    source = ReplaySource(path / "events.jsonl", speed=args.speed)
    run_dashboard(source, None, title=str(state.get("name")), strategy=str(state.get("strategy")),
                  hosts_total=len(state.get("hosts", {})), live=False, run_dir=path)
    return 0
