"""Slurm's queue, as its client commands show it: submit a batch script, ask a job's state, cancel it.

Used from the login node for a run `up` submitted (``commands/submit.py``, ``commands/slurmwatch.py``):
no allocation is needed, only ``sbatch``, ``squeue`` and ``scancel`` on PATH and a reachable
slurmctld. Every call has a bounded timeout; a slurmctld that does not answer within it is "no
answer" (None), never taken for a job that ended.
"""

from __future__ import annotations

import getpass
import re
import shutil
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path

from launcher.errors import UserError

#: squeue's states of a job that has not started yet
WAITING_STATES = frozenset({"PENDING", "CONFIGURING", "REQUEUED", "REQUEUE_HOLD", "REQUEUE_FED", "RESV_DEL_HOLD"})
#: squeue's states of a job that ended (COMPLETING: Slurm is ending its processes); "" is a job
#: slurmctld no longer knows (ended longer ago than MinJobAge)
FINAL_STATES = frozenset({"", "COMPLETING", "COMPLETED", "CANCELLED", "FAILED", "TIMEOUT", "NODE_FAIL", "PREEMPTED",
                          "BOOT_FAIL", "DEADLINE", "OUT_OF_MEMORY", "REVOKED", "SPECIAL_EXIT"})
#: squeue's states of a job Slurm is putting back in its queue (`scontrol requeue`, a preemption
#: whose mode is REQUEUE) on some versions; 22.05 shows COMPLETING then PENDING (BeginTime), and
#: only the restart count tells (``restarts``)
REQUEUE_STATES = frozenset({"REQUEUED", "REQUEUE_FED", "REQUEUE_HOLD"})
#: how long one squeue / scancel may take before it counts as no answer
QUERY_TIMEOUT_S = 15.0
SUBMIT_TIMEOUT_S = 60.0
_FORMAT = "%T|%r|%S|%B|%e|%i"


@dataclass(frozen=True)
class SlurmJobInfo:
    """One job as squeue shows it."""

    job_id: str
    state: str  # %T: PENDING, RUNNING, ...; "" once slurmctld no longer knows the job
    reason: str = ""  # %r: Priority, Resources, BeginTime, ... ("None" is left out)
    start_time: float | None = None  # %S: the expected start while pending, the start once running
    node: str | None = None  # %B: the node its batch script runs on, once it does
    end_time: float | None = None  # %e: when its time limit ends it, once it runs

    @property
    def waiting(self) -> bool:
        return self.state in WAITING_STATES

    @property
    def ended(self) -> bool:
        return self.state in FINAL_STATES

    def text(self) -> str:
        """``PENDING (Priority), expected start 14:02:11`` / ``RUNNING on node1``: the words shown."""
        if not self.state:
            return "no longer known to Slurm"
        out = self.state + (f" ({self.reason})" if self.reason else "")
        if self.waiting and self.start_time is not None:
            out += f", expected start {time.strftime('%Y-%m-%d %H:%M:%S', time.localtime(self.start_time))}"
        if not self.waiting and self.node:
            out += f" on {self.node}"
        return out


#: the ``--comment`` of a job `up` submitted: how a job whose sbatch answer was lost is found again
RUN_COMMENT = "distlaunch-run:"


def cluster_of(sbatch_args: tuple[str, ...] | list[str]) -> str | None:
    """The cluster ``sbatch_args`` submit to (``-M X``, ``--clusters=X``, ``--cluster X``), which
    squeue and scancel must be given too; None for the default one."""
    args = list(sbatch_args)
    for i, arg in enumerate(args):
        for flag in ("-M", "--clusters", "--cluster"):
            if arg == flag and i + 1 < len(args):
                return args[i + 1]
            if arg.startswith(flag + "=") or (flag == "-M" and arg.startswith("-M") and len(arg) > 2):
                return arg.split("=", 1)[1] if "=" in arg else arg[2:]
    return None


def _on(cluster: str | None) -> list[str]:
    return ["-M", cluster] if cluster else []


def _answer_lines(stdout: str) -> list[str]:
    """squeue's lines, without the ``CLUSTER: name`` header it prints with -M."""
    return [line for line in stdout.splitlines() if line.strip() and not line.startswith("CLUSTER:")]


def _slurm_time(text: str) -> float | None:
    """squeue's ``2024-05-01T14:02:11`` (local time) as unix time; None for N/A, Unknown, ..."""
    try:
        return time.mktime(time.strptime(text.strip(), "%Y-%m-%dT%H:%M:%S"))
    except ValueError:
        return None


def parse_squeue_line(job_id: str, line: str) -> SlurmJobInfo:
    state, reason, start, node, end = [*line.split("|"), "", "", "", ""][:5]
    reason = reason.strip()
    node = node.strip()
    return SlurmJobInfo(job_id=job_id, state=state.strip().split()[0] if state.strip() else "",
                        reason="" if reason in ("None", "(null)") else reason,
                        start_time=_slurm_time(start), node=None if node in ("", "n/a", "(null)", "None") else node,
                        end_time=_slurm_time(end))


def query(job_id: str, timeout: float = QUERY_TIMEOUT_S, cluster: str | None = None) -> SlurmJobInfo | None:
    """The job as squeue shows it (ended ones too, while slurmctld keeps them); None when Slurm did
    not answer (slurmctld busy or down): no reason to think the job ended."""
    try:
        result = subprocess.run(["squeue", *_on(cluster), "-h", "-j", job_id, "--states=all", "-o", _FORMAT],
                                capture_output=True, text=True, timeout=timeout, stdin=subprocess.DEVNULL)
    except (OSError, subprocess.TimeoutExpired):
        return None
    if result.returncode != 0:
        return SlurmJobInfo(job_id, "") if "invalid job id" in result.stderr.lower() else None
    lines = _answer_lines(result.stdout)
    return parse_squeue_line(job_id, leader_line(job_id, lines, "|")) if lines else SlurmJobInfo(job_id, "")


def leader_line(job_id: str, lines: list[str], sep: str) -> str:
    """The job's own line among squeue's: a heterogeneous job shows one per component (``%i`` is
    ``ID+K``, last on the line after ``sep``), and its leader's (``ID+0``) is the job's."""
    leader = [line for line in lines if line.rpartition(sep)[2].strip() in (job_id, f"{job_id}+0")]
    return (leader or lines)[0]


#: find_submitted's answer when squeue itself did not answer (the job may be queued all the same)
NO_ANSWER = "?"


def find_submitted(run_id: str, cluster: str | None = None, timeout: float = QUERY_TIMEOUT_S) -> str | None:
    """The id of this user's job submitted for run ``run_id`` (by its ``--comment``), if Slurm shows
    one: for an sbatch that queued the job but whose answer never came. None when squeue shows no
    such job; ``NO_ANSWER`` when squeue did not answer either."""
    try:
        result = subprocess.run(["squeue", *_on(cluster), "-h", "-u", getpass.getuser(), "--states=all",
                                 "-o", "%i|%k"], capture_output=True, text=True, timeout=timeout,
                                stdin=subprocess.DEVNULL)
    except (OSError, subprocess.TimeoutExpired, KeyError):
        return NO_ANSWER
    if result.returncode != 0:
        return NO_ANSWER
    for line in _answer_lines(result.stdout):
        job_id, _, comment = line.partition("|")
        job_id = job_id.strip().removesuffix("+0")  # a heterogeneous job's leader: ID+0
        if comment.strip() == RUN_COMMENT + run_id and job_id.isdigit():
            return job_id
    return None


def require_sbatch() -> None:
    if shutil.which("sbatch") is None:
        raise UserError("[slurm]: not inside a Slurm allocation and sbatch is not on PATH; run `distlaunch up` on a "
                        "login node of the cluster (where sbatch is), or inside `salloc`")


def submit(script: Path, cwd: Path, where: str, run_id: str = "",
           cluster: str | None = None) -> tuple[str, str | None]:
    """Submit ``script`` with ``sbatch --parsable``; the job id and the cluster it went to (sbatch's
    ``id;cluster`` answer, else ``cluster``). ``where``: what to name in an error (the profile).
    sbatch's refusal is one line: its own words, and the key to look at. An sbatch that does not
    answer may still have queued the job: it is looked for by ``run_id``'s comment."""
    require_sbatch()
    try:
        result = subprocess.run(["sbatch", "--parsable", str(script)], capture_output=True, text=True,
                                timeout=SUBMIT_TIMEOUT_S, cwd=cwd, stdin=subprocess.DEVNULL)
    except subprocess.TimeoutExpired:
        found = find_submitted(run_id, cluster) if run_id else None
        if found is not None and found != NO_ANSWER:
            return found, cluster
        said = ("squeue did not answer either: the job may be queued all the same; `squeue -u $USER -o '%i %k'` "
                f"shows it with the comment {RUN_COMMENT}{run_id}, and `scancel` ends it" if found == NO_ANSWER
                else "squeue shows no job of this run")
        raise UserError(f"{where}: sbatch did not answer within {SUBMIT_TIMEOUT_S:.0f} s (is slurmctld up? "
                        f"`scontrol ping` says) and {said}; a job queued after all starts nothing (the run was "
                        "not recorded)") from None
    except OSError as exc:
        raise UserError(f"{where}: cannot run sbatch: {exc.strerror or exc}") from None
    job_id, _, on = result.stdout.strip().partition(";")
    job_id, on = job_id.strip(), on.strip()
    if result.returncode != 0 or not job_id.isdigit():
        lines = [line.strip() for line in result.stderr.splitlines() if line.strip()]
        message = lines[-1] if lines else f"sbatch exited with {result.returncode}"
        message = message.removeprefix("sbatch: error: ")
        raise UserError(f"{where}: sbatch refused the job: {message}; {_hint(message)}")
    return job_id, (on or cluster)


def _hint(message: str) -> str:
    lowered = message.lower()
    for word, key in (("partition", "partition"), ("account", "account"), ("time limit", "time"),
                      ("node count", "nodes"), ("gres", "gpus_per_node"), ("gpu", "gpus_per_node")):
        if word in lowered:
            return f"check [slurm] {key} (sinfo and sacctmgr show what the cluster offers)"
    return "check the [slurm] table's values and sbatch_args"


def cancel(job_id: str, timeout: float = QUERY_TIMEOUT_S, cluster: str | None = None) -> str | None:
    """``scancel JOB``; None when done, else what went wrong (scancel's words or its silence)."""
    try:
        result = subprocess.run(["scancel", *_on(cluster), job_id], capture_output=True, text=True,
                                timeout=timeout, stdin=subprocess.DEVNULL)
    except (OSError, subprocess.TimeoutExpired) as exc:
        return f"scancel {job_id} did not finish: {exc}"
    if result.returncode != 0 and "invalid job id" not in result.stderr.lower():
        return (result.stderr.strip().splitlines() or [f"scancel exited with {result.returncode}"])[-1]
    return None


@dataclass(frozen=True)
class JobRestarts:
    """What ``scontrol show job`` says of a job's requeues: squeue shows a requeued job COMPLETING,
    then PENDING (BeginTime), like any other end; its restart count is what tells a requeue."""

    state: str  # JobState=
    restarts: int  # Restarts=: times Slurm requeued the job
    reason: str = ""
    #: PreemptTime= set and Requeue=1: preempted, in its grace time, to be requeued (the restart
    #: count goes up only once the grace is over)
    preempted: bool = False


def restarts(job_id: str, timeout: float = QUERY_TIMEOUT_S, cluster: str | None = None) -> JobRestarts | None:
    """The job's state and requeue count (``scontrol show job -o``); None: no answer, or a job
    slurmctld no longer knows."""
    try:
        result = subprocess.run(["scontrol", *_on(cluster), "show", "job", "-o", job_id], capture_output=True,
                                text=True, timeout=timeout, stdin=subprocess.DEVNULL)
    except (OSError, subprocess.TimeoutExpired):
        return None
    return parse_show_job(result.stdout) if result.returncode == 0 else None


def parse_show_job(text: str) -> JobRestarts | None:
    """``scontrol show job -o``'s first line: a heterogeneous job's leader comes first, a line per
    component after it."""
    first = next((line for line in text.splitlines() if line.strip()), "")
    fields = dict(re.findall(r"(?:^|\s)(JobState|Restarts|Reason|PreemptTime|Requeue)=(\S*)", first))
    if "JobState" not in fields or not fields.get("Restarts", "").isdigit():
        return None
    reason = fields.get("Reason", "")
    preempted = fields.get("PreemptTime", "None") not in ("None", "Unknown", "") and fields.get("Requeue") == "1"
    return JobRestarts(fields["JobState"], int(fields["Restarts"]), "" if reason in ("None", "(null)") else reason,
                       preempted)


def requeue(job_id: str, timeout: float = QUERY_TIMEOUT_S, cluster: str | None = None) -> str | None:
    """``scontrol requeue JOB`` (the job's own time limit is near); None when done, else why not."""
    try:
        result = subprocess.run(["scontrol", *_on(cluster), "requeue", job_id], capture_output=True, text=True,
                                timeout=timeout, stdin=subprocess.DEVNULL)
    except (OSError, subprocess.TimeoutExpired) as exc:
        return f"scontrol requeue {job_id} did not finish: {exc}"
    if result.returncode != 0:
        return (result.stderr.strip().splitlines() or [f"scontrol exited with {result.returncode}"])[-1]
    return None


def wait_ended(job_id: str, timeout: float, cluster: str | None = None) -> SlurmJobInfo | None:
    """Poll until Slurm says the job ended (COMPLETING counts only once it is gone); the last answer."""
    deadline = time.monotonic() + timeout
    info = query(job_id, cluster=cluster)
    while time.monotonic() < deadline:
        if info is not None and info.ended and info.state != "COMPLETING":
            return info
        time.sleep(0.5)
        info = query(job_id, cluster=cluster)
    return info
