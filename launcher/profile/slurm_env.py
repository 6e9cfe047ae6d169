"""The Slurm allocation this process runs in, as its environment describes it.

``salloc`` and ``sbatch`` export SLURM_JOB_ID and SLURM_JOB_NODELIST (a hostlist expression);
GPUs appear as SLURM_GPUS_ON_NODE (or SLURM_JOB_GPUS, a list of indices) where the job asked
for them with --gpus*/--gres. In a heterogeneous job SLURM_HET_SIZE counts its components and
each variable comes again per component with a ``_HET_GROUP_<K>`` suffix; SLURM_JOB_NODELIST
alone is component 0's (Slurm 22.05).
"""

from __future__ import annotations

import os
import re
import subprocess
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from launcher.profile import hostlist


@dataclass(frozen=True)
class Allocation:
    job_id: str
    nodes: tuple[str, ...]
    gpus_per_node: tuple[int, ...]  # GPU indices each node offers the job
    #: a heterogeneous job: each component's nodes and GPUs, in order (``srun --het-group=K``);
    #: () in a homogeneous one
    components: tuple[Component, ...] = ()


@dataclass(frozen=True)
class Component:
    nodes: tuple[str, ...]
    gpus_per_node: tuple[int, ...]


def current_allocation(environ: Mapping[str, str] | None = None) -> Allocation | None:
    """The allocation from the environment, or None outside one; HostlistError for a bad nodelist."""
    env = os.environ if environ is None else environ
    job_id = env.get("SLURM_JOB_ID") or env.get("SLURM_JOBID")
    nodelist = env.get("SLURM_JOB_NODELIST") or env.get("SLURM_NODELIST")
    if not job_id or not nodelist:
        return None
    components = _components(env)
    if components:
        every = tuple(dict.fromkeys(node for c in components for node in c.nodes))
        return Allocation(job_id=job_id, nodes=every, gpus_per_node=components[0].gpus_per_node,
                          components=components)
    nodes = tuple(dict.fromkeys(hostlist.expand(nodelist)))
    return Allocation(job_id=job_id, nodes=nodes, gpus_per_node=_gpus(env))


def _components(env: Mapping[str, str]) -> tuple[Component, ...]:
    size = env.get("SLURM_HET_SIZE") or env.get("SLURM_PACK_SIZE") or ""
    if not size.isdigit() or int(size) < 2:
        return ()
    components = []
    for index in range(int(size)):
        nodelist = env.get(f"SLURM_JOB_NODELIST_HET_GROUP_{index}") or env.get(f"SLURM_JOB_NODELIST_PACK_GROUP_{index}")
        if not nodelist:
            return ()
        components.append(Component(nodes=tuple(dict.fromkeys(hostlist.expand(nodelist))),
                                    gpus_per_node=_gpus(env, f"_HET_GROUP_{index}")))
    return tuple(components)


def _gpus(env: Mapping[str, str], suffix: str = "") -> tuple[int, ...]:
    listed = env.get("SLURM_JOB_GPUS" + suffix, "")
    if listed and all(part.isdigit() for part in listed.split(",")):
        return tuple(int(part) for part in listed.split(","))
    count = env.get("SLURM_GPUS_ON_NODE" + suffix, "")
    return tuple(range(int(count))) if count.isdigit() else ()


_NODE_ADDR = re.compile(r"\bNodeName=(\S+).*?\bNodeAddr=(\S+)")


def node_addresses(nodes: Sequence[str], timeout: float = 15.0) -> dict[str, str]:
    """Each node's NodeAddr, where Slurm's node name is not the address other nodes reach it by
    (TF_CONFIG must name one that resolves); {} when scontrol cannot say, and node names are used."""
    if not nodes:
        return {}
    try:
        result = subprocess.run(["scontrol", "show", "node", "-o", ",".join(nodes)], capture_output=True,
                                text=True, timeout=timeout, stdin=subprocess.DEVNULL)
    except (OSError, subprocess.TimeoutExpired):
        return {}
    if result.returncode != 0:
        return {}
    found = {}
    for line in result.stdout.splitlines():
        match = _NODE_ADDR.search(line)
        if match and match.group(1) in nodes and match.group(2) not in ("", "(null)", match.group(1)):
            found[match.group(1)] = match.group(2)
    return found


def restart_count(environ: Mapping[str, str] | None = None) -> int:
    """SLURM_RESTART_COUNT: how many times Slurm requeued this allocation's job (0 where unset)."""
    count = (os.environ if environ is None else environ).get("SLURM_RESTART_COUNT", "")
    return int(count) if count.isdigit() else 0
