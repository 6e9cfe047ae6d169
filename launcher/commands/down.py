"""`distlaunch down` and `restart`: act on a run from another terminal; `prune`: remove finished runs.

`distlaunch prune`: remove finished runs on this machine and their run dirs on every host they used.

A run is removed only when it has ended (Succeeded, Failed or Stopped) or its supervisor died long enough
ago that no task of it can still run; live and supervised runs are never touched, and neither are
the jobs' outputs, which live outside run dirs. A run whose host cannot be reached is kept, so
nothing is left behind on that host unnoticed: prune again later.

Only runs under the state dir are chosen by ``--keep``/``--older-than``: a run dir the user put
elsewhere (``up --run-dir``) is listed as kept, and removed only when named (``prune RUN``, by
run id or path), like any other run named there.
"""

from __future__ import annotations

import argparse
import dataclasses
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from launcher import events as ev
from launcher.agent import pid_alive
from launcher.commands import notice
from launcher.commands.runhosts import connect_sessions
from launcher.commands.slurmrecord import waiting_words
from launcher.commands.slurmwatch import cancel_waiting
from launcher.commands.status import require_task
from launcher.errors import HostError, HostGone, UserError
from launcher.protocol.controllines import Request
from launcher.remote.session import HostSession
from launcher.runclean import remove_run_dir
from launcher.rundir import DOWN_MARKER, RunDir, unlink_from_root
from launcher.runlookup import RunSummary, find_run, list_runs, outside_state_dir, summarize_run
from launcher.runstate import load_run_state
from launcher.supervise import controlclient
from launcher.telemetry.progressline import Progress
from launcher.transport import slurmqueue

#: how long `down` waits for Slurm to end a submitted run's job after scancel
SLURM_END_SECONDS = 60.0
#: how long `down` waits for a live supervisor to finish the teardown it asked for
LAUNCHER_TEARDOWN_SECONDS = 120.0


def run_down(args: argparse.Namespace) -> int:
    path = find_run(args.run)
    state = load_run_state(path)
    run_id = state.run_id
    if state.awaiting_slurm:  # its job has not started the run: cancelling the job is all there is
        assert state.slurm is not None
        info = cancel_waiting(path, f"stopped by `distlaunch down` {waiting_words(state)}")
        state = load_run_state(path)
        if state.supervisor_pid is None:
            still = "" if info is not None and info.ended else " (Slurm has not confirmed its end yet: run down again)"
            nothing = "; nothing of the run ran" if not state.slurm or not state.slurm.requeues else \
                "; nothing of the run runs (its outputs and checkpoints are kept)"
            print(f"{run_id}: Slurm job {state.slurm.job_id if state.slurm else '?'} cancelled "
                  f"{waiting_words(state)}{still}{nothing}")
            return 0 if not still else 1
    try:
        (path / DOWN_MARKER).touch()
    except OSError as exc:  # a full disk: the stop goes on, only the marker is missing
        notice(f"cannot mark {path} as being downed ({exc.strerror}); stopping it all the same")
    torn_down = False  # the supervisor's own teardown stopped every agent and swept every host
    if controlclient.ask(run_id, Request("teardown", reason="stopped by `distlaunch down`")) is not None:
        pid = state.supervisor_pid
        print(f"asked the supervisor of {run_id} (pid {pid}) to tear down")
        # its own teardown stops and sweeps every host: wait for it, then check behind it (on Slurm
        # the allocation may end with the supervisor, and a check's steps with it)
        deadline = time.monotonic() + LAUNCHER_TEARDOWN_SECONDS
        while load_run_state(path).supervisor_alive() and time.monotonic() < deadline:
            time.sleep(0.2)
        after = load_run_state(path)  # `outcome` is written once its teardown swept every host
        torn_down = not after.supervisor_alive() and after.outcome is not None
        # then the process itself ends ([notify] of the job's end runs first, bounded by its timeout)
        while pid is not None and after.supervisor_here() and pid_alive(pid) and time.monotonic() < deadline:
            time.sleep(0.1)  # a supervisor on another node's pid means nothing here
    gone: list[str] = []  # hosts whose Slurm allocation ended: nothing of the run can be left there
    sessions = connect_sessions(state, gone)
    for why in gone:
        notice(why)
    grace = 10.0
    leftovers: dict[str, list[dict[str, Any]]] = {}

    keep_files = bool(getattr(args, "keep_host_files", False))
    not_removed: list[str] = []
    # a run dir the user put outside the state dir is theirs, with the local hosts' dirs in it:
    # down leaves it whole (`prune RUN` removes it); other hosts' run dirs are distlaunch's own
    outside = outside_state_dir(path)
    removed: list[str] = []

    def down(session: HostSession) -> None:
        slugs = [t.slug for t in state.tasks.values() if t.host == session.name]
        try:
            if not torn_down:  # else the check behind it is the sweep alone (it kills what it finds)
                session.stop_tasks(slugs, grace, exit_agent=True)
            left = session.sweep(kill=True)
        except HostGone as exc:  # its allocation ended under us (Slurm said so): nothing is left there
            notice(str(exc))
            gone.append(str(exc))
            return
        if left:
            leftovers[session.name] = left
        elif not keep_files and not (outside and Path(session.base_dir).is_relative_to(path)):
            try:  # only once nothing of the run runs there; outputs are never touched
                left_there = session.remove_run_dir()
                if not left_there:
                    removed.append(session.name)
                else:
                    notice(f"host {session.name}: kept {session.base_dir}: it holds files distlaunch did not "
                           f"write ({', '.join(left_there[:5])}); remove them yourself")
            except HostError as exc:
                not_removed.append(str(exc))

    try:
        with ThreadPoolExecutor(max_workers=max(1, len(sessions))) as pool:
            list(pool.map(down, sessions.values()))
    finally:
        for s in sessions.values():
            s.host.end_run()
    if state.slurm is not None:  # a run `up` submitted: its job ends too (its batch script, its allocation)
        _end_slurm_job(state.slurm.job_id, state.slurm.cluster)
    if leftovers:
        for host, left in leftovers.items():
            notice(f"host {host}: still running after down: "
                 + ", ".join(f"{p.get('pid') or p.get('container')} ({p.get('cmdline', '')[:60]})" for p in left))
        return 1
    for problem in not_removed:
        notice(problem)
    _record_stopped_by_down(path)
    kept = "; host run dirs kept" if keep_files else ("" if not_removed or not removed else "; host run dirs removed")
    if outside:
        kept += f"; {path} kept: outside the state dir (remove it yourself or `distlaunch prune {run_id}`)"
    ended = (f" ({len(gone)} of them in a Slurm allocation that ended, which Slurm ends every process of)"
             if gone else "")
    print(f"{run_id}: stopped on {len(state.hosts)} host(s){ended}; no process of the run is left{kept}")
    return 0


def _end_slurm_job(job_id: str, cluster: str | None = None) -> None:
    problem = slurmqueue.cancel(job_id, cluster=cluster)
    info = slurmqueue.wait_ended(job_id, SLURM_END_SECONDS, cluster=cluster)
    if problem is not None or info is None or not info.ended:
        notice(f"Slurm job {job_id} " + (problem or f"has not ended {SLURM_END_SECONDS:.0f} s after scancel")
               + f"; `squeue -j {job_id}` shows it")


def _record_stopped_by_down(path: Path) -> None:
    """A run no supervisor follows (lost) ends with its `down`: the job event and
    state.json say why, so that `runs` shows it ended and `prune` may take it."""
    state = load_run_state(path)
    if state.supervisor_alive() or state.job_state in ev.JOB_ENDS:
        return  # a launcher recorded its own end
    reason = "stopped by `distlaunch down`"
    rundir = RunDir.open(path)
    rundir.on_problem = notice  # a full disk: said, and the stop still counts
    try:
        rundir.append(ev.job_event(state.run_id, ev.JOB_STOPPED, reason))
        rundir.write_state(dataclasses.replace(state, job_state=ev.JOB_STOPPED, job_reason=reason).to_json())
    finally:
        rundir.close()


def run_restart(args: argparse.Namespace) -> int:
    path = find_run(args.run)
    state = load_run_state(path)
    require_task(state, args.task)
    answer = controlclient.ask(state.run_id, Request("restart", task=args.task))
    if answer is None:
        raise UserError(f"run {state.run_id} has no live launcher; `distlaunch attach {state.run_id}` "
                        "first, then restart from there")
    if not answer.ok:
        raise UserError(f"restart refused: {answer.error}")
    print(f"restart of {args.task} requested; watch it with `distlaunch status {state.run_id}`")
    return 0


#: a run that never ended and has nobody following it is treated as dead after this long
#: (far beyond any orphan grace: its tasks have stopped themselves by then)
ABANDONED_AFTER_S = 6 * 3600


def last_activity(run: RunSummary) -> float:
    path = Path(run.dir)
    times = [p.stat().st_mtime for p in (path / "events.jsonl", path / "state.json") if p.exists()]
    return max(times, default=0.0)


def finished(run: RunSummary, now: float) -> bool:
    if run.live is not None:  # live, supervised or lost
        return False
    return run.job_state in ev.JOB_ENDS or now - last_activity(run) > ABANDONED_AFTER_S


def select(runs: list[RunSummary], keep: int, older_than_days: float | None, now: float) -> list[RunSummary]:
    """The runs to remove: finished ones past the ``keep`` newest, last active before the cutoff."""
    done = [r for r in runs if finished(r, now)]  # newest first, as list_runs gives them
    chosen = done[keep:]
    if older_than_days is not None:
        cutoff = now - older_than_days * 86400
        chosen = [r for r in chosen if last_activity(r) < cutoff]
    return chosen


def remove_run(run: RunSummary) -> list[str]:
    """Every host's run dir first, then the launcher's: a failure keeps the record for another try.
    Only what distlaunch wrote goes (launcher/runclean.py); the paths left, each with its folder."""
    path = Path(run.dir)
    state = load_run_state(path)
    remote = {name: info for name, info in state.hosts.items() if not info.base_dir.startswith(str(path) + "/")}
    left: list[str] = []
    if remote:
        sessions = connect_sessions(dataclasses.replace(state, hosts=remote))
        try:
            for session in sessions.values():
                left += [f"{session.name}:{session.base_dir}/{name}" for name in session.remove_run_dir()]
        finally:
            for session in sessions.values():
                session.host.close()
    left += [str(path / name) for name in remove_run_dir(path, run.run)]
    if outside_state_dir(path):
        unlink_from_root(run.run, path)
    controlclient.remove_stale(run.run)  # a supervisor killed outright leaves its socket's name
    return left


def named_runs(refs: list[str], now: float) -> list[RunSummary]:
    """The runs named on the command line (run ids or paths), each finished, else a user error."""
    named: list[RunSummary] = []
    for ref in refs:
        path = find_run(ref)
        run = summarize_run(path, now)
        if run is None:
            raise UserError(f"prune: {path}: unreadable run state; remove it yourself")
        if not finished(run, now):
            raise UserError(f"prune: {run.run} is {run.live or 'not finished'}; stop it first with "
                            f"`distlaunch down {run.run}`")
        if run not in named:
            named.append(run)
    return named


def run_prune(args: argparse.Namespace) -> int:
    refs: list[str] = list(getattr(args, "runs", None) or [])
    if refs and (args.keep is not None or args.older_than is not None):
        raise UserError("prune: name runs or give --keep/--older-than, not both")
    keep = 0 if args.keep is None else args.keep
    if keep < 0 or (args.older_than is not None and args.older_than < 0):
        raise UserError("prune: --keep and --older-than take numbers >= 0")
    now = time.time()
    if refs:
        runs = chosen = named_runs(refs, now)
    else:
        runs = list_runs(now=now)
        chosen = select(runs, keep, args.older_than, now)
        for run in [r for r in chosen if outside_state_dir(Path(r.dir))]:
            chosen.remove(run)
            print(f"kept {run.run} ({run.dir}): outside the state dir; remove it yourself or name it "
                  f"(`distlaunch prune {run.run}`)")
    untouchable = [r for r in runs if r.live is not None]
    if not chosen:
        print(f"nothing to prune ({len(runs)} run(s), {len(untouchable)} live or supervised)")
        return 0
    failed = 0
    with Progress("pruning", total=len(chosen), unit="runs", enabled=False if args.dry_run else None) as line:
        for run in chosen:
            if args.dry_run:
                print(f"would remove {run.run} ({run.job_state}, hosts: {', '.join(run.hosts) or '-'})")
                continue
            try:
                left = remove_run(run)
            except (HostError, UserError, OSError) as exc:
                failed += 1
                with line.hold():
                    notice(f"{run.run} kept: {exc}; prune again once that is fixed")
                continue
            finally:
                line.advance()
            kept = (f"; kept what distlaunch did not write: {', '.join(left[:5])}{' ...' if len(left) > 5 else ''}"
                    if left else "")
            line.echo(f"removed {run.run} ({run.job_state}) here and on {len(run.hosts)} host(s){kept}")
    if not args.dry_run:
        print(f"pruned {len(chosen) - failed} run(s); kept {len(runs) - len(chosen) + failed} "
              f"({len(untouchable)} live or supervised); outputs are never removed")
    return 1 if failed else 0
