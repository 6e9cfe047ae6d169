"""The profile's tasks: [defaults] and [roles.NAME], their hosts, ports and GPUs, and the job's roles."""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import Any, cast

from launcher.agent.containeradapters import ADAPTERS
from launcher.agent.containerrt import DAEMON_RUNTIMES, ContainerSpec, image_problem, mount_problem
from launcher.model import (
    ROLES,
    START_ORDER,
    HostConfig,
    OnNan,
    OnStall,
    RestartPolicy,
    RoleConfig,
    SlurmConfig,
    Strategy,
    SuccessPolicy,
    TaskDefaults,
)
from launcher.profile.checks import (
    _LOOPBACK_NAMES,
    CHECKPOINT_DIR_PLACEHOLDERS,
    WORKDIR_PLACEHOLDERS,
    Checker,
    KeyPath,
    _get,
    show_value,
    suggest,
)
from launcher.profile.containeropts import ENV_FIX, missing_value_problem, secret_problem
from launcher.profile.hosts import expand_names
from launcher.profile.keys import (
    CONTAINER_KEYS,
    DEFAULTS_KEYS,
    ROLE_KEYS,
    SINGLE_TASK_ROLES,
)
from launcher.profile.names import MAX_TASKS

#: runtimes of ssh and local hosts: all but those that run a container as a Slurm step (pyxis)
HOST_RUNTIMES = tuple(name for name, adapter in ADAPTERS.items() if not adapter.slurm_step)
#: runtimes that run an image file as the client's own child: Slurm tasks may use them too
FILE_RUNTIMES = tuple(name for name in HOST_RUNTIMES if not ADAPTERS[name].daemon)


def _either(names: tuple[str, ...]) -> str:
    """``"a", "b" or "c"``."""
    quoted = [f'"{name}"' for name in names]
    return " or ".join([", ".join(quoted[:-1]), quoted[-1]] if len(quoted) > 1 else quoted)


@dataclass(frozen=True)
class RolesReader:
    """Task settings ([defaults], a role's overrides), roles and the checks across them (ports,
    GPUs, the job's roles); mistakes go through ``checker``, the file's one-line error."""

    checker: Checker
    #: the profile has [slurm]: containers run through pyxis unless a runtime without a daemon is named
    on_slurm: bool = False
    #: [slurm], once its components are known (a role of a heterogeneous job runs on its component's nodes)
    slurm: SlurmConfig | None = None
    #: the values taken from the launcher's environment (``${env:...}``): no container key may hold one
    secrets: frozenset[str] = frozenset()

    def task_settings(self, table: Mapping[str, Any], key: KeyPath,
                      base: TaskDefaults | None) -> TaskDefaults:
        """[defaults] (``base`` None) or a role's overrides of it (env merged key by key)."""
        if base is None:
            self.checker.check_table(table, key, DEFAULTS_KEYS)
            base = TaskDefaults(command="")
        command: str | None = table.get("command")
        if command is not None:
            self.checker.check_command(command, (*key, "command"))
        python: str | None = table.get("python")
        if python is not None and not python.strip():
            raise self.checker.fail((*key, "python"), "is empty; give an interpreter, e.g. \"python3\", "
                                    "or leave the key out")
        workdir: str | None = table.get("workdir")
        if workdir is not None:
            self.checker.check_placeholders(workdir, (*key, "workdir"), WORKDIR_PLACEHOLDERS)
        checkpoint_dir: str | None = table.get("checkpoint_dir")
        if checkpoint_dir is not None:
            if not checkpoint_dir.strip():
                raise self.checker.fail((*key, "checkpoint_dir"), "is empty; name a directory, e.g. \"ckpt\", "
                                        "or leave the key out")
            self.checker.check_placeholders(checkpoint_dir, (*key, "checkpoint_dir"), CHECKPOINT_DIR_PLACEHOLDERS)
        env = dict(base.env)
        env.update(self.checker.env(table, key))
        restart = cast(RestartPolicy | None, table.get("restart"))
        max_restarts: int | None = table.get("max_restarts")
        grace: float | None = table.get("grace_seconds")
        setup: list[str] | None = table.get("setup")
        shell: str | None = table.get("shell")
        min_uptime: float | None = table.get("min_uptime")
        autolog: bool | None = table.get("autolog")
        stall: float | None = table.get("stall_seconds")
        on_stall = cast(OnStall | None, table.get("on_stall"))
        on_nan = cast(OnNan | None, table.get("on_nan"))
        if shell is not None and not shell.strip():
            raise self.checker.fail((*key, "shell"), 'is empty; give a shell and its flags, e.g. "bash -lc", '
                                    "or leave the key out")
        return TaskDefaults(
            command=base.command if command is None else command,
            python=base.python if python is None else python,
            workdir=base.workdir if workdir is None else workdir,
            env=env,
            restart=base.restart if restart is None else restart,
            max_restarts=base.max_restarts if max_restarts is None else max_restarts,
            grace_seconds=base.grace_seconds if grace is None else float(grace),
            setup=base.setup if setup is None else tuple(setup),
            shell=base.shell if shell is None else shell.strip(),
            min_uptime=base.min_uptime if min_uptime is None else float(min_uptime),
            autolog=base.autolog if autolog is None else autolog,
            stall_seconds=base.stall_seconds if stall is None else float(stall),
            on_stall=base.on_stall if on_stall is None else on_stall,
            on_nan=base.on_nan if on_nan is None else on_nan,
            checkpoint_dir=base.checkpoint_dir if checkpoint_dir is None else checkpoint_dir.strip(),
            container=self.container(table, key, base.container),
        )

    def container(self, table: Mapping[str, Any], key: KeyPath, base: ContainerSpec | None) -> ContainerSpec | None:
        """``container = { ... }`` over ``base`` (key by key: the keys written win), ``false``: none,
        absent: ``base``. Runtime: pyxis on Slurm, else docker, where neither table names one."""
        if "container" not in table:
            return base
        ckey = (*key, "container")
        value = table["container"]
        if value is False:
            return None
        self.checker.check_table(value, ckey, CONTAINER_KEYS)
        image = value.get("image", base.image if base else None)
        if image is None:
            where = "" if key == ("defaults",) else " (or under [defaults.container])"
            raise self.checker.fail(ckey, f'has no image; add image = "tensorflow/tensorflow:2.16.1-gpu"{where}')
        runtime = value.get("runtime", base.runtime if base else ("pyxis" if self.on_slurm else "docker"))
        if self.on_slurm and runtime in DAEMON_RUNTIMES:
            raise self.checker.fail((*ckey, "runtime"), f'"{runtime}" cannot run Slurm tasks (its daemon, not the job '
                                    'step, would own the container); use "pyxis" (srun --container-image, the default '
                                    f'on Slurm), {_either(FILE_RUNTIMES)}')
        if not self.on_slurm and runtime == "pyxis":
            raise self.checker.fail((*ckey, "runtime"), '"pyxis" runs containers through srun and needs [slurm]; on '
                                    f'ssh and local hosts use {_either(HOST_RUNTIMES)}')
        problem = image_problem(image, runtime)
        if problem is not None:
            raise self.checker.fail((*ckey, "image"), problem)
        mounts: list[str] = value.get("mounts", list(base.mounts) if base else [])
        for mount in mounts:
            problem = mount_problem(mount)
            if problem is not None:
                raise self.checker.fail((*ckey, "mounts"), problem)
        options: list[str] = value.get("options", list(base.options) if base else [])
        self.check_no_secret(value, ckey, runtime, options)
        pull: str = value.get("pull", base.pull if base else "missing")
        return ContainerSpec(image=image, runtime=runtime, mounts=tuple(mounts), options=tuple(options), pull=pull)

    def check_no_secret(self, table: Mapping[str, Any], ckey: KeyPath, runtime: str, options: list[str]) -> None:
        """``options`` and ``mounts`` go into spec.json and onto the runtime's command line (``ps``
        shows it to every user): refuse a value from the launcher's environment there, and an
        option that gives a secret-looking variable its value, read as ``runtime`` reads its flags
        (``-e API_TOKEN=...``, ``-ieAPI_TOKEN=...``, apptainer's ``--env A=1,API_TOKEN=...``).
        ``options`` are the merged ones: a role that changes the runtime reads [defaults]' anew."""
        fixes = {"options": ENV_FIX, "mounts": "write the path itself (~ is the host's home)"}
        for name, fix in fixes.items():
            if any(secret in item for item in table.get(name) or [] for secret in self.secrets if secret):
                raise self.checker.fail((*ckey, name), "holds a value from the launcher's environment (${env:...}), "
                                        "which would show on the container runtime's command line and in the run's "
                                        f"files; {fix}")
        problem = secret_problem(runtime, options) or missing_value_problem(runtime, options)
        if problem is None:
            return
        if "options" in table:
            raise self.checker.fail((*ckey, "options"), problem)
        # [defaults]' options, which this table's runtime reads otherwise
        raise self.checker.fail(("defaults", "container", "options"),
                                f"read by {runtime} for {'.'.join(ckey)}: {problem}")

    def roles(self, table: Mapping[str, Any], defaults: TaskDefaults, hosts: Mapping[str, HostConfig],
              spares: tuple[str, ...] = ()) -> dict[str, RoleConfig]:
        """Every [roles.X]; ``spares`` run no task, so no role's hosts may name one. Each role's
        ``min_count`` is the one written, or 0 until ``with_min_counts`` knows the strategy."""
        for name in table:
            if name == "master":
                raise self.checker.fail(("roles", name), 'TensorFlow 2 has no "master" role; '
                                        "rename [roles.master] to [roles.chief]")
            if name not in ROLES:
                raise self.checker.fail(("roles", name), f"unknown role; {suggest(name, ROLES)}")
        roles: dict[str, RoleConfig] = {}
        total = 0
        for name in ROLES:
            if name in table:
                roles[name] = self.role(name, self.checker.table(table, name, ("roles",)), defaults, hosts,
                                        spares)
                total += roles[name].count
                if total > MAX_TASKS:  # before any task is placed: a typo must not cost minutes
                    raise self.checker.fail(("roles", name, "count"), f"makes {total} tasks in all, more than "
                                            f"{MAX_TASKS}; lower the counts")
        self.check_ports(roles, hosts)
        self.check_gpus(roles, hosts)
        return roles

    def role(self, name: str, entry: Mapping[str, Any], defaults: TaskDefaults,
             hosts: Mapping[str, HostConfig], spares: tuple[str, ...] = ()) -> RoleConfig:
        key = ("roles", name)
        if "preemption_notice" in entry:
            raise self.checker.fail((*key, "preemption_notice"), "is a host's, not a role's; set it under "
                                    "[hosts.NAME], or under [defaults] for every host")
        self.checker.check_table(entry, key, ROLE_KEYS)
        count: int = _get(entry, ROLE_KEYS, "count")
        if name in SINGLE_TASK_ROLES and count > 1:
            raise self.checker.fail((*key, "count"), f"a job has at most one {name}, got {count}; "
                                    f"use count = 1 (or add workers instead)")
        min_count: int = entry.get("min_count", 0)
        if count > 0 and min_count > count:
            raise self.checker.fail((*key, "min_count"), f"is {min_count}, more than count ({count}); give "
                                    f"1 to {count}, the fewest {name} tasks the job may go on with")
        max_count: int = entry.get("max_count", 0)
        if max_count and max_count < count:
            raise self.checker.fail((*key, "max_count"), f"is {max_count}, less than count ({count}); give "
                                    f"{count} or more, the most {name} tasks the job may grow to")
        if max_count > 1 and name in SINGLE_TASK_ROLES:
            raise self.checker.fail((*key, "max_count"), f"a job has at most one {name}; remove max_count")
        host_names = self.role_hosts(name, entry, hosts, count, spares)
        port: int | None = entry.get("port")
        gpus_per_task: int = _get(entry, ROLE_KEYS, "gpus_per_task")
        settings = self.task_settings(entry, key, defaults)
        if name == "ps" and "stall_seconds" not in entry:
            # a parameter server has no step of its own: [defaults] stall_seconds is for the others
            settings = replace(settings, stall_seconds=0.0)
        if count > 0 and not settings.command:
            raise self.checker.fail((*key, "command"), "no command for this role; set command under "
                                    f"[defaults] or [roles.{name}]")
        return RoleConfig(name=name, count=count, hosts=host_names, port=port,
                          gpus_per_task=gpus_per_task, settings=settings, min_count=0 if count == 0 else min_count,
                          max_count=max_count)

    def role_hosts(self, role: str, entry: Mapping[str, Any], hosts: Mapping[str, HostConfig],
                   count: int, spares: tuple[str, ...] = ()) -> tuple[str, ...]:
        """The hosts a role's tasks are spread over: its ``hosts`` (a range's table name standing for
        those of its hosts that are not spares), or where that is clear, every host but the spares."""
        key = ("roles", role, "hosts")
        if "hosts" not in entry:
            usable = {name: host for name, host in hosts.items() if name not in spares}
            component = self.slurm.component_of(role) if self.slurm is not None else None
            if component is not None and any(h.slurm_het_group is not None for h in usable.values()):
                usable = {name: host for name, host in usable.items() if host.slurm_het_group == component}
                if not usable and count > 0:
                    raise self.checker.fail(("roles", role, "slurm"), f"{role} tasks run in component {component} "
                                            "of the heterogeneous job, but this allocation has no such component; "
                                            "let `distlaunch up` submit the job (or `distlaunch export sbatch`)")
                return tuple(usable) or tuple(hosts)[:1]
            if not usable and count > 0:
                raise self.checker.fail(("spares",), f"names every host, so the {role} tasks have none to run "
                                        "on; leave at least one host out of spares")
            if len(usable) <= 1 or count == 0:
                return tuple(usable or hosts)[:1]
            groups = {host.group for host in usable.values()}
            if len(groups) == 1 and None not in groups:
                return tuple(usable)  # one host range and nothing else: spread over all of it
            raise self.checker.fail(key, f"missing; say where {role} tasks run, e.g. hosts = "
                                    f"[{', '.join(json.dumps(h) for h in usable)}]")
        value: list[str] = entry["hosts"]
        if not value and count > 0:
            raise self.checker.fail(key, f"is empty; list the hosts the {role} tasks run on")
        names: list[str] = []
        for written, host in expand_names(self.checker, key, value, hosts):
            if host not in spares:
                names.append(host)
            elif written == host and count > 0:
                raise self.checker.fail(key, f'names "{host}", a spare, which runs no task at start; remove it '
                                        "from this role's hosts or from spares")
        if not names and count > 0:
            raise self.checker.fail(key, f"holds only spares; list a host that is not in spares for the {role} "
                                    "tasks")
        return tuple(names)

    def with_min_counts(self, roles: Mapping[str, RoleConfig], strategy: Strategy) -> dict[str, RoleConfig]:
        """``roles`` with each unwritten ``min_count`` resolved: the role's count, but 1 for
        parameter_server workers (the coordinator re-dispatches a missing worker's closures)."""
        resolved: dict[str, RoleConfig] = {}
        for name, role in roles.items():
            if role.min_count == 0 and role.count > 0:
                fewest = 1 if name == "worker" and strategy == "parameter_server" else role.count
                role = replace(role, min_count=fewest)
            resolved[name] = role
        return resolved

    def check_ports(self, roles: Mapping[str, RoleConfig], hosts: Mapping[str, HostConfig]) -> None:
        """Two tasks may not share an address:port (after the base-port rule)."""
        taken: dict[tuple[str, int], str] = {}
        for name in START_ORDER:
            role = roles.get(name)
            if role is None or role.port is None:
                continue
            for index, (host, port) in enumerate(task_ports(role)):
                address = hosts[host].address
                where = ("localhost" if address in _LOOPBACK_NAMES else address, port)
                task_id = f"{name}:{index}"
                if port > 65535:
                    raise self.checker.fail(("roles", name, "port"), f"{task_id} would get port {port} "
                                            "(port + task number on its host); choose a lower port")
                if where in taken:
                    raise self.checker.fail(("roles", name, "port"), f"{task_id} and {taken[where]} both use "
                                            f"{address}:{port}; give the roles port ranges that do not overlap "
                                            f"(the i-th task on a host gets port + i)")
                taken[where] = task_id

    def check_gpus(self, roles: Mapping[str, RoleConfig], hosts: Mapping[str, HostConfig]) -> None:
        asked: dict[str, int] = {}
        for name in START_ORDER:
            role = roles.get(name)
            if role is None or role.gpus_per_task == 0:
                continue
            for index in range(role.count):
                host = role.hosts[index % len(role.hosts)]
                asked[host] = asked.get(host, 0) + role.gpus_per_task
                offered = len(hosts[host].gpus)
                if asked[host] > offered:
                    raise self.checker.fail(("roles", name, "gpus_per_task"),
                                            f'tasks on host "{host}" ask for {asked[host]} GPUs but it offers '
                                            f"{offered} (hosts.{host}.gpus = {show_value(list(hosts[host].gpus))}); "
                                            "lower gpus_per_task or count, or list more GPUs")

    def check_job(self, roles: Mapping[str, RoleConfig], success: SuccessPolicy) -> None:
        chiefs = roles["chief"].count if "chief" in roles else 0
        workers = roles["worker"].count if "worker" in roles else 0
        if chiefs == 0 and workers == 0:
            raise self.checker.fail(("roles",), "no chief and no workers, so nothing decides when the job "
                                    "succeeded; add [roles.chief] or [roles.worker] with count >= 1")
        if success == "all_workers" and workers == 0:
            raise self.checker.fail(("success_policy",), '"all_workers" needs workers; add [roles.worker] '
                                    'or use success_policy = "chief"')


def task_ports(role: RoleConfig) -> list[tuple[str, int]]:
    """(host, port) of each task of a role with a base port: the i-th task on a host gets port + i."""
    assert role.port is not None
    seen: dict[str, int] = {}
    placed: list[tuple[str, int]] = []
    for index in range(role.count):
        host = role.hosts[index % len(role.hosts)]
        placed.append((host, role.port + seen.get(host, 0)))
        seen[host] = seen.get(host, 0) + 1
    return placed
