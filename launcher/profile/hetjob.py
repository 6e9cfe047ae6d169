"""Roles on their own Slurm partitions: a heterogeneous job, one component per ``[roles.X.slurm]``.

```toml
[slurm]
partition = "gpu"          # component 0: the roles without a table of their own (chief, workers)
gpus_per_node = 4
nodes = 2
[roles.ps.slurm]
partition = "cpu"          # component 1: the ps tasks
nodes = 1
```

Component 0 holds the roles that name no table of their own, with [slurm]'s ``nodes``,
``partition`` and ``gpus_per_node``; it is where Slurm runs the batch script, so the supervisor
runs there. Each role that names one gets a component of its own, in the order chief, ps, worker,
evaluator; a key it leaves out takes [slurm]'s value (``nodes``: 1). Where every role names one,
the first of them is component 0. One component in all is a homogeneous job, as without any.

``up`` outside an allocation submits it (``#SBATCH hetjob`` between the components); inside one,
``SLURM_JOB_NODELIST_HET_GROUP_<K>`` says which nodes are component K's (slurm_env.py), a role's
tasks are spread over its component's nodes, and each of that host's commands is a step in that
component (``srun --het-group=K``).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from launcher.model import ROLES, SlurmComponent, SlurmConfig
from launcher.profile.checks import Checker, _get
from launcher.profile.keys import ROLE_SLURM_KEYS


def read_components(checker: Checker, roles: Mapping[str, Any],
                    slurm: SlurmConfig | None) -> tuple[SlurmComponent, ...]:
    """The components the roles' ``[roles.X.slurm]`` tables ask for (``()``: none asks; one: the
    only role with tasks asks, and the job is homogeneous with its values); a table without [slurm],
    or beside the role's own ``hosts``, is refused."""
    own: dict[str, SlurmComponent] = {}
    rest: list[str] = []
    for name in ROLES:
        entry = roles.get(name)
        if not isinstance(entry, dict):
            continue
        counted = entry.get("count", 1)
        if "slurm" not in entry:
            if counted:
                rest.append(name)
            continue
        key = ("roles", name, "slurm")
        table = checker.table(entry, "slurm", ("roles", name))
        checker.check_table(table, key, ROLE_SLURM_KEYS)
        if slurm is None:
            raise checker.fail(key, "needs a [slurm] table: a role's own Slurm component is part of a job "
                               "submitted to Slurm; add [slurm] (an empty one is enough) or remove this table")
        if "hosts" in entry:
            raise checker.fail(("roles", name, "hosts"), f"{name} tasks take their hosts from their own Slurm "
                               f"component ([roles.{name}.slurm]); remove hosts")
        if "partition" in table and not table["partition"].strip():
            raise checker.fail((*key, "partition"), "is empty; give a partition or leave the key out")
        extra: list[str] = _get(table, ROLE_SLURM_KEYS, "sbatch_args")
        taken = [arg.split("=", 1)[0] for arg in extra if arg.split("=", 1)[0] in WHOLE_JOB_OPTIONS]
        if taken:
            raise checker.fail((*key, "sbatch_args"), f"{taken[0]} is the whole job's, not one component's: "
                               "give it in [slurm] sbatch_args")
        if counted:
            own[name] = SlurmComponent(roles=(name,), nodes=table.get("nodes"), partition=table.get("partition"),
                                       gpus_per_node=table.get("gpus_per_node"), sbatch_args=tuple(extra))
    if not own or slurm is None:
        return ()
    components = list(own.values())
    if rest:
        components.insert(0, SlurmComponent(roles=tuple(rest), nodes=slurm.nodes, partition=slurm.partition,
                                            gpus_per_node=slurm.gpus_per_node))
    return tuple(components)


#: sbatch options that are the whole job's and that a component's own sbatch_args may not set
WHOLE_JOB_OPTIONS = ("--comment", "--open-mode", "--output", "-o", "--job-name", "-J", "--requeue",
                     "--no-requeue", "--time", "-t", "--account", "-A", "--clusters", "-M")


def component_lines(slurm: SlurmConfig) -> list[str]:
    """Each component in words (``check --no-remote``, the batch script's comments)."""
    lines = []
    for index, component in enumerate(slurm.components):
        lines.append(f"component {index}: {', '.join(component.roles)} on {describe(slurm, component)}"
                     + ("  (the batch script and the supervisor run here)" if index == 0 else ""))
    return lines


def describe(slurm: SlurmConfig, component: SlurmComponent) -> str:
    nodes = component.nodes or (slurm.nodes if not slurm.heterogeneous else None) or 1
    partition = component.partition or slurm.partition
    gpus = component.gpus_per_node if component.gpus_per_node is not None else slurm.gpus_per_node
    out = f"{nodes} node{'s' if nodes != 1 else ''}"
    out += f" of partition {partition}" if partition else " of the default partition"
    if gpus:
        out += f", {gpus} GPU{'s' if gpus != 1 else ''} per node"
    return out


def component_options(slurm: SlurmConfig, component: SlurmComponent) -> list[str]:
    """The sbatch options of one component: its nodes, partition, GPUs, the job's time limit
    (each component has its own), and its own sbatch_args."""
    options = [f"--nodes={component.nodes or (slurm.nodes if not slurm.heterogeneous else None) or 1}"]
    if slurm.time:
        options.append(f"--time={slurm.time}")
    partition = component.partition or slurm.partition
    if partition:
        options.append(f"--partition={partition}")
    gpus = component.gpus_per_node if component.gpus_per_node is not None else slurm.gpus_per_node
    if gpus:
        options.append(f"--gpus-per-node={gpus}")
    options.extend(component.sbatch_args)
    return options
