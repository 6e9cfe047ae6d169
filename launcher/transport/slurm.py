"""SlurmHost: a node of the current Slurm allocation, reached by ``srun --overlap`` instead of SSH.

Every command is a job step on the node (``srun --overlap --jobid J -w NODE -N1 -n1``), so no
sshd is needed there, and whatever a step starts is tracked by slurmstepd and ends with the
allocation. Short commands run their step to completion; a detached process (a task's agent)
keeps its step open for as long as it runs: the ``srun`` client then waits on this machine, in
a session of its own, so the launcher's terminal signals do not reach it.
"""

from __future__ import annotations

import contextlib
import os
import select
import shlex
import shutil
import signal
import subprocess
import threading
import time
from collections.abc import Callable

from launcher.errors import HostError, HostGone
from launcher.model import HostConfig
from launcher.transport.base import CommandResult, LineStream, head, signal_name
from launcher.transport.local import LocalHost

#: how long a detached step may take to report its pid (slurmctld may be busy)
START_TIMEOUT = 120.0


#: what srun says when the allocation it should run a step in has ended
_ALLOCATION_ENDED = ("has expired", "invalid job id", "already completing or completed")


class SlurmHost(LocalHost):
    """LocalHost's process handling, with every command wrapped in a step on ``address``."""

    #: agents are started one step each (start_detached), not by setsid inside one short step
    detach_by_setsid = False

    def __init__(self, config: HostConfig) -> None:
        super().__init__(config)
        self.job_id = config.slurm_job_id
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
        if state not in ("RUNNING", "COMPLETING", None):
            raise HostGone(f"{self.label}: the allocation ended (Slurm job {self.job_id} is "
                           f"{state or 'gone'}); its tasks ended with it")
        super().connect()

    def _job_state(self) -> str | None:
        """The job's state as squeue shows it; "" when squeue no longer knows the job; None when
        squeue could not answer (slurmctld busy), which is no reason to give up on the host."""
        try:
            result = subprocess.run(["squeue", "-h", "-j", str(self.job_id), "-o", "%T"],
                                    capture_output=True, text=True, timeout=60, stdin=subprocess.DEVNULL)
        except (OSError, subprocess.TimeoutExpired):
            return None
        if result.returncode != 0:
            return "" if "invalid job id" in result.stderr.lower() else None
        return result.stdout.strip()

    def srun(self, command: str) -> list[str]:
        """The argv of one step on this node running ``command`` under /bin/sh."""
        assert self.job_id is not None
        return ["srun", "--overlap", f"--jobid={self.job_id}", f"--nodelist={self.address}",
                "--nodes=1", "--ntasks=1", "--quiet", "--kill-on-bad-exit=0", "--export=ALL",
                "/bin/sh", "-c", command]

    def _step(self, command: str) -> str:
        return shlex.join(self.srun(command))

    def run(self, command: str, timeout: float = 60.0, stdin: bytes | None = None) -> CommandResult:
        result = super().run(self._step(command), timeout=timeout, stdin=stdin)
        told = result.stderr.lower()
        if not result.ok and "srun" in told and any(words in told for words in _ALLOCATION_ENDED):
            # the allocation ended after connect() saw it running (a `down` racing salloc's end)
            detail = result.stderr.strip().splitlines()[-1]
            raise HostGone(f"{self.label}: the allocation ended ({detail}); its tasks ended with it")
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

    def put_file(self, data: bytes, remote_path: str, mode: int = 0o644) -> None:
        """Through the step's stdin (``cat``): node-local paths need not be shared with this machine."""
        path = remote_path if not remote_path.startswith("~/") else self.home() + remote_path[1:]
        tmp = f"{path}.tmp-{os.getpid()}-{threading.get_ident()}"
        q_tmp, q_path = shlex.quote(tmp), shlex.quote(path)
        result = self.run(f"mkdir -p \"$(dirname {q_path})\" && cat > {q_tmp} && chmod {mode:o} {q_tmp} "
                          f"&& mv -f {q_tmp} {q_path} || {{ rm -f {q_tmp}; exit 1; }}",
                          timeout=max(60.0, len(data) / 1e6), stdin=data)
        if not result.ok:
            detail = (result.stderr.strip().splitlines() or [f"exit code {result.exit_code}"])[-1]
            raise HostError(f"{self.label}: cannot write {path}: {detail}")

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

    def kill_group(self, pgid: int, sig: int = signal.SIGTERM) -> None:
        result = self.run(f"kill -s {signal_name(sig)} -- -{int(pgid)}", timeout=60.0)
        if not result.ok and "no such process" not in result.stderr.lower():
            detail = (result.stderr.strip().splitlines() or [f"exit code {result.exit_code}"])[-1]
            raise HostError(f"{self.label}: cannot signal process group {pgid}: {detail}")


def _drain_and_reap(proc: subprocess.Popen[bytes]) -> None:
    assert proc.stdout is not None
    with contextlib.suppress(OSError, ValueError):
        while proc.stdout.read(65536):
            pass
    proc.wait()
