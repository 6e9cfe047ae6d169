"""The Slurm allocation this process runs in, as its environment describes it.

``salloc`` and ``sbatch`` export SLURM_JOB_ID and SLURM_JOB_NODELIST (a hostlist expression);
GPUs appear as SLURM_GPUS_ON_NODE (or SLURM_JOB_GPUS, a list of indices) where the job asked
for them with --gpus*/--gres.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass

from launcher.profile import hostlist


@dataclass(frozen=True)
class Allocation:
    job_id: str
    nodes: tuple[str, ...]
    gpus_per_node: tuple[int, ...]  # GPU indices each node offers the job


def current_allocation(environ: Mapping[str, str] | None = None) -> Allocation | None:
    """The allocation from the environment, or None outside one; HostlistError for a bad nodelist."""
    env = os.environ if environ is None else environ
    job_id = env.get("SLURM_JOB_ID") or env.get("SLURM_JOBID")
    nodelist = env.get("SLURM_JOB_NODELIST") or env.get("SLURM_NODELIST")
    if not job_id or not nodelist:
        return None
    nodes = tuple(dict.fromkeys(hostlist.expand(nodelist)))
    return Allocation(job_id=job_id, nodes=nodes, gpus_per_node=_gpus(env))


def _gpus(env: Mapping[str, str]) -> tuple[int, ...]:
    listed = env.get("SLURM_JOB_GPUS", "")
    if listed and all(part.isdigit() for part in listed.split(",")):
        return tuple(int(part) for part in listed.split(","))
    count = env.get("SLURM_GPUS_ON_NODE", "")
    return tuple(range(int(count))) if count.isdigit() else ()


def restart_count(environ: Mapping[str, str] | None = None) -> int:
    """SLURM_RESTART_COUNT: how many times Slurm requeued this allocation's job (0 where unset)."""
    count = (os.environ if environ is None else environ).get("SLURM_RESTART_COUNT", "")
    return int(count) if count.isdigit() else 0
