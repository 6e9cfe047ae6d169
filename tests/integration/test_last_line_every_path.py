"""Issue 62: the run's record ends with the line a task wrote last, on every path a task can take.

Each round is one `distlaunch up --no-tui` of a tiny job (tests/data/lastline/final_reading.py, no
TensorFlow): chief:0 writes its readings and its ``last line`` and exits 0 at once; two workers
write theirs, say they are ready, and wait until the job's success stops them, writing one more
reading and ``last line`` at the SIGTERM. The record (the launcher's events.jsonl) must hold, for
every task, the last reading and the last line it wrote on stdout. The rounds run back to back
on one path, as a user's runs would: ten for containers over SSH, five elsewhere; with three task
ends a round, a path that loses the last line one time in two passes five rounds with a chance of
2**-15. Each round's `up` is given ROUND_SECONDS (the job takes a few); each test's timeout is the
sum of its rounds'.

Paths: this machine, the private sshd through paramiko and through the system ssh client, Slurm
steps (srun), and Docker containers here and over SSH (the path whose last reading CI saw at 28
of 30: tests/integration/test_containers.py).
"""

from __future__ import annotations

import secrets
import subprocess
from pathlib import Path
from typing import Any

import pytest

from tests.integration.jobtools import PYTHON, REPO, cli, kill_run_processes, read_events
from tests.profiles import Host, build_profile, local_host, ssh_table, sshd_host, table
from tests.sshd import PrivateSshd

pytest_plugins = ["tests.slurm"]
pytestmark = pytest.mark.slow

SCRIPTS = REPO / "tests" / "data" / "lastline"
STEPS = 30
WORKERS = 2
ROUNDS = 5
#: containers over SSH, where CI saw the last reading 28 of 30 (issue 62): ten in a row
CONTAINER_SSH_ROUNDS = 10
ROUND_SECONDS = 60
#: what every task must end with in the record: (its last reading's step, its last log line)
ENDS = {"chief:0": STEPS, **{f"worker:{i}": STEPS + 1 for i in range(WORKERS)}}


def profile(tmp: Path, outputs: Path, *, hosts: list[Host], ssh: dict[str, Any] | None = None,
            defaults: dict[str, Any] | None = None, extra: str = "") -> Path:
    """chief:0 ends by itself once both workers are ready; the workers are stopped by its success."""
    roles = {"chief": {"command": f"{{python}} final_reading.py --steps {STEPS} --wait {{outputs}} "
                                  f"--count {WORKERS}"},
             "worker": {"count": WORKERS,
                        "command": f"{{python}} final_reading.py --steps {STEPS} --ready {{outputs}}/ready-{{index}}"}}
    return build_profile(tmp / "last-line.toml", name="it-last-line", strategy="custom", outputs=outputs,
                         workdir=SCRIPTS, restart="never", grace=10, defaults=defaults, ssh=ssh, hosts=hosts,
                         roles=roles, extra=extra)


def ends_recorded(run_dir: Path) -> dict[str, tuple[int | None, str | None]]:
    """Each task's last reading's step and last line on stdout, as the run's record has them (its
    shell's own "Terminated" on stderr at a stop is not the script's)."""
    events = read_events(run_dir)
    out: dict[str, tuple[int | None, str | None]] = {}
    for task in ENDS:
        steps = [e["step"] for e in events if e["kind"] == "metric" and e["task"] == task]
        lines = [e["line"] for e in events if e["kind"] == "log" and e["task"] == task
                 and e["stream"] == "stdout"]
        out[task] = (steps[-1] if steps else None, lines[-1] if lines else None)
    return out


def run_rounds(tmp: Path, rounds: int, launch: Any, **knobs: Any) -> None:
    """``rounds`` jobs back to back; each must succeed with every task's last line recorded."""
    wanted = {task: (step, f"last line {step}") for task, step in ENDS.items()}
    lost: list[str] = []
    for n in range(rounds):
        here = tmp / f"round-{n}"
        (here / "outputs").mkdir(parents=True)
        path = profile(here, here / "outputs", **knobs)
        run_dir, run_id = here / "run", f"it-lastline-{secrets.token_hex(3)}"
        try:
            done = launch(path, run_dir, run_id)
        finally:
            kill_run_processes(run_id)
        assert done.returncode == 0, f"round {n}: " + done.stdout[-3000:] + done.stderr[-2000:]
        got = ends_recorded(run_dir)
        lost += [f"round {n} {task}: recorded {got[task]}, wrote {end}"
                 for task, end in wanted.items() if got[task] != end]
    assert not lost, "\n".join(lost)


def up(path: Path, run_dir: Path, run_id: str) -> subprocess.CompletedProcess[str]:
    return cli("up", str(path), "--no-tui", "--run-dir", str(run_dir), "--run-id", run_id, timeout=ROUND_SECONDS)


@pytest.mark.timeout(ROUNDS * ROUND_SECONDS + 30)
def test_local_tasks_end_with_their_last_line(tmp_path: Path) -> None:
    run_rounds(tmp_path, ROUNDS, up, hosts=[local_host("box")])


@pytest.mark.sshd
@pytest.mark.timeout(ROUNDS * ROUND_SECONDS + 30)
@pytest.mark.parametrize("transport", ["ssh", "openssh"])
def test_tasks_over_ssh_end_with_their_last_line(tmp_path: Path, sshd: PrivateSshd, transport: str) -> None:
    run_rounds(tmp_path, ROUNDS, up, hosts=[sshd_host(sshd, "box", transport=transport)], ssh=ssh_table(sshd))


@pytest.mark.timeout(ROUNDS * ROUND_SECONDS + 30)
def test_tasks_in_containers_end_with_their_last_line(tmp_path: Path, docker_image: str) -> None:
    run_rounds(tmp_path, ROUNDS, up, hosts=[local_host("box")], defaults={"container": {"image": docker_image}})


@pytest.mark.sshd
@pytest.mark.timeout(CONTAINER_SSH_ROUNDS * ROUND_SECONDS + 30)
def test_tasks_in_containers_over_ssh_end_with_their_last_line(tmp_path: Path, docker_image: str,
                                                               sshd: PrivateSshd) -> None:
    run_rounds(tmp_path, CONTAINER_SSH_ROUNDS, up, hosts=[sshd_host(sshd, "box")], ssh=ssh_table(sshd),
               defaults={"container": {"image": docker_image}})


@pytest.mark.timeout(ROUNDS * ROUND_SECONDS + 60)  # and the cluster's start
def test_slurm_steps_end_with_their_last_line(tmp_path: Path, slurm_cluster: Any) -> None:
    def salloc_up(path: Path, run_dir: Path, run_id: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(["salloc", "-N1", PYTHON, "-m", "launcher.cli", "up", str(path), "--no-tui",
                               "--run-dir", str(run_dir), "--run-id", run_id], capture_output=True, text=True,
                              cwd=REPO, env=slurm_cluster.env, timeout=ROUND_SECONDS)

    run_rounds(tmp_path, ROUNDS, salloc_up, hosts=[], defaults={"python": PYTHON}, extra=table("slurm", {}))
