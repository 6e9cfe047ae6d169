"""`distlaunch prune`: remove finished runs on this machine and their run dirs on every host they used.

A run is removed only when it has ended (Succeeded or Failed) or its launcher died without
detaching long enough ago that no task of it can still run; live and detached runs are never
touched, and neither are the jobs' outputs, which live outside run dirs. A run whose host cannot
be reached is kept, so nothing is left behind on that host unnoticed: prune again later.

Only runs under the state dir are chosen by ``--keep``/``--older-than``: a run dir the user put
elsewhere (``up --run-dir``) is listed as kept, and removed only when named (``prune RUN``, by
run id or path), like any other run named there.
"""

from __future__ import annotations

import argparse
import shutil
import time
from pathlib import Path

from launcher import events as ev
from launcher.errors import HostError, UserError
from launcher.jobs import connect_sessions, notice
from launcher.progressline import Progress
from launcher.rundir import find_run, outside_state_dir, read_state, unlink_from_root
from launcher.runs import RunSummary, list_runs, summarize_run

#: a run that never ended and has nobody following it is treated as dead after this long
#: (far beyond any orphan grace: its tasks have stopped themselves by then)
ABANDONED_AFTER_S = 6 * 3600


def last_activity(run: RunSummary) -> float:
    path = Path(run.dir)
    times = [p.stat().st_mtime for p in (path / "events.jsonl", path / "state.json") if p.exists()]
    return max(times, default=0.0)


def finished(run: RunSummary, now: float) -> bool:
    if run.live is not None:  # live or detached
        return False
    return run.job_state in (ev.JOB_SUCCEEDED, ev.JOB_FAILED) or now - last_activity(run) > ABANDONED_AFTER_S


def select(runs: list[RunSummary], keep: int, older_than_days: float | None, now: float) -> list[RunSummary]:
    """The runs to remove: finished ones past the ``keep`` newest, last active before the cutoff."""
    done = [r for r in runs if finished(r, now)]  # newest first, as list_runs gives them
    chosen = done[keep:]
    if older_than_days is not None:
        cutoff = now - older_than_days * 86400
        chosen = [r for r in chosen if last_activity(r) < cutoff]
    return chosen


def remove_run(run: RunSummary) -> None:
    """Every host's run dir first, then the launcher's: a failure keeps the record for another try."""
    path = Path(run.dir)
    state = read_state(path)
    remote = {name: info for name, info in (state.get("hosts") or {}).items()
              if not str(info.get("base_dir", "")).startswith(str(path) + "/")}
    if remote:
        sessions = connect_sessions({**state, "hosts": remote})
        try:
            for session in sessions.values():
                session.remove_run_dir()
        finally:
            for session in sessions.values():
                session.host.close()
    shutil.rmtree(path)
    if outside_state_dir(path):
        unlink_from_root(run.run, path)


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
        print(f"nothing to prune ({len(runs)} run(s), {len(untouchable)} live or detached)")
        return 0
    failed = 0
    with Progress("pruning", total=len(chosen), unit="runs", enabled=False if args.dry_run else None) as line:
        for run in chosen:
            if args.dry_run:
                print(f"would remove {run.run} ({run.job_state}, hosts: {', '.join(run.hosts) or '-'})")
                continue
            try:
                remove_run(run)
            except (HostError, UserError, OSError) as exc:
                failed += 1
                with line.hold():
                    notice(f"{run.run} kept: {exc}; prune again once that is fixed")
                continue
            finally:
                line.advance()
            line.echo(f"removed {run.run} ({run.job_state}) here and on {len(run.hosts)} host(s)")
    if not args.dry_run:
        print(f"pruned {len(chosen) - failed} run(s); kept {len(runs) - len(chosen) + failed} "
              f"({len(untouchable)} live or detached); outputs are never removed")
    return 1 if failed else 0
