"""`distlaunch up`: read the profile, start the job's supervisor, and follow it to its end.

The profile and plan are read here, so a mistake in them is one line and exit code 2 before
anything starts. The supervisor (supervise/daemon.py) is a process of its own: it prepares the
hosts, launches, runs [notify] and the control socket, and supervises the job to its end
whether or not a terminal follows it; this process is one of its clients (commands/follow.py).
`attach` shares the supervisor's side with `up` (the control socket, [notify], the outcome).
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import resource
import signal
import socket
import sys
import threading
from collections.abc import Callable
from pathlib import Path

from launcher.commands import localnet, notice
from launcher.commands.exposure import exposure_warnings
from launcher.commands.rundirplace import check_new_run_dir
from launcher.commands.shown import Shown
from launcher.errors import UserError
from launcher.paths import check_run_id, runs_root
from launcher.plan import build_plan
from launcher.profile.containeropts import container_warnings
from launcher.profile.overrides import mask_secrets, overrides_from
from launcher.profile.reader import load_profile
from launcher.profile.slurm_env import current_allocation
from launcher.remote.launchclock import LaunchClock
from launcher.rundir import RunDir, new_run_id
from launcher.supervise import daemon
from launcher.telemetry.progressline import mute
from launcher.transport import sshconfig

TYPE_CHECKING = False
if TYPE_CHECKING:
    from launcher.model import Plan
    from launcher.remote.preflight import Preflight
    from launcher.runstate import RunState, SlurmJobRecord
    from launcher.supervise import controlsock
    from launcher.supervise.notify import NotifyFollower
    from launcher.supervise.stopsignals import JobSignals, StopSignals
    from launcher.supervise.supervisor import Supervisor

#: what the supervisor needs once its hosts are prepared: imported by the child on a thread of its
#: own while the preflight waits on the hosts (``WarmImports``), never by `up` before the fork
SUPERVISOR_MODULES = ("launcher.supervise.supervisor", "launcher.supervise.notify", "launcher.runrecord",
                      "launcher.commands.outputsuse")

def _progress(quiet: bool) -> Callable[[str], None]:
    def show(msg: str) -> None:
        if not quiet:
            print(f"... {msg}", file=sys.stderr, flush=True)

    return show


def run_up(args: argparse.Namespace) -> int:
    clock = LaunchClock.begin()  # `up`'s imports are done: the launch's phases count from the process's start
    if args.run_id is not None:
        check_run_id(args.run_id)  # it names a dir under the state root: never a path out of it
    if args.json:
        mute()  # stderr belongs to whatever reads the event stream
    profile = load_profile(Path(args.profile), overrides_from(args))
    plan = build_plan(profile, sshconfig.resolve_addresses(profile))
    for warning in exposure_warnings(plan):
        notice(f"warning: {warning}")
    network = localnet.decide(plan, args.profile)
    if network.line:
        notice(f"{'warning: ' if network.warning else ''}{network.line}")
    if network.private:
        plan = dataclasses.replace(plan, private_network=True)
    for warning in container_warnings(profile):  # options that undo what distlaunch promises
        notice(f"warning: {mask_secrets(warning, set(profile.secrets))}")
    tui = not (args.no_tui or args.json or args.detach)
    if tui and not (sys.stdin.isatty() and sys.stdout.isatty()):
        notice("not a terminal: showing progress lines instead of the dashboard (--no-tui)")
        tui = False
    shown = Shown(tui=tui, json=args.json, title=profile.name, strategy=profile.strategy,
                  hosts_total=len({t.host for t in plan.tasks}), bell=profile.notify.bell)
    if profile.slurm is not None and current_allocation() is None:  # [slurm] on a login node: sbatch the
        from launcher.commands.submit import submit_run  # job, then watch it wait and run (commands/submit.py)

        return submit_run(args, profile, shown)
    raise_open_files_limit(len({t.host for t in plan.tasks}))
    run_id = args.run_id or new_run_id(profile.name)
    target = Path(args.run_dir).expanduser() if args.run_dir else runs_root() / run_id
    slurm_job: SlurmJobRecord | None = None
    if current_allocation() is not None:  # the batch job of a run `up` submitted continues it
        from launcher.commands.submit import await_submitted, submitted_job

        slurm_job = submitted_job(target, run_id)
        if getattr(args, "continue_submitted", False) and slurm_job is None:
            slurm_job = await_submitted(target, run_id)
    if args.run_dir and slurm_job is None:
        check_new_run_dir(target)  # a new or empty dir, not a link: prune removes what distlaunch writes there
    if slurm_job is None and (target / "state.json").exists():
        raise UserError(f"{target} already holds run {run_id}; give another --run-id or --run-dir")
    # a requeued job's batch script: the run its last allocation left goes on, with its counts
    previous: RunState | None = None
    if slurm_job is not None:
        from launcher.commands.submit import claim_submitted
        from launcher.runstate import load_run_state

        previous = load_run_state(target) if slurm_job.requeues else None
    rundir = RunDir.create(run_id, Path(args.run_dir) if args.run_dir else None)
    if slurm_job is not None:
        claim_submitted(rundir, slurm_job)
    hint = supervision_hint(plan)
    if hint:
        notice(hint)
    _progress(quiet=False)(f"run {run_id} ({rundir.path})")
    signal.signal(signal.SIGCHLD, signal.SIG_DFL)  # inherited as ignored, the supervisor could not be reaped
    child = daemon.spawn(rundir.path, run_id, lambda: supervise_new_run(plan, rundir, clock, slurm_job, previous))
    # the client's own modules load here, while the supervisor prepares the hosts, not before the fork
    from launcher.commands.follow import follow_supervisor

    return follow_supervisor(run_id, rundir.path, child=child, shown=shown, detach=args.detach, log_from=0)


def supervision_hint(plan: Plan) -> str | None:
    """One line when this machine is none of the job's hosts: the supervisor runs here, so this
    machine must stay up (and awake) for as long as the job runs."""
    here = {"localhost", "127.0.0.1", "::1", socket.gethostname()}
    if any(h.transport == "local" or h.address in here for h in plan.profile.hosts.values()):
        return None
    if all(h.transport == "slurm" for h in plan.profile.hosts.values()):
        return None  # `up` runs inside the allocation (its batch script or salloc shell)
    return ("hint: this machine supervises the job (restarts, its end, [notify]); for a job of hours run `up` "
            "on a login or head node that stays up, not on a laptop that sleeps")


def supervise_new_run(plan: Plan, rundir: RunDir, clock: LaunchClock | None = None,
                      slurm_job: SlurmJobRecord | None = None, previous: RunState | None = None) -> int:
    """The supervisor process of a new run (supervise/daemon.py forked it): prepare the hosts,
    launch, supervise to the end; the exit code is the job's outcome. ``clock``: the launch's
    phase stamps, kept in state.json (launcher/remote/launchclock.py); ``slurm_job``: the Slurm
    job `up` submitted the run as, recorded in its state; ``previous``: the run as a requeued job's
    last allocation left it (supervise/slurmlife.py)."""
    if clock is not None:
        clock.mark("forked")
    from launcher.supervise import controlsock

    listener = controlsock.listen(rundir.run_id)  # first: a supervisor no client can reach must not start a job
    try:
        return _prepare_and_supervise(plan, rundir, listener, clock, slurm_job, previous)
    finally:
        listener.close()  # where the job never got a server (a preflight that failed, say): no name left


class WarmImports:
    """Import modules on a thread of their own: in the supervisor, once the hosts are connected
    and it waits for their preflight answers (the hosts' Pythons boot meanwhile), so that the
    ~0.1 s of the supervisor's own modules is off the launch's path. Started any earlier, it
    would take the interpreter from the connections' handshakes. A module the main thread needs
    meanwhile waits for the import under way (Python's per-module import locks; launcher/ has no
    import cycle that could make the two wait on each other). What fails here fails again, with
    its traceback, where the main thread imports it."""

    def __init__(self, modules: tuple[str, ...]) -> None:
        self.modules = modules
        self._thread: threading.Thread | None = None

    def start(self) -> None:
        if self._thread is None:
            self._thread = threading.Thread(target=self._warm, name="warm-imports", daemon=True)
            self._thread.start()

    def join(self) -> None:
        if self._thread is not None:
            self._thread.join()

    def _warm(self) -> None:
        import importlib

        for name in self.modules:
            with contextlib.suppress(Exception):
                importlib.import_module(name)


def _prepare_and_supervise(plan: Plan, rundir: RunDir, listener: controlsock.ControlListener,
                           clock: LaunchClock | None = None, slurm_job: SlurmJobRecord | None = None,
                           previous: RunState | None = None) -> int:
    from launcher import events as ev
    from launcher.remote.preflight import prepare_hosts
    from launcher.supervise.stopsignals import JobSignals, StoppedBeforeStart

    run_id = rundir.run_id
    progress = _progress(quiet=False)
    signals = JobSignals(run_id)
    with signals:
        pre: Preflight | None = None
        try:
            warming = WarmImports(SUPERVISOR_MODULES)
            pre = prepare_hosts(plan, run_id, rundir.path / "hosts", notice, progress, clock=clock,
                                connected=warming.start)
            if clock is not None:
                clock.mark("checked")
            warming.join()  # the modules below: imported by now, or (failed there) imported here
            from launcher.runrecord import write_record
            from launcher.supervise.supervisor import Supervisor

            _refuse_outputs_in_use(run_id, pre)
            write_record(rundir.path, plan.profile, pre.versions)
            sup = Supervisor(plan, rundir, pre.sessions, pre.ports, on_notice=notice)
            sup.profiler_ports = dict(pre.profiler_ports)
            sup.launch_clock = clock
            sup.slurm_job = slurm_job
            if previous is not None:
                sup.carry_over(previous)
            signals.bind(sup)
        except StoppedBeforeStart as stop:
            if pre is not None:
                pre.close()
            rundir.append(ev.job_event(run_id, ev.JOB_STOPPED, f"{stop} before any task started"))
            rundir.close()
            notice(f"{stop} before any task started; nothing runs on any host")
            return signals.exit_code or 1
        outcome = _supervise(plan, rundir, pre, sup, signals, progress, listener)
    return report_outcome(sup, outcome, signals.exit_code)


def _refuse_outputs_in_use(run_id: str, pre: Preflight) -> None:
    """Before any task starts: no other live run of the user's writes these outputs on these hosts
    (two `make demo` at once under one account would checkpoint over each other)."""
    from launcher.commands.outputsuse import outputs_in_use, where
    from launcher.remote.preflight import PreflightError
    from launcher.runstate import host_to_json

    ours = {name: (where(host_to_json(s.config)), s.outputs_dir) for name, s in pre.sessions.items()}
    problems = outputs_in_use(run_id, ours)
    if problems:
        pre.close()
        raise PreflightError(problems)


def _supervise(plan: Plan, rundir: RunDir, pre: Preflight, sup: Supervisor, signals: JobSignals,
               progress: Callable[[str], None], listener: controlsock.ControlListener) -> str | None:
    """Launch the job and supervise it until it ends; its clients follow it on the control socket."""
    from launcher.errors import HostError

    notifying = follow_notify(sup)
    server = start_control_server(sup, listener, signals)
    try:
        progress(f"starting {len(plan.tasks)} tasks on {len(pre.sessions)} host(s)")
        if sup.launch_clock is not None:
            sup.launch_clock.mark("supervisor")
        try:
            sup.launch()
        except (HostError, OSError) as exc:
            raise UserError(f"could not start the job: {exc}; every started task was stopped") from None
        return wait_for_end(sup)
    finally:
        server.close()
        if notifying is not None:
            notifying.finish()
        pre.close()
        rundir.close()


def wait_for_end(sup: Supervisor) -> str | None:
    """Wait in steps: the supervisor's signal handlers run on this (the main) thread."""
    while sup.wait(0.5) is None:
        pass
    return sup.outcome


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


def follow_notify(sup: Supervisor, history_until: float | None = None) -> NotifyFollower | None:
    """Run the profile's [notify] command for this job's task failures and its end (None: no command)."""
    from launcher.supervise.notify import Notifier, NotifyFollower

    config = sup.profile.notify
    if not config.command and not config.webhook:
        return None
    notifier = Notifier(config, run_id=sup.run_id, run_dir=sup.rundir.path, profile_name=sup.profile.name,
                        cwd=sup.profile.directory, on_warning=notice, history_until=history_until)
    return NotifyFollower(notifier, sup.subscribe().events())


def start_control_server(sup: Supervisor, listener: controlsock.ControlListener,
                         signals: StopSignals | None = None) -> controlsock.ControlServer:
    """Serve the job's clients (they follow it and act through it) on ``listener``, the socket
    ``controlsock.listen`` took for the run. ``signals``: the supervisor's own stop signals,
    whose code a follower of the whole job exits with."""
    from launcher.protocol.controllines import job_exit_code
    from launcher.supervise import controlsock

    def exit_code(outcome: str | None) -> int:
        return job_exit_code(outcome, signals.exit_code if signals is not None else None)

    return controlsock.ControlServer(sup.run_id, sup, exit_code, listener)


def report_outcome(sup: Supervisor, outcome: str | None, stopped_code: int | None) -> int:
    """The launcher's exit code; ``stopped_code``: the stop signal's code (130, 143) if one came."""
    from launcher.protocol.controllines import job_exit_code

    for host, left in sup.leftovers.items():
        notice(f"host {host}: {len(left)} process(es) or container(s) of the run survived teardown: "
             + ", ".join(str(p.get("pid") or p.get("container")) for p in left))
    return job_exit_code(outcome, stopped_code)
