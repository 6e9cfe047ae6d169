"""`distlaunch up PROFILE` with [slurm] outside an allocation: submit the job with sbatch, then watch it.

The run is made here, on the shared filesystem (its id, its dir, a state.json naming the Slurm job),
and the batch script (``export/sbatch.py``'s, written into the run dir) runs ``distlaunch up
--run-id ID --run-dir DIR`` inside the allocation, which continues that same run: one run, whose
supervisor lives inside the job, where it is safe, and whose clients (this `up`, `attach`,
`status`, `down`, `runs`) work from the login node for the job's whole life
(``commands/slurmwatch.py``). Like TorchX's Slurm scheduler, the job is what Slurm sees: its
name is the profile's, its output is kept (in the run dir), and ``scancel`` ends it.
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import socket
import sys
import time
from pathlib import Path

from launcher import events as ev
from launcher.commands.rundirplace import check_new_run_dir
from launcher.commands.shown import Shown
from launcher.commands.slurmwatch import follow_submitted, refresh
from launcher.errors import UserError
from launcher.export.sbatch import SubmittedRun, sbatch_script
from launcher.model import Profile
from launcher.paths import runs_root
from launcher.profile.overrides import mask_secrets
from launcher.profile.slurm_env import current_allocation, restart_count
from launcher.runclean import remove_run_dir
from launcher.rundir import BATCH_OUTPUT, BATCH_SCRIPT, PRIVATE_FILE, STATE_FILE, RunDir, new_run_id, unlink_from_root
from launcher.runstate import RunState, SlurmJobRecord, load_run_state
from launcher.transport import slurmqueue


def submits(profile: Profile) -> bool:
    """Does `up` submit this profile (a [slurm] table, and no allocation around this process)?"""
    return profile.slurm is not None and current_allocation() is None


def submit_run(args: argparse.Namespace, profile: Profile, shown: Shown) -> int:
    slurmqueue.require_sbatch()
    sets = tuple(getattr(args, "sets", ()) or ())
    secret = [item.partition("=")[0] for item in sets if mask_secrets(item, set(profile.secrets)) != item]
    if secret:
        raise UserError(f"--set {', '.join(secret)} holds a secret, which a submitted batch script would keep; "
                        "give it as --set 'KEY=\"${env:NAME}\"' (sbatch passes your environment to the job)")
    run_id = args.run_id or new_run_id(profile.name)
    target = Path(args.run_dir).expanduser() if args.run_dir else runs_root() / run_id
    _refuse_secrets(sbatch_script(profile, SubmittedRun(run_id, target, sets, tuple(getattr(args, "args", ()) or ()),
                                                        output=target / BATCH_OUTPUT)), profile)
    if args.run_dir:
        check_new_run_dir(target)
    if (target / STATE_FILE).exists():
        raise UserError(f"{target} already holds run {run_id}; give another --run-id or --run-dir")
    rundir = RunDir.create(run_id, Path(args.run_dir) if args.run_dir else None)
    path = rundir.path
    script = path / BATCH_SCRIPT
    text = sbatch_script(profile, SubmittedRun(run_id, path, sets, tuple(getattr(args, "args", ()) or ()),
                                               output=path / BATCH_OUTPUT))
    try:
        fd = os.open(script, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, PRIVATE_FILE | 0o100)
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
            fh.write(text)
        # the state first: a client that finds the run finds its job, never a run dir without either
        state = RunState(run_id=run_id, profile=str(profile.path), overrides_set=list(sets),
                         overrides_args=list(getattr(args, "args", ()) or ()), name=profile.name,
                         strategy=profile.strategy, job_state=ev.JOB_CREATED, job_reason="submitting to Slurm")
        rundir.write_state(state.to_json())
        cluster = slurmqueue.cluster_of(profile.slurm.sbatch_args if profile.slurm is not None else ())
        job_id, cluster = slurmqueue.submit(script, profile.directory, str(profile.path), run_id, cluster)
    except BaseException:
        rundir.close()
        _forget(path, run_id)  # nothing was submitted: no run is left either
        raise
    reason = f"submitted to Slurm as job {job_id}"
    state.slurm = SlurmJobRecord(job_id=job_id, submitted=time.time(), cluster=cluster)
    state.job_reason = reason
    rundir.write_state(state.to_json())
    rundir.append(ev.job_event(run_id, ev.JOB_CREATED, reason))
    rundir.close()
    refresh(path, load_run_state(path))  # its first state and reason, as an event
    print(f"... run {run_id} ({path}): {reason}", file=sys.stderr, flush=True)
    if args.detach:
        print(f"{run_id} {job_id}")
        print(f"watch it with `distlaunch attach {run_id}`, stop it with `distlaunch down {run_id}`", file=sys.stderr)
        return 0
    return follow_submitted(path, shown, own=True)


def _refuse_secrets(text: str, profile: Profile) -> None:
    """A value from the launcher's environment (${env:...}) in what the batch script says (an
    #SBATCH line, the [slurm] account, a --comment other users read with squeue) is refused."""
    secrets = set(profile.secrets)
    if secrets and mask_secrets(text, secrets) != text:
        lines = [line for line in text.splitlines() if mask_secrets(line, secrets) != line]
        where = mask_secrets(lines[0], secrets).strip() if lines else "the batch script"
        raise UserError(f"the batch script would hold a secret ({where}): a value from ${{env:...}} there is "
                        "kept in the run dir and shown by squeue/scontrol to others; write it in the profile "
                        "plainly if it is no secret, or give it to the job through its environment")


def _forget(path: Path, run_id: str) -> None:
    try:
        remove_run_dir(path, run_id)
        unlink_from_root(run_id, path)
    except (OSError, UserError):
        pass


def submitted_job(target: Path, run_id: str) -> SlurmJobRecord | None:
    """Inside the allocation: the Slurm job record of the run at ``target`` when this allocation is the
    job `up` submitted it as and no supervisor has taken it yet (the batch script continues it);
    None for any other dir (a new run's, or one that is not waiting for this job)."""
    allocation = current_allocation()
    if allocation is None or not (target / STATE_FILE).exists():
        return None
    state = load_run_state(target)
    if state.run_id != run_id or state.slurm is None or state.slurm.job_id != allocation.job_id \
            or not state.awaiting_slurm or state.slurm.node is not None:
        return None
    return dataclasses.replace(state.slurm, node=socket.gethostname(),
                               requeues=max(state.slurm.requeues, restart_count()))


#: how long the batch job waits for the submitting `up` to record the job id (sbatch answered it
#: after the job was queued: an idle partition may start the job before the record is written)
AWAIT_RECORD_S = float(os.environ.get("DISTLAUNCH_AWAIT_SUBMITTED_S", "30"))


#: how long a requeued job's batch script waits for the supervisor of its last allocation to record
#: the requeue (it stops the tasks with their grace first, and may have been outside Slurm's kill)
AWAIT_REQUEUE_S = float(os.environ.get("DISTLAUNCH_AWAIT_REQUEUE_S", "300"))


def await_submitted(target: Path, run_id: str, timeout: float = AWAIT_RECORD_S) -> SlurmJobRecord:
    """The batch script's `up`: the run it was submitted for, once its record names this job; a dir
    that is not (gone, another run's, taken already, cancelled) starts nothing: one line, exit 2.
    A job queued by an sbatch whose answer was lost must never start a run nobody watches. A
    requeued job's script waits longer while the run is still its last allocation's."""
    deadline = time.monotonic() + timeout
    said = False
    while True:
        job = submitted_job(target, run_id)
        if job is not None:
            return job
        if not said and _previous_allocation_ending(target, run_id):
            deadline = time.monotonic() + AWAIT_REQUEUE_S
            said = True
            print(f"... run {run_id}: waiting for its last allocation's supervisor to record the requeue",
                  file=sys.stderr, flush=True)
        if time.monotonic() >= deadline and said and _take_over(target, run_id):
            continue  # its last supervisor never recorded the requeue: the run goes on all the same
        if time.monotonic() >= deadline:
            allocation = current_allocation()
            raise UserError(f"{target} is not waiting for Slurm job "
                            f"{allocation.job_id if allocation else '?'} (run {run_id}): nothing started; "
                            f"`distlaunch status {run_id}` says what became of it")
        time.sleep(0.5)


def _take_over(target: Path, run_id: str) -> bool:
    """A requeued job whose last allocation's supervisor never recorded the requeue (killed
    after Slurm's KillWait, its node failed): Slurm counts more requeues than the run knows of,
    and starts a requeued job only once the last allocation's processes are gone. The run is
    recorded waiting for this job again (a ``requeued`` event says so); True when it was."""
    state = load_run_state(target)
    count = restart_count()
    if state.run_id != run_id or state.slurm is None or state.outcome is not None or count <= state.slurm.requeues:
        return False
    why = (f"Slurm requeued job {state.slurm.job_id}; the supervisor of its last allocation "
           f"({state.slurm.node or '?'}) ended without recording it")
    rundir = RunDir.open(target)
    try:
        rundir.append(ev.requeued_event(run_id, state.slurm.job_id, why, count, state.slurm.node))
        rundir.write_state(dataclasses.replace(state, supervisor_pid=None, clients=0, job_reason=why,
                                               slurm=dataclasses.replace(state.slurm, node=None,
                                                                         requeues=count)).to_json())
    finally:
        rundir.close()
    print(f"... run {run_id}: {why}; it goes on here", file=sys.stderr, flush=True)
    return True


def _previous_allocation_ending(target: Path, run_id: str) -> bool:
    """Is this a requeued job's batch script, and the run still held by the supervisor of the job's
    last allocation (same job, no end recorded)?"""
    allocation = current_allocation()
    if allocation is None or not restart_count() or not (target / STATE_FILE).exists():
        return False
    state = load_run_state(target)
    return (state.run_id == run_id and state.slurm is not None and state.slurm.job_id == allocation.job_id
            and state.outcome is None and state.supervisor_pid is not None)


def claim_submitted(rundir: RunDir, job: SlurmJobRecord) -> None:
    """The batch job took the run: state.json names its node (from now on clients wait for the
    supervisor, no longer for Slurm) and a ``slurm`` event says it runs."""
    state = load_run_state(rundir.path)
    reason = f"Slurm job {job.job_id} started on {job.node}"
    own = RunDir.open(rundir.path)  # its own files: ``rundir``'s go to the supervisor, which closes inherited fds
    try:
        own.write_state(dataclasses.replace(state, slurm=job, job_reason=reason).to_json())
        own.append(ev.slurm_event(rundir.run_id, job.job_id, "RUNNING", start_time=time.time(), node=job.node))
    finally:
        own.close()
