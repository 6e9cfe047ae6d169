"""Profile -> Plan: which task runs where, on which port and GPUs, with which command and env.

The plan is computed without touching any host, so ``check``, ``tfconfig`` and ``up`` all see
the same tasks; it runs nothing either (no ``ssh -G``): what OpenSSH's config makes of a host's
address is resolved before, by the transport (``sshconfig.resolve_addresses``), and passed in.
Ports a role leaves open and the run directory are only known at launch: commands keep
``{port}`` and ``{run_dir}`` until ``render_command`` fills them.
"""

from __future__ import annotations

import posixpath
import re
import shlex
import sys
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import TypedDict

from launcher.agent.containerrt import ContainerSpec
from launcher.errors import UserError
from launcher.model import SSH_TRANSPORTS, START_ORDER, HostConfig, Plan, Profile, RoleConfig, TaskSpec
from launcher.profile.checks import PLACEHOLDER_RE
from launcher.profile.overrides import is_secret

#: roles in TF_CONFIG's cluster, in the order TensorFlow's docs list them
CLUSTER_ROLES = ("chief", "worker", "ps")
MASK = "****"


class TaskEntry(TypedDict):
    type: str
    index: int


class TFConfig(TypedDict):
    """TensorFlow's TF_CONFIG: ``json.dumps`` of this is what a task's environment gets."""

    cluster: dict[str, list[str]]
    task: TaskEntry


class PortUnresolved(UserError):
    """A task's port is picked at launch, so its TF_CONFIG cannot be written before that."""


class UnknownTask(UserError):
    """A task id that the plan does not have."""


def build_plan(profile: Profile, addresses: Mapping[str, str] | None = None) -> Plan:
    """Every task of the profile, in START_ORDER then by index. ``addresses``: by host name, the
    HostName ~/.ssh/config gives a host's alias (``transport.sshconfig.resolve_addresses``); hosts
    not in it are reached at their address as written."""
    addresses = addresses or {}
    gpus_used: dict[str, int] = {}
    tasks: list[TaskSpec] = []
    for role_name in START_ORDER:
        role = profile.roles.get(role_name)
        if role is None:
            continue
        on_host: dict[str, int] = {}
        for index in range(role.count):
            host = profile.hosts[role.hosts[index % len(role.hosts)]]
            nth_on_host = on_host.get(host.name, 0)
            on_host[host.name] = nth_on_host + 1
            first_gpu = gpus_used.get(host.name, 0)
            gpus = host.gpus[first_gpu:first_gpu + role.gpus_per_task]
            gpus_used[host.name] = first_gpu + role.gpus_per_task
            tasks.append(place_task(profile, role, index, host, tf_address(host, addresses), nth_on_host, gpus))
    return Plan(profile=profile, tasks=tuple(tasks), addresses=dict(addresses))


#: TensorFlow's gRPC channel options, read from the environment (``name=value,...``)
GRPC_OPTIONS_ENV = "TF_GRPC_DEFAULT_OPTIONS"
#: ParameterServerStrategy: gRPC keepalive pings every 5 s, a peer silent for 5 s more is gone. A
#: worker whose host vanishes (no RST: a cut link, a dead machine) then fails the coordinator's
#: calls within ~10 s, and the coordinator gives its closures to the other workers; without it a
#: call waits for TCP's own timeout (~15 min) and the chief makes no progress meanwhile (issue 55).
PSS_GRPC_OPTIONS = ("grpc.keepalive_time_ms=5000,grpc.keepalive_timeout_ms=5000,"
                    "grpc.keepalive_permit_without_calls=1,grpc.http2.max_pings_without_data=0")


def tf_address(host: HostConfig, addresses: Mapping[str, str]) -> str:
    """The address other tasks reach ``host`` at: tf_address, else the HostName ~/.ssh/config
    gives an alias (``addresses``: another host cannot resolve the alias), else the address as written."""
    return host.tf_address or addresses.get(host.name, host.address)


def place_task(profile: Profile, role: RoleConfig, index: int, host: HostConfig, address: str, nth_on_host: int,
               gpus: tuple[int, ...]) -> TaskSpec:
    """Task ``index`` of ``role`` on ``host`` (the ``nth_on_host`` task of its role there, given ``gpus``)."""
    settings = role.settings
    task_id = f"{role.name}:{index}"
    # in a container, {python} is the image's; the launcher's own interpreter is a host path
    bare_local = host.transport not in SSH_TRANSPORTS and settings.container is None
    python = settings.python or (sys.executable if bare_local else "python3")
    env = {**host.env, **settings.env}  # the host's env under the role's and [defaults]'
    if profile.strategy == "parameter_server" and GRPC_OPTIONS_ENV not in env:
        env[GRPC_OPTIONS_ENV] = PSS_GRPC_OPTIONS
    if gpus:
        env["CUDA_VISIBLE_DEVICES"] = ",".join(str(g) for g in gpus)
    elif host.gpus and "CUDA_VISIBLE_DEVICES" not in env:
        env["CUDA_VISIBLE_DEVICES"] = ""  # a CPU task must not grab the host's GPUs
    # A python given in the profile is the user's shell text (it may be "uv run python");
    # the launcher's own interpreter path is quoted like every other value.
    shell_python = settings.python or shlex.quote(python)
    command = fill_placeholders(settings.command, {"python": shell_python}, quote=False)
    command = fill_placeholders(command, {
        "role": role.name, "index": str(index), "task": task_id, "host": address,
    })
    if profile.overrides.args:  # `up PROFILE -- ARGS`: for every task's command
        command = " ".join([command, *(shlex.quote(a) for a in profile.overrides.args)])
    return TaskSpec(
        task_id=task_id,
        role=role.name,
        index=index,
        host=host.name,
        address=address,
        port=None if role.port is None else role.port + nth_on_host,
        gpus=gpus,
        command=command,
        python=python,
        workdir=_workdir(settings.workdir, host, profile.directory),
        env=env,
        restart=settings.restart,
        max_restarts=settings.max_restarts,
        grace_seconds=settings.grace_seconds,
        in_cluster=role.name != "evaluator",
        setup=settings.setup,
        shell=settings.shell,
        min_uptime=settings.min_uptime,
        autolog=settings.autolog,
        stall_seconds=settings.stall_seconds,
        on_stall=settings.on_stall,
        on_nan=settings.on_nan,
        checkpoint_dir=fill_placeholders(settings.checkpoint_dir, {
            "role": role.name, "index": str(index), "task": task_id}, quote=False),
    )


def role_container(profile: Profile, role: str) -> ContainerSpec | None:
    """The container a role's tasks run in (its own, else [defaults]'); None: they run bare."""
    return profile.roles[role].settings.container


def task_container(plan: Plan, task: TaskSpec) -> ContainerSpec | None:
    return role_container(plan.profile, task.role)


def agent_python(plan: Plan, host: str) -> str:
    """The interpreter the host agent runs with: a bare task's python there (the first one), else,
    where every task of the host is containerised (their python is the image's), the launcher's own
    on local and Slurm hosts and ``python3`` over SSH, as for a bare task without ``python``."""
    tasks = [t for t in plan.tasks if t.host == host]
    bare = [t for t in tasks if task_container(plan, t) is None]
    if bare or not tasks:
        return (bare or tasks)[0].python if tasks else "python3"
    return sys.executable if plan.profile.hosts[host].transport not in SSH_TRANSPORTS else "python3"


def _workdir(workdir: str, host: HostConfig, profile_dir: Path) -> str:
    """Local and Slurm hosts: an absolute path, relative ones taken from the profile's directory
    (Slurm nodes are assumed to share the launcher's filesystem, as clusters usually do).

    SSH hosts: the path on the host as written, ``{profile_dir}`` expanded (useful for SSH to
    this machine or a shared filesystem).
    """
    expanded = fill_placeholders(workdir, {"profile_dir": str(profile_dir.resolve())}, quote=False)
    if host.transport in SSH_TRANSPORTS:
        return posixpath.normpath(expanded) if expanded != workdir else workdir
    return str((profile_dir / Path(expanded).expanduser()).resolve())


def fill_placeholders(template: str, values: Mapping[str, str], *, quote: bool = True) -> str:
    """Replace ``{name}`` for the names in ``values``; everything else (``${VAR}``, ``{port}``) stays.

    Values are shell-quoted (a no-op for plain words) because the command runs under a shell.
    """

    def fill(match: re.Match[str]) -> str:
        name = match.group(1)
        if name not in values:
            return match.group(0)
        return shlex.quote(values[name]) if quote else values[name]

    return PLACEHOLDER_RE.sub(fill, template)


def render_command(template: str, *, port: int, run_dir: str, outputs: str = "") -> str:
    """Fill the launch-time placeholders ``{port}``, ``{run_dir}`` and ``{outputs}`` of a task's command."""
    return fill_placeholders(template, {"port": str(port), "run_dir": run_dir, "outputs": outputs})


#: what ``distlaunch tfconfig`` shows for a port picked at launch
PICKED_AT_LAUNCH = "<picked at launch>"


def host_port(address: str, port: int | str) -> str:
    """``address:port``, with brackets around IPv6 addresses as gRPC expects."""
    return f"[{address}]:{port}" if ":" in address else f"{address}:{port}"


def tf_config(plan: Plan, task_id: str, ports: Mapping[str, int] | None = None,
              unknown_port: str | None = None) -> TFConfig:
    """The TF_CONFIG of one task, exactly in TensorFlow's format.

    ``unknown_port``: what stands for a port picked at launch (``tfconfig`` shows the plan of a
    profile without fixed ports); without it such a port is an error (``PortUnresolved``).

    ``ports`` maps task ids to the ports picked at launch; they win over the profile's. A task's
    index is its place among its role's tasks in the plan: its own index, unless the role shrank
    after a host was lost (then the tasks left are numbered 0..n-1 in order). The
    evaluator is left out of ``cluster`` (ParameterServerStrategy breaks on it) but gets its
    own ``task`` entry.
    """
    try:
        task = plan.task(task_id)
    except KeyError:
        raise UnknownTask(f"no task {task_id!r} in {plan.profile.path}; "
                          f"valid task ids: {', '.join(t.task_id for t in plan.tasks)}") from None
    ports = ports or {}
    cluster: dict[str, list[str]] = {}
    index = task.index
    for role in CLUSTER_ROLES:
        members = sorted((t for t in plan.tasks if t.role == role and t.in_cluster), key=lambda t: t.index)
        for rank, member in enumerate(members):
            if member.task_id == task.task_id:
                index = rank  # a role that shrank (placement.py) numbers the tasks left 0..n-1
            port: int | str | None = ports.get(member.task_id, member.port)
            if port is None and unknown_port is not None:
                port = unknown_port
            if port is None:
                raise PortUnresolved(
                    f"{plan.profile.path}: task {member.task_id} has no port; its port is picked at "
                    f"launch: give roles.{member.role}.port to fix it")
            cluster.setdefault(role, []).append(host_port(member.address, port))
    return {"cluster": cluster, "task": {"type": task.role, "index": index}}


def split_secrets(env: Mapping[str, str], secrets: Iterable[str] = ()) -> tuple[dict[str, str], dict[str, str]]:
    """(public, secret): secret-looking names, and values holding a ``${env:...}`` value, are secret.
    Secret ones never go into a file: the agent gets them in its environment."""
    values = [s for s in secrets if s]
    public: dict[str, str] = {}
    secret: dict[str, str] = {}
    for name, value in env.items():
        hidden = is_secret(name) or any(v in value for v in values)
        (secret if hidden else public)[name] = value
    return public, secret


def mask_env(env: Mapping[str, str]) -> dict[str, str]:
    """``env`` with the values of secret-looking keys replaced by ``****``, for printing."""
    return {name: MASK if is_secret(name) else value for name, value in env.items()}
