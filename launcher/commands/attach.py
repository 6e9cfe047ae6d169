"""`distlaunch attach RUN`: show a running job again.

A run whose supervisor lives is followed as `up` follows it (history first, then live; several
clients at once). A run whose supervisor died (kill -9, a reboot) within the orphan grace is taken
over by a new supervisor, forked here, from its state.json: the profile is planned again with the
ports the run already uses, every host is reconnected, and each agent's event file is followed
from where the last supervisor stopped, so the history is complete and policies apply again. A
host that does not answer (a partition) does not stop the attach while another does: it is
followed once the supervisor's reconnect loop reaches it, as after a link lost mid-run; otherwise
its tasks' orphan grace would run out on every host while the user waits for one link.

`distlaunch replay RUN` opens the dashboard on a finished run's events.
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import signal
import sys
from pathlib import Path

from launcher import events as ev
from launcher.commands import notice
from launcher.commands.follow import follow_supervisor
from launcher.commands.runhosts import open_sessions
from launcher.commands.shown import Shown
from launcher.commands.slurmwatch import elsewhere, follow_submitted
from launcher.commands.up import follow_notify, report_outcome, start_control_server, wait_for_end
from launcher.errors import UserError
from launcher.model import Plan
from launcher.placement import recorded_placement
from launcher.plan import build_plan
from launcher.privatedir import open_trusted
from launcher.remote.preflight import PreflightError
from launcher.rundir import EVENTS_FILE, SUPERVISOR_LOG, RunDir
from launcher.runlookup import find_run, read_events, skipped_note
from launcher.runrecord import load_recorded_profile
from launcher.runstate import RunState, host_from_json, load_run_state
from launcher.supervise import controlsock, daemon
from launcher.supervise.stopsignals import JobSignals
from launcher.supervise.supervisor import Supervisor
from launcher.telemetry.progressline import mute
from launcher.transport import sshconfig


def attach_run(path: Path, tui: bool, as_json: bool = False) -> int:
    state = load_run_state(path)
    run_id = state.run_id
    if state.outcome in ev.JOB_ENDS:
        raise UserError(f"run {run_id} already ended ({state.outcome}); see it with `distlaunch replay {run_id}`")
    if as_json:
        mute()
    shown = Shown(tui=tui and not as_json and sys.stdin.isatty() and sys.stdout.isatty(), json=as_json,
                  title=state.name or run_id, strategy=state.strategy or "", hosts_total=len(state.hosts))
    if state.slurm is not None and (state.awaiting_slurm or elsewhere(state)):
        # submitted to Slurm: its job waits, or its supervisor runs on the job's node, not here
        return follow_submitted(path, shown, own=False)
    if state.supervisor_alive():  # follow the live supervisor: history first, then live
        return follow_supervisor(run_id, path, child=None, shown=shown, attach=True)
    # its supervisor is gone (killed, the machine rebooted): a new one adopts the run
    masked = [item.partition("=")[0] for item in state.overrides_set if "****" in item]
    if masked:
        raise UserError(f"run {run_id} was started with a secret in --set {', '.join(masked)}, which is kept "
                        "nowhere, so no new supervisor can restart its tasks; stop it with `distlaunch down "
                        f"{run_id}` and give secrets as --set 'KEY=\"${{env:NAME}}\"' next time")
    profile = load_recorded_profile(path, state)  # as the run started: the file may have been edited since
    added = {name: host_from_json(r.config) for name, r in state.hosts.items()
             if name not in profile.hosts and r.config is not None}
    if added:  # hosts the run took in while it ran (add-host, host_discovery)
        profile = dataclasses.replace(profile, hosts={**profile.hosts, **added})
    addresses = sshconfig.resolve_addresses(profile)
    plan = build_plan(profile, addresses)
    known = set(state.tasks)
    try:  # where the run has moved tasks off a lost host, or gone on without them
        plan = recorded_placement(plan, {t: r.host for t, r in state.tasks.items()}, addresses)
    except KeyError:
        known = set()
    if {t.task_id for t in plan.tasks} != known:
        raise UserError(f"{profile.path}: its tasks changed since run {run_id} started; attach needs the "
                        "profile as it was (restore it, or `distlaunch down` the run)")
    shown.bell = profile.notify.bell
    print(f"... no supervisor follows {run_id}: a new one takes it over", file=sys.stderr, flush=True)
    signal.signal(signal.SIGCHLD, signal.SIG_DFL)  # inherited as ignored, the supervisor could not be reaped
    log = path / SUPERVISOR_LOG
    log_from = log.stat().st_size if log.exists() else 0  # the new supervisor's lines, not the last one's
    child = daemon.spawn(path, run_id, lambda: adopt_run(path, state, plan))
    return follow_supervisor(run_id, path, child=child, shown=shown, attach=True, log_from=log_from)


def adopt_run(path: Path, state: RunState, plan: Plan) -> int:
    """The supervisor process of a run whose supervisor died: reconnect every host, follow each
    agent's event file from where the last supervisor stopped (so the history is complete and
    policies apply again), supervise to the end."""
    run_id = state.run_id
    ports = {t: info.port for t, info in state.tasks.items() if info.port is not None}
    listener = controlsock.listen(run_id)  # first: a supervisor no client can reach must not adopt the run
    print(f"... reconnecting to {len(state.hosts)} host(s) of {run_id}", file=sys.stderr, flush=True)
    sessions, unreachable = open_sessions(state)
    if unreachable and len(unreachable) == len(sessions):
        for session in sessions.values():
            session.host.close()
        listener.close()
        raise PreflightError(list(unreachable.values()))
    for why in unreachable.values():  # a partition must not keep the rest of the job from its supervisor
        notice(f"{why}; attached without it, reconnecting in the background")
    rundir = RunDir.open(path)
    sup = Supervisor(plan, rundir, sessions, ports, on_notice=notice)
    sup.slurm_job = state.slurm
    sup.profiler_ports = {t: info.profiler_port for t, info in state.tasks.items() if info.profiler_port is not None}
    history = list(read_events(path))
    notifying = follow_notify(sup, history_until=max((e.ts for e in history), default=None))
    signals = JobSignals(run_id)
    server = None
    try:
        with signals:
            signals.bind(sup)
            sup.resume(state, history, unreachable=unreachable)
            server = start_control_server(sup, listener, signals)
            outcome = wait_for_end(sup)
    finally:
        if server is not None:
            server.close()
        else:
            listener.close()
        if notifying is not None:
            notifying.finish()
        for session in sessions.values():
            session.host.close()
        rundir.close()
    return report_outcome(sup, outcome, stopped_code=signals.exit_code)


def run_attach(args: argparse.Namespace) -> int:
    return attach_run(find_run(args.run), tui=not args.no_tui, as_json=args.json)


def run_replay(args: argparse.Namespace) -> int:
    from tui.app import run_dashboard
    from tui.replay import ReplaySource

    path = find_run(args.run)
    state = load_run_state(path)
    with contextlib.suppress(FileNotFoundError), open_trusted(path / EVENTS_FILE, "the run's events"):
        pass  # a FIFO, a link or another's file there: one line now, not a dashboard that waits on it
    source = ReplaySource(path / EVENTS_FILE, speed=args.speed)
    run_dashboard(source, None, title=str(state.name), strategy=str(state.strategy), hosts_total=len(state.hosts),
                  live=False, run_dir=path)
    note = skipped_note(source.skipped_lines, path / EVENTS_FILE)  # of the lines replayed before the end
    if note is not None:
        print(note, file=sys.stderr)
    return 0
