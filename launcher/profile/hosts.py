"""The profile's hosts: [ssh] settings, [hosts.NAME] (host ranges too), a [slurm] allocation, the
spares, and the names that pick hosts out of them (a role's ``hosts``, ``spares``)."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from typing import Any, cast

from launcher.model import (
    HostConfig,
    HostKeyPolicy,
    SlurmConfig,
    SshSettings,
    Transport,
)
from launcher.profile import hostlist
from launcher.profile.checks import (
    SLURM_PLACEHOLDER,
    Checker,
    KeyPath,
    _get,
    show_value,
    suggest,
)
from launcher.profile.keys import (
    HOST_KEYS,
    SLURM_KEYS,
    SSH_TABLE,
    TOP_KEYS,
)
from launcher.profile.names import MAX_HOSTS, host_name_problem
from launcher.profile.slurm_env import current_allocation, node_addresses


def placeholder(component: int) -> str:
    """The host standing for a component's nodes outside an allocation."""
    return SLURM_PLACEHOLDER if component == 0 else f"{SLURM_PLACEHOLDER}-het{component}"


@dataclasses.dataclass(frozen=True)
class HostsReader:
    """[ssh], [hosts] and [slurm] of a profile, each read into its typed value; mistakes go
    through ``checker``, the file's one-line error."""

    checker: Checker
    #: the values taken from the launcher's environment (``${env:...}``), refused in a notice
    secrets: frozenset[str] = frozenset()

    def ssh_settings(self, table: Mapping[str, Any], key: KeyPath, base: SshSettings) -> SshSettings:
        if key == ("ssh",):
            self.checker.check_table(table, key, SSH_TABLE)
        user: str | None = table.get("user")
        identity: str | None = table.get("identity_file")
        known: str | None = table.get("known_hosts")
        policy = cast(HostKeyPolicy | None, table.get("host_key_policy"))
        timeout: float | None = table.get("connect_timeout")
        port: int | None = table.get("ssh_port")
        ssh_config = self.ssh_config(table, key, base.ssh_config)
        return SshSettings(
            user=base.user if user is None else user,
            identity_file=base.identity_file if identity is None else identity,
            known_hosts=base.known_hosts if known is None else known,
            host_key_policy=base.host_key_policy if policy is None else policy,
            connect_timeout=base.connect_timeout if timeout is None else float(timeout),
            ssh_port=base.ssh_port if port is None else port,
            ssh_config=ssh_config,
            client=table.get("client", base.client),
            unset=tuple(name for name in base.unset if name not in table),
        )

    def ssh_config(self, table: Mapping[str, Any], key: KeyPath, base: str | None) -> str | None:
        """``ssh_config = "path"`` or ``false`` (OpenSSH's config is not read at all)."""
        value = table.get("ssh_config")
        if value is None:
            return base
        if value is False:
            return None
        if isinstance(value, str) and value.strip():
            return value
        raise self.checker.fail((*key, "ssh_config"), f'expected a path like "~/.ssh/config" or false, '
                                f"got {show_value(value)}")

    def preemption_notice(self, table: Mapping[str, Any], key: KeyPath) -> str | None:
        """``preemption_notice`` of one table (its type already checked), refused when blank."""
        value: str | None = table.get("preemption_notice")
        if value is not None and not value.strip():
            raise self.checker.fail((*key, "preemption_notice"), "is empty; give a shell command that exits 0 "
                                    "when the host is about to go, or leave the key out")
        if value is not None and any(secret in value for secret in self.secrets if secret):
            raise self.checker.fail((*key, "preemption_notice"), "holds a value from the launcher's environment "
                                    "(${env:...}), which every user would see in `ps` while the agent runs it, and "
                                    "the run's files and events would keep; have the command read the secret on "
                                    "the host itself (a 0600 file of yours, e.g. $(cat ~/.config/token))")
        return value

    def default_preemption_notice(self, defaults: Mapping[str, Any], ssh: Mapping[str, Any]) -> str | None:
        """The notice of every host without its own: [defaults]' or [ssh]'s, said in one place."""
        in_defaults = self.preemption_notice(defaults, ("defaults",))
        in_ssh = self.preemption_notice(ssh, ("ssh",))
        if in_defaults is not None and in_ssh is not None:
            raise self.checker.fail(("ssh", "preemption_notice"), "is also set under [defaults]; keep the "
                                    "hosts' default notice in one of the two tables")
        return in_defaults if in_defaults is not None else in_ssh

    def hosts(self, table: Mapping[str, Any], ssh: SshSettings,
              notice: str | None = None) -> dict[str, HostConfig]:
        """[hosts], each host's own ``preemption_notice`` winning over ``notice`` (the default)."""
        if not table:
            # No [hosts]: everything runs on this machine.
            return {"local": HostConfig(name="local", address="localhost", transport="local",
                                        preemption_notice=notice)}
        hosts: dict[str, HostConfig] = {}
        for name in table:
            key = ("hosts", name)
            problem = host_name_problem(name)
            if problem is not None:
                raise self.checker.fail(key, problem)
            entry = self.checker.table(table, name, ("hosts",))
            self.checker.check_table(entry, key, HOST_KEYS)
            address: str | None = entry.get("address")
            if address is None or not address.strip():
                raise self.checker.fail(key, f'has no address; add address = "10.0.0.1" (or "localhost") '
                                        f"under [hosts.{name}]")
            transport = cast(Transport, entry.get("transport", "openssh" if ssh.client == "openssh" else "ssh"))
            tf_address: str | None = entry.get("tf_address")
            if tf_address is not None and not tf_address.strip():
                raise self.checker.fail((*key, "tf_address"), "is empty; give the address tasks on other hosts reach "
                                        "this one at, or leave the key out")
            template = HostConfig(name=name, address=address.strip(), transport=transport,
                                  ssh=self.ssh_settings(entry, key, ssh), gpus=self.gpus(entry, key),
                                  tf_address=tf_address.strip() if tf_address else None,
                                  env=self.checker.env(entry, key),
                                  preemption_notice=self.preemption_notice(entry, key) or notice)
            for host in self.expand_range(template, key, table):
                if host.name in hosts:
                    raise self.checker.fail(key, f'makes host "{host.name}", which is already defined; '
                                            "rename one of them")
                hosts[host.name] = host
            if len(hosts) > MAX_HOSTS:
                raise self.checker.fail(key, f"makes the job's hosts more than {MAX_HOSTS}; "
                                        "check the host ranges")
        return hosts

    def expand_range(self, template: HostConfig, key: KeyPath,
                     table: Mapping[str, Any]) -> list[HostConfig]:
        """One HostConfig per name of a host range (``gpu[01-16].lab``), else ``template`` alone.

        Generated names: the table's name, '-', and the bracket values as written, joined by '-'
        (``gpu-01``; ``r[1-2]n[1-4]`` -> ``NAME-1-1``); where items differ in their number of
        brackets (``a,b[1-2]``), the 1-based position instead (``NAME-1``, ``NAME-2``, ...).
        """
        if not hostlist.has_ranges(template.address):
            return [template]
        try:
            expanded = hostlist.expand_detailed(template.address)
        except hostlist.HostlistError as exc:
            raise self.checker.fail((*key, "address"), f"bad host range: {exc}") from None
        if template.tf_address is not None and len(expanded) > 1:
            raise self.checker.fail((*key, "tf_address"), "cannot be shared by all hosts of a range; "
                                    "give those hosts their own [hosts.X] tables")
        widths = {len(host.values) for host in expanded}
        by_values = widths != {0} and len(widths) == 1 and \
            len({host.values for host in expanded}) == len(expanded)
        digits = len(str(len(expanded)))
        configs = []
        for position, host in enumerate(expanded, start=1):
            suffix = "-".join(host.values) if by_values else str(position).zfill(digits)
            configs.append(dataclasses.replace(template, name=f"{template.name}-{suffix}",
                                               address=host.name, group=template.name))
        return configs

    def gpus(self, entry: Mapping[str, Any], key: KeyPath) -> tuple[int, ...]:
        value: list[int] = _get(entry, HOST_KEYS, "gpus")
        if len(set(value)) != len(value):
            raise self.checker.fail((*key, "gpus"), f"lists a GPU twice: {show_value(value)}; list each index once")
        return tuple(value)

    def slurm_hosts(self, notice: str | None = None, slurm: SlurmConfig | None = None) -> dict[str, HostConfig]:
        """One host per node of the allocation; outside one, a placeholder that ``check`` shows
        and that refuses to connect (so ``export sbatch`` and ``check --no-remote`` still work), one
        per component of a heterogeneous job. ``notice``: every node's preemption notice ([defaults]
        or [ssh]). In a heterogeneous allocation each host is one node of one component; a node
        Slurm gave two components is two hosts (``NODE-het<K>`` for the later one)."""
        try:
            allocation = current_allocation()
        except hostlist.HostlistError as exc:
            raise self.checker.fail(("slurm",), f"SLURM_JOB_NODELIST is not a hostlist ({exc})") from None
        if allocation is None:
            count = len(slurm.components) if slurm is not None and slurm.heterogeneous else 1
            return {placeholder(k): HostConfig(name=placeholder(k), address="(no allocation)", transport="slurm",
                                               group="slurm", preemption_notice=notice,
                                               slurm_het_group=k if count > 1 else None)
                    for k in range(count)}
        addresses = node_addresses(allocation.nodes)
        if not allocation.components:
            return {node: HostConfig(name=node, address=node, transport="slurm", group="slurm",
                                     gpus=allocation.gpus_per_node, slurm_job_id=allocation.job_id,
                                     preemption_notice=notice, tf_address=addresses.get(node))
                    for node in allocation.nodes}
        hosts: dict[str, HostConfig] = {}
        for index, component in enumerate(allocation.components):
            for node in component.nodes:
                name = node if node not in hosts else f"{node}-het{index}"
                hosts[name] = HostConfig(name=name, address=node, transport="slurm", group="slurm",
                                         gpus=component.gpus_per_node, slurm_job_id=allocation.job_id,
                                         preemption_notice=notice, tf_address=addresses.get(node),
                                         slurm_het_group=index)
        return hosts

    def spares(self, data: Mapping[str, Any], hosts: Mapping[str, HostConfig]) -> tuple[str, ...]:
        """``spares``: host names, a range's table name standing for all its hosts, each host once.
        Outside a Slurm allocation its nodes are unknown: none (``up``, inside it, reads them)."""
        value: list[str] = _get(data, TOP_KEYS, "spares")
        if SLURM_PLACEHOLDER in hosts and hosts[SLURM_PLACEHOLDER].transport == "slurm":
            return ()
        seen: dict[str, str] = {}  # host -> the name it was listed by
        for written, host in expand_names(self.checker, ("spares",), value, hosts):
            if host in seen:
                how = "" if seen[host] == written == host else f' (as "{seen[host]}" and as "{written}")'
                raise self.checker.fail(("spares",), f'lists host "{host}" twice{how}; list each spare once')
            seen[host] = written
        return tuple(seen)

    def slurm(self, data: Mapping[str, Any]) -> SlurmConfig | None:
        if "slurm" not in data:
            return None
        table = self.checker.table(data, "slurm", ())
        key: KeyPath = ("slurm",)
        self.checker.check_table(table, key, SLURM_KEYS)
        if data.get("hosts"):
            raise self.checker.fail(("hosts",), "[slurm] takes the hosts from the allocation; remove [hosts] "
                                    "(or remove [slurm] to use SSH)")
        for name in ("time", "partition", "account"):
            if name in table and not table[name].strip():
                raise self.checker.fail((*key, name), "is empty; give a value or leave the key out")
        extra: list[str] = table.get("sbatch_args", [])
        taken = [name for name in (arg.split("=", 1)[0] for arg in extra) if name in ("--comment", "--open-mode")]
        if taken:  # the job's comment is how a run finds its job again; append keeps a requeue's output
            raise self.checker.fail((*key, "sbatch_args"), f"{taken[0]}: distlaunch sets the job's {taken[0]} "
                                    "itself (the run's id, with which it finds the job again; the batch output "
                                    "of every requeue); leave it out")
        return SlurmConfig(nodes=table.get("nodes"), time=table.get("time"), partition=table.get("partition"),
                           account=table.get("account"), gpus_per_node=table.get("gpus_per_node"),
                           sbatch_args=tuple(extra), time_limit_action=table.get("time_limit_action"),
                           time_limit_margin_seconds=float(table.get("time_limit_margin_seconds", 300.0)))


def expand_names(checker: Checker, key: KeyPath, names: Sequence[str],
                 hosts: Mapping[str, HostConfig]) -> list[tuple[str, str]]:
    """(name as written, host) for each host ``names`` pick, in order: a host's own name, or a
    range's table name (or "slurm") standing for every host it made; an unknown name is refused."""
    picked: list[tuple[str, str]] = []
    for name in names:
        members = [h.name for h in hosts.values() if h.group == name]
        if name not in hosts and not members:
            raise checker.fail(key, f'host "{name}" is not defined; {suggest(name, hosts)} '
                               f"(or add [hosts.{name}])")
        picked.extend((name, host) for host in members or [name])
    return picked
