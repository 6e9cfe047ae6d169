"""SlurmHost: a node of the current Slurm allocation, reached by ``srun --overlap`` instead of SSH.

Every command is a job step on the node (``srun --overlap --jobid J -w NODE -N1 -n1``), so no
sshd is needed there, and whatever a step starts is tracked by slurmstepd and ends with the
allocation. Short commands run their step to completion; a detached process (a task's agent)
keeps its step open for as long as it runs: the ``srun`` client then waits on this machine, in
a session of its own, so the launcher's terminal signals do not reach it.

A job that has ended cannot hold anything of a run: slurmd revokes its credential and slurmstepd
ends every process of its steps. So when a step fails because srun or slurmstepd said so (not
because the command exited non-zero), Slurm is asked for the job's state (``squeue``), and a
job that ended is a ``HostGone``: whoever runs the step (``down``'s sweep) reads "nothing of the
run can be left there", checked with Slurm rather than inferred from srun's words or retried.
"""

from __future__ import annotations

import contextlib
import os
import re
import select
import shlex
import shutil
import signal
import subprocess
import threading
import time
from collections.abc import Callable

from launcher.agent.containeradapters import HET_GROUP_VAR
from launcher.errors import HostError, HostGone
from launcher.model import HostConfig
from launcher.transport.base import CommandResult, LineStream, head
from launcher.transport.local import LocalHost
from launcher.transport.slurmqueue import leader_line

#: how long a detached step may take to report its pid (slurmctld may be busy)
START_TIMEOUT = 120.0
#: how long a refused step waits for squeue to show the job ending before it believes it runs
SETTLE_S = 10.0


#: what srun says when the allocation it should run a step in has ended (slurmctld's words),
#: believed only when squeue cannot answer
_ALLOCATION_ENDED = ("has expired", "invalid job id", "already completing or completed")

#: squeue's states (``%T``) of a job whose processes are gone or being ended by Slurm; "" is a
#: job squeue no longer shows. A run's job PENDING again was requeued: its allocation ended too.
#: Any other state (RUNNING, SUSPENDED, CONFIGURING, ...) may still hold processes of the run.
ENDED_STATES = frozenset({"", "COMPLETING", "COMPLETED", "CANCELLED", "FAILED", "TIMEOUT", "NODE_FAIL",
                          "PREEMPTED", "BOOT_FAIL", "DEADLINE", "OUT_OF_MEMORY", "REVOKED", "SPECIAL_EXIT",
                          "STAGE_OUT", "REQUEUED", "REQUEUE_FED", "REQUEUE_HOLD", "PENDING"})

#: srun's line for a command that ran and exited non-zero: the step itself was fine
_TASK_EXITED = re.compile(r"srun: error: \S+: task \d+: Exited with exit code \d+")


def step_trouble(stderr: str) -> str | None:
    """The last line in which srun or slurmstepd, not the command, said why a step failed (it was
    not launched, e.g. "Job credential revoked" with exit 168 = ESLURMD_CREDENTIAL_REVOKED 4008
    mod 256, or its task was killed); None when the command merely exited non-zero."""
    lines = [line.strip() for line in stderr.splitlines()]
    said = [line for line in lines if line.startswith(("srun:", "slurmstepd"))
            and not _TASK_EXITED.fullmatch(line)]
    return said[-1] if said else None


class SlurmHost(LocalHost):
    """LocalHost's process handling, with every command wrapped in a step on ``address``."""

    #: agents are started one step each (start_detached), not by setsid inside one short step
    detach_by_setsid = False

    def __init__(self, config: HostConfig) -> None:
        super().__init__(config)
        self.job_id = config.slurm_job_id
        self.het_group = config.slurm_het_group
        self._steps: list[subprocess.Popen[bytes]] = []
        self._home: str | None = None

    @property
    def label(self) -> str:
        return f"host {self.name} (Slurm job {self.job_id})"

    def connect(self) -> None:
        if self.job_id is None:
            raise HostError("[slurm]: not inside a Slurm allocation (SLURM_JOB_ID / SLURM_JOB_NODELIST "
                            "unset); run distlaunch inside `salloc` or an sbatch script "
                            "(`distlaunch export sbatch PROFILE` writes one)")
        if shutil.which("srun") is None:
            raise HostError(f"{self.label}: srun not found on this machine; run distlaunch on a node "
                            "of the allocation (where Slurm's client commands are installed)")
        state = self._job_state()
        if state in ENDED_STATES:  # COMPLETING too: no step can start in it any more
            raise HostGone(self.ended(state))
        super().connect()

    def ended(self, state: str | None, srun_said: str | None = None) -> str:
        """Why nothing of the run can be left on this host: Slurm says the job ended (``state``
        from squeue; None where only srun's words, slurmctld's, said so)."""
        seen = "squeue did not answer" if state is None else f"squeue: the job is {state or 'no longer listed'}"
        said = f"; {srun_said}" if srun_said else ""
        how = "Slurm is ending every process in it" if state == "COMPLETING" else "Slurm ended every process in it"
        return f"{self.label}: the allocation ended ({seen}{said}), so nothing of the run can be left there: {how}"

    def _job_state(self) -> str | None:
        """The job's state as squeue shows it (ended ones too, while slurmctld keeps them); ""
        when squeue no longer knows the job; None when squeue could not answer (slurmctld busy),
        which is no reason to give up on the host."""
        try:
            result = subprocess.run(["squeue", "-h", "-j", str(self.job_id), "--states=all", "-o", "%T %i"],
                                    capture_output=True, text=True, timeout=60, stdin=subprocess.DEVNULL)
        except (OSError, subprocess.TimeoutExpired):
            return None
        if result.returncode != 0:
            return "" if "invalid job id" in result.stderr.lower() else None
        return leader_state(str(self.job_id), result.stdout)

    def _settled_state(self) -> str | None:
        """The job's state once a step was refused: an allocation being ended refuses steps a moment
        before squeue stops calling it RUNNING (a heterogeneous job's components end one by one),
        so a refused step looks again for up to ``SETTLE_S`` before it believes the job still runs."""
        deadline = time.monotonic() + SETTLE_S
        while True:
            state = self._job_state()
            if state is None or state in ENDED_STATES or time.monotonic() >= deadline:
                return state
            time.sleep(0.5)  # squeue is polled: slurmctld sends no notice of a job's end

    def srun(self, command: str) -> list[str]:
        """The argv of one step on this node running ``command`` under /bin/sh."""
        assert self.job_id is not None
        # a heterogeneous job's steps name the leader's id and the component (its own id is refused)
        # (and a step started from inside it, a pyxis container's, must too: it is told the component)
        group = [] if self.het_group is None else [f"--het-group={self.het_group}"]
        told = [] if self.het_group is None else ["env", f"{HET_GROUP_VAR}={self.het_group}"]
        return ["srun", "--overlap", f"--jobid={self.job_id}", *group, f"--nodelist={self.address}",
                "--nodes=1", "--ntasks=1", "--quiet", "--kill-on-bad-exit=0", "--export=ALL",
                *told, "/bin/sh", "-c", command]

    def _step(self, command: str) -> str:
        return shlex.join(self.srun(command))

    def run(self, command: str, timeout: float = 60.0, stdin: bytes | None = None) -> CommandResult:
        result = super().run(self._step(command), timeout=timeout, stdin=stdin)
        said = None if result.ok else step_trouble(result.stderr)
        if said is not None:
            # the step did not run or was killed: the allocation may have ended after connect()
            # saw it running (a `down` racing salloc's end); Slurm says whether it did
            state = self._settled_state()
            if state in ENDED_STATES or (state is None and any(w in said.lower() for w in _ALLOCATION_ENDED)):
                raise HostGone(self.ended(state, said))
        return result

    def home(self) -> str:
        if self._home is None:  # each call would be a step of its own
            result = self.run('printf %s "$HOME"', timeout=60.0)
            home = result.stdout.strip()
            if not result.ok or not home.startswith("/"):
                detail = (result.stderr.strip().splitlines() or ["$HOME is not set"])[-1]
                raise HostError(f"{self.label}: cannot find the home directory: {detail}")
            self._home = home
        return self._home

    def start_detached(self, command: str, log_path: str, cwd: str | None = None) -> int:
        """One step that lasts as long as ``command``: a session leader on the node (pid == pgid)
        whose output goes to ``log_path`` there; its pid is the step's first line of output."""
        lines = []
        if cwd is not None:
            lines.append(f"cd {shlex.quote(cwd)} || exit 97")
        lines.append(f"mkdir -p \"$(dirname {shlex.quote(log_path)})\" && : >>{shlex.quote(log_path)} "
                     "|| exit 98")
        # setsid -w keeps the step open until the command ends; the inner shell is the new
        # session's leader, prints its pid, then execs the command in place
        lines.append("exec setsid -w /bin/sh -c "
                     + shlex.quote('echo $$; exec /bin/sh -c "$1" </dev/null >>"$2" 2>&1')
                     + f" distlaunch-task {shlex.quote(command)} {shlex.quote(log_path)}")
        proc = subprocess.Popen(self.srun("\n".join(lines)), stdin=subprocess.DEVNULL,
                                stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                start_new_session=True, close_fds=True)
        assert proc.stdout is not None
        first, output = self._first_line(proc)
        if not first.strip().isdigit():
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGTERM)
            proc.wait(timeout=30)
            detail = (output.strip().splitlines() or [f"srun exited with {proc.returncode}"])[-1]
            raise HostError(f"{self.label}: cannot start `{head(command)}` in a job step: {detail}")
        self._steps.append(proc)
        # drain what srun still says (its own warnings) and reap it when the step ends
        threading.Thread(target=_drain_and_reap, args=(proc,), daemon=True,
                         name=f"slurm-step-{proc.pid}").start()
        return int(first)

    def _first_line(self, proc: subprocess.Popen[bytes]) -> tuple[str, str]:
        assert proc.stdout is not None
        fd = proc.stdout.fileno()
        buffer = b""
        deadline = time.monotonic() + START_TIMEOUT
        while b"\n" not in buffer and time.monotonic() < deadline:
            ready, _, _ = select.select([fd], [], [], max(0.0, deadline - time.monotonic()))
            if not ready:
                break
            chunk = os.read(fd, 4096)
            if not chunk:
                break
            buffer += chunk
        text = buffer.decode("utf-8", errors="replace")
        return text.partition("\n")[0], text

    def stream_lines(self, command: str, on_line: Callable[[str], None],
                     on_close: Callable[[int | None], None] | None = None) -> LineStream:
        return super().stream_lines(self._step(command), on_line, on_close)

def leader_state(job_id: str, stdout: str) -> str:
    """The job's state in squeue's ``%T %i`` lines: its leader's in a heterogeneous job (one line per
    component); "" when none is shown."""
    lines = [line.strip() for line in stdout.splitlines() if line.strip()]
    return leader_line(job_id, lines, " ").partition(" ")[0] if lines else ""


def _drain_and_reap(proc: subprocess.Popen[bytes]) -> None:
    assert proc.stdout is not None
    with contextlib.suppress(OSError, ValueError):
        while proc.stdout.read(65536):
            pass
    proc.wait()
