"""One builder for the profiles tests write: N roles on local hosts (or sshd / netns addresses), the usual knobs.

    build_profile(tmp_path / "p.toml", name="it", command="{python} -c 'print(1)'", roles={"worker": 2})

writes a profile named "it" whose [defaults] hold that command, with one host ``local`` (this
machine: address localhost, transport local) and a role ``worker`` of count 2 on it.

Values are Python values (str, int, float, bool, list, dict) written as TOML; ``top`` is raw TOML
placed among the top-level keys and ``extra`` raw TOML appended at the end, for what has no knob.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

#: a profile's roles: each role's count, or its table's values
Roles = Mapping[str, "int | Mapping[str, Any]"]


class SshServer(Protocol):
    """What a private sshd (tests.sshd.PrivateSshd) offers a profile."""

    user: str
    port: int
    identity_file: Path
    known_hosts: Path


def toml_value(value: Any) -> str:
    """``value`` as a TOML value: strings basic-quoted, lists as arrays, mappings as inline tables
    (their None entries left out)."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (int, float)):
        return repr(value)
    if isinstance(value, (str, Path)):
        return json.dumps(str(value))
    if isinstance(value, Mapping):
        pairs = [f"{_key(k)} = {toml_value(v)}" for k, v in value.items() if v is not None]
        return "{ " + ", ".join(pairs) + " }" if pairs else "{}"
    if isinstance(value, Sequence):
        return "[" + ", ".join(toml_value(v) for v in value) + "]"
    raise TypeError(f"no TOML for {value!r}")


def _key(key: str) -> str:
    return key if key.replace("_", "").replace("-", "").isalnum() else json.dumps(key)


def table(header: str, values: Mapping[str, Any]) -> str:
    """``[header]`` and one ``key = value`` line per entry that is not None."""
    lines = [f"[{header}]"] + [f"{_key(k)} = {toml_value(v)}" for k, v in values.items() if v is not None]
    return "\n".join(lines) + "\n"


@dataclass(frozen=True)
class Host:
    """A ``[hosts.<name>]`` table: this machine by default; ``transport=None`` for ssh."""

    name: str = "local"
    address: str = "localhost"
    transport: str | None = "local"
    ssh_port: int | None = None
    options: Mapping[str, Any] = field(default_factory=dict)

    def toml(self) -> str:
        return table(f"hosts.{self.name}", {"address": self.address, "transport": self.transport,
                                            "ssh_port": self.ssh_port, **self.options})


def local_host(name: str = "local", **options: Any) -> Host:
    return Host(name, options=options)


def ssh_host(name: str, address: str, port: int | None = None, **options: Any) -> Host:
    """A host reached over ssh (a netns address, or loopback with a private sshd's port)."""
    return Host(name, address, None, port, options)


def sshd_host(server: SshServer, name: str = "box", address: str = "127.0.0.1", **options: Any) -> Host:
    return ssh_host(name, address, server.port, **options)


def netns_hosts(lab: Any, transport: str | None = None, connect_timeout: float = 5) -> list[Host]:
    """One ssh host per host of a netns lab (tests.netns.NetnsLab), each reached at its own address
    through its own sshd on port 22; ``transport`` names the ssh client ("ssh", "openssh")."""
    hosts = []
    for name, host in lab.hosts.items():
        assert host.sshd is not None
        options = {"transport": transport, **ssh_table(host.sshd), "connect_timeout": connect_timeout}
        hosts.append(ssh_host(name, host.address, 22, **options))
    return hosts


def ssh_table(server: SshServer, **options: Any) -> dict[str, Any]:
    """The ``[ssh]`` values that reach a private sshd (user, key, known_hosts); ``options`` add or replace."""
    return {"user": server.user, "identity_file": str(server.identity_file),
            "known_hosts": str(server.known_hosts), **options}


def ps_mnist_command(steps: int) -> str:
    """The small ParameterServerStrategy example (examples/ps_mnist.py) as a profile's command."""
    return f"{{python}} examples/ps_mnist.py --steps {steps} --log-every 20 --checkpoint-dir {{run_dir}}/ckpt"


def profile_toml(*, name: str | None = "it", strategy: str | None = None, success_policy: str | None = None,
                 orphan_grace: float | None = None, outputs: str | Path | None = None, top: str = "",
                 command: str | None = None, workdir: str | Path | None = None, env: Mapping[str, str] | None = None,
                 restart: str | None = None, max_restarts: int | None = None, grace: float | None = None,
                 defaults: Mapping[str, Any] | None = None,
                 ssh: Mapping[str, Any] | None = None, hosts: Sequence[Host] = (Host(),),
                 roles: Roles | None = None, role_hosts: bool = True,
                 metrics: Mapping[str, str] | None = None, notify: Mapping[str, Any] | None = None,
                 log_policies: Sequence[Mapping[str, Any]] = (), extra: str = "") -> str:
    """A profile's text. ``roles`` maps a role to its count or to its table's values (default: one
    worker); each role runs on every host in ``hosts`` (``hosts = [...]``) unless its table says
    where, or ``role_hosts`` is False. ``defaults`` adds [defaults] keys the knobs do not name."""
    head = {"name": name, "strategy": strategy, "success_policy": success_policy,
            "orphan_grace_seconds": orphan_grace, "outputs": str(outputs) if outputs is not None else None}
    out = [f"{k} = {toml_value(v)}\n" for k, v in head.items() if v is not None]
    if top:
        out.append(top.strip("\n") + "\n")
    values = {"command": command, "workdir": str(workdir) if workdir is not None else None, "env": env,
              "restart": restart, "max_restarts": max_restarts, "grace_seconds": grace, **(defaults or {})}
    if any(v is not None for v in values.values()):
        out.append(table("defaults", values))
    if ssh is not None:
        out.append(table("ssh", ssh))
    out.extend(host.toml() for host in hosts)
    names = [host.name for host in hosts]
    for role, spec in (roles if roles is not None else {"worker": 1}).items():
        spec = {"count": spec} if isinstance(spec, int) else dict(spec)
        if role_hosts and names and "hosts" not in spec:  # after the count, before the rest
            spec = {"count": spec.pop("count", None), "hosts": names, **spec}
        out.append(table(f"roles.{role}", spec))
    if metrics is not None:
        out.append(table("metrics", metrics))
    if notify is not None:
        out.append(table("notify", notify))
    out.extend(table("[log_policies]", policy) for policy in log_policies)
    if extra:
        out.append(extra.strip("\n") + "\n")
    return "".join(out)


def build_profile(path: Path, **knobs: Any) -> Path:
    """``profile_toml(**knobs)`` written to ``path``; the path."""
    path.write_text(profile_toml(**knobs), encoding="utf-8")
    return path
