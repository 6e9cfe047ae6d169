"""A private one-node Slurm cluster on this machine: munged, slurmctld and slurmd from the Debian
packages (``slurm-wlm``, ``munge``), as root, with their sockets, ports, state and logs in a
temporary directory (SlurmUser=root, ProctrackType=proctrack/linuxproc, TaskPlugin=task/none).

Clients find it through ``SLURM_CONF`` (``cluster.env``). Where the daemons or root are missing
the fixture skips with the reason, unless ``DISTLAUNCH_REQUIRE_SLURM=1`` (CI), where it fails.
"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.sshd import free_port

DAEMONS = ("munged", "slurmctld", "slurmd")
START_TIMEOUT = 60.0


class SlurmCluster:
    """``partitions``: node name -> its partition, for several nodes (slurmd run once per node name on
    this machine, ``slurmd -N``, each with its own port and spool, all at 127.0.0.1, which Slurm's
    NodeAddr gives distlaunch for TF_CONFIG) and the backfill scheduler, which alone starts
    heterogeneous jobs; None: one node named as this machine, in partition debug."""

    def __init__(self, partitions: dict[str, str] | None = None, extra: tuple[str, ...] = ()) -> None:
        self._tmp = tempfile.TemporaryDirectory(prefix="distlaunch-slurm-")
        self.dir = Path(self._tmp.name)
        self.node = socket.gethostname()
        self.nodes = list(partitions or {self.node: "debug"})
        self._partitions = partitions
        self.conf = self.dir / "slurm.conf"
        self.munge_socket = self.dir / "munge.sock"
        self._procs: dict[str, subprocess.Popen[bytes]] = {}
        (self.dir / "state").mkdir()
        (self.dir / "spool").mkdir()
        lines = [
            "ClusterName=distlaunch-test",
            f"SlurmctldHost={self.node}(127.0.0.1)",
            "SlurmUser=root",
            "SlurmdUser=root",
            f"SlurmctldPort={free_port()}",
            f"SlurmdPort={free_port()}",
            "AuthType=auth/munge",
            "CredType=cred/munge",
            f"AuthInfo=socket={self.munge_socket}",
            f"StateSaveLocation={self.dir / 'state'}",
            f"SlurmdSpoolDir={self.dir / 'spool'}",
            f"SlurmctldPidFile={self.dir / 'slurmctld.pid'}",
            f"SlurmdPidFile={self.dir / 'slurmd.pid'}",
            f"SlurmctldLogFile={self.dir / 'slurmctld.log'}",
            f"SlurmdLogFile={self.dir / 'slurmd.log'}",
            "ProctrackType=proctrack/linuxproc",
            "TaskPlugin=task/none",
            "SchedulerType=sched/builtin",
            "SelectType=select/cons_tres",
            "SelectTypeParameters=CR_Core",
            "ReturnToService=2",
            "MpiDefault=none",
            "JobAcctGatherType=jobacct_gather/none",
            "AccountingStorageType=accounting_storage/none",
        ]
        if partitions is None:
            lines += [f"NodeName={self.node} NodeAddr=127.0.0.1 CPUs={os.cpu_count() or 1} State=UNKNOWN",
                      f"PartitionName=debug Nodes={self.node} Default=YES MaxTime=INFINITE State=UP"]
        else:
            lines = [line.replace("sched/builtin", "sched/backfill") for line in lines
                     if not line.startswith(("SlurmdPidFile", "SlurmdLogFile", "SlurmdSpoolDir"))]
            lines += [f"SlurmdPidFile={self.dir / 'slurmd-%n.pid'}", f"SlurmdLogFile={self.dir / 'slurmd-%n.log'}",
                      f"SlurmdSpoolDir={self.dir / 'spool-%n'}", "SchedulerParameters=bf_interval=1"]
            for node in partitions:
                (self.dir / f"spool-{node}").mkdir()
                lines.append(f"NodeName={node} NodeHostname={self.node} NodeAddr=127.0.0.1 Port={free_port()} "
                             f"CPUs={os.cpu_count() or 1} State=UNKNOWN")
            for index, name in enumerate(dict.fromkeys(partitions.values())):
                members = ",".join(n for n, p in partitions.items() if p == name)
                lines.append(f"PartitionName={name} Nodes={members} Default={'YES' if index == 0 else 'NO'} "
                             "MaxTime=INFINITE State=UP")
        self.conf.write_text("\n".join([*lines, *(line.replace("{node}", self.node) for line in extra), ""]))

    @property
    def env(self) -> dict[str, str]:
        """This process's environment pointed at the cluster (and at no allocation)."""
        env = {k: v for k, v in os.environ.items() if not k.startswith("SLURM_")}
        env["SLURM_CONF"] = str(self.conf)
        return env

    def start(self) -> SlurmCluster:
        d = self.dir
        self._spawn("munged", ["munged", "-F", "-f", f"--socket={self.munge_socket}",
                               f"--log-file={d / 'munged.log'}", f"--pid-file={d / 'munged.pid'}",
                               f"--seed-file={d / 'munged.seed'}"])
        self._wait(lambda: self.munge_socket.exists(), "munged")
        self._spawn("slurmctld", ["slurmctld", "-D", "-i", "-f", str(self.conf)])
        self._wait(lambda: self._client(["scontrol", "ping"]).returncode == 0, "slurmctld")
        if self._partitions is None:
            self._spawn("slurmd", ["slurmd", "-D", "-f", str(self.conf)])
            self._wait(lambda: "idle" in self._client(["sinfo", "-h", "-o", "%T"]).stdout, "slurmd")
            return self
        for node in self.nodes:
            self._spawn(f"slurmd-{node}", ["slurmd", "-D", "-N", node, "-f", str(self.conf)])
        self._wait(lambda: self._client(["sinfo", "-h", "-N", "-o", "%T"]).stdout.split() == ["idle"] * len(self.nodes),
                   f"slurmd-{self.nodes[0]}")
        return self

    def _spawn(self, name: str, argv: list[str]) -> None:
        log = (self.dir / f"{name}.out").open("ab")
        self._procs[name] = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=log, stderr=log,
                                             env=self.env)

    def _client(self, argv: list[str]) -> subprocess.CompletedProcess[str]:
        return subprocess.run(argv, capture_output=True, text=True, timeout=30, env=self.env)

    def _wait(self, ready: object, name: str) -> None:
        assert callable(ready)
        deadline = time.monotonic() + START_TIMEOUT
        while time.monotonic() < deadline:
            proc = self._procs[name]
            if proc.poll() is not None:
                self.stop()
                raise RuntimeError(f"{name} exited with {proc.returncode}: {self.log_tail(name)}")
            if ready():
                return
            time.sleep(0.1)  # the daemons have no readiness notification to wait on
        self.stop()
        raise RuntimeError(f"{name} not ready within {START_TIMEOUT}s: {self.log_tail(name)}")

    def log_tail(self, name: str) -> str:
        for path in (self.dir / f"{name}.log", self.dir / f"{name}.out"):
            if path.exists():
                return " | ".join(path.read_text(errors="replace").splitlines()[-10:])
        return ""

    def squeue(self) -> list[str]:
        return self._client(["squeue", "-h", "-o", "%i %T"]).stdout.split("\n")[:-1]

    def steps(self) -> list[str]:
        return self._client(["squeue", "-h", "-s", "-o", "%i"]).stdout.split()

    def stop(self) -> None:
        """Stop every daemon this cluster started (slurmd, slurmctld, munged, in that order)."""
        for name in [*(n for n in self._procs if n.startswith("slurmd-")), *reversed(DAEMONS)]:
            proc = self._procs.pop(name, None)
            if proc is None or proc.poll() is not None:
                continue
            proc.terminate()
            try:
                proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(timeout=10)

    def cleanup(self) -> None:
        self.stop()
        self._tmp.cleanup()


def slurm_unavailable() -> str | None:
    missing = [d for d in (*DAEMONS, "salloc", "srun") if shutil.which(d) is None]
    if missing:
        return f"{', '.join(missing)} not found (apt-get install slurm-wlm munge)"
    if os.geteuid() != 0:
        return "the private Slurm cluster runs its daemons as root"
    if not Path("/etc/munge/munge.key").exists():
        return "/etc/munge/munge.key missing (reinstall munge)"
    return None


def _cluster(partitions: dict[str, str] | None = None, extra: tuple[str, ...] = ()) -> SlurmCluster:
    reason = slurm_unavailable()
    if reason is not None:
        if os.environ.get("DISTLAUNCH_REQUIRE_SLURM") == "1":
            pytest.fail(f"DISTLAUNCH_REQUIRE_SLURM=1 but {reason}")
        pytest.skip(reason)
    return SlurmCluster(partitions, extra)


#: partitions low and high on the one node: a job in high preempts one in low, which Slurm sends
#: SIGTERM, gives GraceTime, then requeues (PreemptMode=REQUEUE)
PREEMPTION = ("PreemptType=preempt/partition_prio", "PreemptMode=REQUEUE",
              "PartitionName=low Nodes={node} PriorityTier=1 PreemptMode=REQUEUE GraceTime=15 MaxTime=INFINITE "
              "State=UP",
              "PartitionName=high Nodes={node} PriorityTier=2 PreemptMode=OFF MaxTime=INFINITE State=UP")


@pytest.fixture(scope="module")
def preempting_cluster() -> Iterator[SlurmCluster]:
    """One node in partitions debug, low and high (``PREEMPTION``)."""
    cluster = _cluster(extra=PREEMPTION)
    try:
        yield cluster.start()
    finally:
        cluster.cleanup()


@pytest.fixture(scope="module")
def two_partition_cluster() -> Iterator[SlurmCluster]:
    """Nodes n1 (partition debug, the default) and n2 (partition cpu), for heterogeneous jobs."""
    cluster = _cluster({"n1": "debug", "n2": "cpu"})
    try:
        yield cluster.start()
    finally:
        cluster.cleanup()


@pytest.fixture(scope="module")
def slurm_cluster() -> Iterator[SlurmCluster]:
    cluster = _cluster()
    try:
        yield cluster.start()
    finally:
        cluster.cleanup()
