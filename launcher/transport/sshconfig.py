"""Where an SSH host really is: the profile's settings over ``~/.ssh/config``, resolved as OpenSSH does.

``ssh -G`` prints the final settings after Include, Match and Host patterns; paramiko's own
SSHConfig ignores Include and most Match forms, so it is only the fallback where no ``ssh``
client is installed. What the config sets is told apart from OpenSSH's built-in defaults by
resolving the same name once more against an empty config (``-F /dev/null``): only values
that differ came from the file. Values the profile sets always win. A setting the built-in
client cannot honour is refused by name (sshoptions.py); hosts with ``transport = "openssh"``
are reached by the ``ssh`` binary itself, which honours everything.
"""

from __future__ import annotations

import contextlib
import getpass
import os
import shutil
import subprocess
import threading
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from launcher.errors import HostError
from launcher.model import SSH_TRANSPORTS, HostConfig, HostKeyPolicy, Profile
from launcher.profile.names import address_problem, user_problem
from launcher.transport import sshoptions

#: settings of ``ssh -G`` whose value is a list of words, not one value
_LISTS = ("userknownhostsfile", "globalknownhostsfile")
#: settings that may be given several times, each adding a value
_REPEATED = ("identityfile", "certificatefile", "localforward", "remoteforward", "dynamicforward",
             "sendenv", "setenv", "canonicaldomains", "permitremoteopen")
#: where OpenSSH looks for known host keys when nothing says otherwise
GLOBAL_KNOWN_HOSTS = ("/etc/ssh/ssh_known_hosts", "/etc/ssh/ssh_known_hosts2")


#: the config OpenSSH reads by default; its absence is no error
DEFAULT_CONFIG = "~/.ssh/config"


@dataclass(frozen=True)
class Endpoint:
    """One SSH server to authenticate to: the target, or one hop on the way to it."""

    alias: str  # the name as written (profile address, or a ProxyJump entry)
    hostname: str
    port: int
    user: str
    identity_files: tuple[str, ...]  # explicit keys only; empty: ssh-agent, then ~/.ssh defaults
    keepalive_seconds: int | None = None  # ServerAliveInterval; None: the launcher's default
    keepalive_count: int = 3  # ServerAliveCountMax: unanswered keepalives before the link is dead
    certificate_files: tuple[str, ...] = ()  # CertificateFile: user certificates for those keys
    identities_only: bool = False  # IdentitiesOnly: no agent keys, only identity_files
    identity_agent: str | None = None  # IdentityAgent: a socket path, "none", or None ($SSH_AUTH_SOCK)

    def __str__(self) -> str:
        return f"{self.user}@{self.hostname}:{self.port}"


@dataclass(frozen=True)
class Route:
    """The target and the ProxyJump hops before it (first hop first)."""

    target: Endpoint
    jumps: tuple[Endpoint, ...]
    known_hosts: str
    connect_timeout: float
    source: str  # "ssh -G <path>", "paramiko <path>" or "profile only"
    #: host keys are also trusted from these (UserKnownHostsFile after the first, GlobalKnownHostsFile)
    extra_known_hosts: tuple[str, ...] = ()
    host_key_policy: HostKeyPolicy = "reject"
    host_key_alias: str | None = None  # HostKeyAlias: the name host keys are looked up under
    proxy_command: str | None = None  # ProxyCommand, its tokens expanded; run by /bin/sh
    compression: bool = False

    def describe(self) -> str:
        text = str(self.target)
        if self.jumps:
            text += " via " + " -> ".join(str(hop) for hop in self.jumps)
        if self.proxy_command:
            text += f" via ProxyCommand `{self.proxy_command}`"
        return text


_cache: dict[tuple[str, str], tuple[dict[str, list[str]], dict[str, list[str]]]] = {}
_cache_lock = threading.Lock()


def resolve(config: HostConfig) -> Route:
    """The route to ``config``'s host; raise HostError (one line) for an unusable ssh_config, or
    one that sets what the built-in client cannot honour (unless the host uses the openssh transport)."""
    settings = config.ssh
    problem = address_problem(config.address)  # before ssh -G reads it as an option, or a shell sees it
    if problem is not None:
        raise HostError(f"host {config.name}: address {problem}")
    path = _config_path(config)
    found: dict[str, list[str]] = {}
    full: dict[str, list[str]] = {}
    source = "profile only"
    if path is not None:
        found, full, source = _lookup(path, config.address)
    if config.transport == "ssh":
        _refuse(config, found)
    unset = settings.unset

    def pick(profile_key: str, config_key: str) -> list[str] | None:
        if profile_key in unset and config_key in found:
            return found[config_key]
        return None

    hostname = found.get("hostname", [config.address])[0]
    user = settings.user or getpass.getuser()
    if (value := pick("user", "user")) is not None:
        user = value[0]
    port = settings.ssh_port
    if (value := pick("ssh_port", "port")) is not None:
        port = int(value[0])
    alias = found.get("hostkeyalias", [None])[0]
    command = found.get("proxycommand", ["none"])[0]
    _refuse_unsafe_names(config, user, hostname, from_config="user" in unset and "user" in found,
                         proxy_command=command != "none")

    def expand(text: str) -> str:
        return sshoptions.expand(text, host=hostname, port=port, user=user, alias=config.address,
                                 key_alias=alias)

    identities: tuple[str, ...] = (settings.identity_file,) if settings.identity_file else ()
    if (value := pick("identity_file", "identityfile")) is not None:
        identities = tuple(expand(v) for v in value)
    timeout = settings.connect_timeout
    if (value := pick("connect_timeout", "connecttimeout")) is not None and value[0] != "none":
        timeout = float(value[0])
    known, extra = settings.known_hosts, ()
    if "known_hosts" in unset and path is not None:  # the profile sets none: ssh_config's, as ssh
        users = [expand(v) for v in full.get("userknownhostsfile", [known])]
        known, extra = users[0], (*users[1:], *full.get("globalknownhostsfile", GLOBAL_KNOWN_HOSTS))
    policy = settings.host_key_policy
    if "host_key_policy" in unset and "stricthostkeychecking" in found and config.transport == "ssh":
        policy = _policy(config, found["stricthostkeychecking"][0])
    target = Endpoint(alias=config.address, hostname=hostname, port=port, user=user,
                      identity_files=identities, **_auth_settings(found, expand))
    jumps: tuple[Endpoint, ...] = ()
    proxy = found.get("proxyjump", ["none"])[0]
    if proxy != "none":
        jumps = tuple(_jump(spec, path, config) for spec in proxy.split(","))
    return Route(target=target, jumps=jumps, known_hosts=known, connect_timeout=timeout, source=source,
                 extra_known_hosts=tuple(extra), host_key_policy=policy, host_key_alias=alias,
                 proxy_command=None if command == "none" or jumps else sshoptions.expand(
                     command, host=hostname, port=port, user=user, alias=config.address, key_alias=alias,
                     quote=True),
                 compression=found.get("compression", ["no"])[0] in ("yes", "true"))


def resolve_addresses(profile: Profile) -> dict[str, str]:
    """By host name, the HostName ~/.ssh/config gives the address of each SSH host a role or a spare uses:
    the address tasks on other hosts reach it at (they cannot resolve an alias), for ``build_plan``.
    A host with a tf_address or no ssh_config is left out, and so is one whose config does not
    resolve (the plan keeps its address as written; connecting to it says what is wrong)."""
    used = dict.fromkeys([*(name for role in profile.roles.values() for name in role.hosts[:role.count]),
                          *profile.spares])  # a task moved to a spare is reached at its address too
    found: dict[str, str] = {}
    for name in used:
        host = profile.hosts[name]
        if host.tf_address or host.transport not in SSH_TRANSPORTS or host.ssh.ssh_config is None:
            continue
        with contextlib.suppress(HostError):
            found[name] = resolve(host).target.hostname
    return found


def _refuse_unsafe_names(config: HostConfig, user: str, hostname: str, *, from_config: bool,
                         proxy_command: bool) -> None:
    """Before any ``%`` token is expanded (CVE-2023-51385): a user or host name with characters a
    shell acts on is refused where it came from the profile (as OpenSSH 9.6 refuses them from its
    command line), and from ssh_config too where a ProxyCommand would put it into a shell."""
    where = f"{config.ssh.ssh_config} sets User" if from_config else "user"
    problem = user_problem(user) if proxy_command or not from_config else None
    if problem is None and proxy_command:
        problem, where = address_problem(hostname), f"{config.ssh.ssh_config} sets HostName"
    if problem is not None:
        raise HostError(f"host {config.name}: {where} {problem}")


def _auth_settings(found: dict[str, list[str]], expand: Callable[[str], str]) -> dict[str, Any]:
    """Endpoint fields from what ssh_config set for one server (the target or a jump host)."""
    settings: dict[str, Any] = {
        "certificate_files": tuple(expand(v) for v in found.get("certificatefile", ())),
        "identities_only": found.get("identitiesonly", ["no"])[0] in ("yes", "true"),
    }
    if "identityagent" in found:
        agent = found["identityagent"][0]
        if agent == "SSH_AUTH_SOCK":
            agent = os.environ.get("SSH_AUTH_SOCK", "none")
        elif agent.startswith("$"):
            agent = os.environ.get(agent[1:].strip("{}"), "none")
        settings["identity_agent"] = agent if agent == "none" else os.path.expanduser(expand(agent))
    if "serveraliveinterval" in found:
        settings["keepalive_seconds"] = int(found["serveraliveinterval"][0]) or None
    if "serveralivecountmax" in found:
        settings["keepalive_count"] = max(1, int(found["serveralivecountmax"][0]))
    return settings


def _refuse(config: HostConfig, found: dict[str, list[str]]) -> None:
    for setting, value in sshoptions.refused(found):
        raise HostError(f"host {config.name}: {config.ssh.ssh_config} sets {setting} {value} for "
                        f"{config.address}, which the built-in SSH client cannot honour; "
                        f"set transport = \"openssh\" for this host")


def _policy(config: HostConfig, value: str) -> HostKeyPolicy:
    """StrictHostKeyChecking as host_key_policy; ``no`` (any key, even a changed one) is refused."""
    if value in ("false", "no", "off"):
        raise HostError(f"host {config.name}: {config.ssh.ssh_config} sets StrictHostKeyChecking no for "
                        f"{config.address}, which would accept any host key, a changed one too (an attacker's); "
                        f"use StrictHostKeyChecking accept-new or host_key_policy = \"accept-new\"")
    return "accept-new" if value == "accept-new" else "reject"  # yes, ask (no one to ask): reject


def _config_path(config: HostConfig) -> str | None:
    setting = config.ssh.ssh_config
    if setting is None:
        return None
    path = os.path.expanduser(setting)
    if os.path.isfile(path):
        return path
    if setting == DEFAULT_CONFIG:
        return None  # having no ~/.ssh/config is normal
    raise HostError(f"host {config.name}: ssh_config {setting} does not exist; fix the path "
                    "or set ssh_config = false in [ssh]")


def _jump(spec: str, path: str | None, config: HostConfig) -> Endpoint:
    """One ProxyJump entry, ``[user@]host[:port]``, itself resolved through the same config."""
    user, _, rest = spec.rpartition("@")
    host, port_text = rest, ""
    if rest.startswith("["):
        host, _, port_text = rest[1:].partition("]")
        port_text = port_text.lstrip(":")
    elif rest.count(":") == 1:
        host, _, port_text = rest.partition(":")
    found: dict[str, list[str]] = {}
    if path is not None:
        found, _, _ = _lookup(path, host)
        if config.transport == "ssh":
            _refuse(config, found)
            for key in ("proxyjump", "proxycommand", "hostkeyalias"):  # honoured for the target only
                if found.get(key, ["none"])[0] != "none":
                    raise HostError(f"host {config.name}: {config.ssh.ssh_config} sets {sshoptions.display(key)} "
                                    f"for the jump host {host}, which the built-in SSH client cannot honour; "
                                    f"set transport = \"openssh\" for this host")
    try:
        port = int(port_text) if port_text else int(found.get("port", ["22"])[0])
    except ValueError:
        raise HostError(f"host {config.name}: ProxyJump {spec!r} has a bad port; fix it in "
                        f"{config.ssh.ssh_config}") from None
    hostname = found.get("hostname", [host])[0]
    user = user or found.get("user", [getpass.getuser()])[0]

    def expand(text: str) -> str:
        return sshoptions.expand(text, host=hostname, port=port, user=user, alias=host)

    return Endpoint(alias=host, hostname=hostname, port=port, user=user,
                    identity_files=tuple(expand(v) for v in found.get("identityfile", ())),
                    **_auth_settings(found, expand))


def _lookup(path: str, name: str) -> tuple[dict[str, list[str]], dict[str, list[str]], str]:
    """(what the config sets, every setting with OpenSSH's defaults, the source) for ``name``."""
    key = (path, name)
    with _cache_lock:
        if key in _cache:
            return (*_cache[key], _source(path))
    if shutil.which("ssh") is not None:
        full = _run_ssh_g(["-F", path], name, path)
        defaults = _run_ssh_g(["-F", "/dev/null"], name, path)
        found = {k: v for k, v in full.items() if defaults.get(k) != v}
    else:
        found = full = _paramiko_lookup(path, name)
    with _cache_lock:
        _cache[key] = (found, full)
    return found, full, _source(path)


def _source(path: str) -> str:
    return f"{'ssh -G' if shutil.which('ssh') else 'paramiko'} {path}"


def _run_ssh_g(options: list[str], name: str, path: str) -> dict[str, list[str]]:
    try:
        result = subprocess.run(["ssh", "-G", *options, "--", name], capture_output=True, text=True,
                                timeout=20, stdin=subprocess.DEVNULL)
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise HostError(f"cannot resolve {name} with `ssh -G -F {path}`: {exc}") from None
    if result.returncode != 0:
        detail = (result.stderr.strip().splitlines() or [f"exit code {result.returncode}"])[-1]
        raise HostError(f"{path}: ssh cannot read it for {name} ({detail}); fix the file "
                        "or set ssh_config = false in [ssh]")
    values: dict[str, list[str]] = {}
    for line in result.stdout.splitlines():
        key, _, value = line.partition(" ")
        _add(values, key.lower(), value)
    return values


def _add(values: dict[str, list[str]], key: str, value: str) -> None:
    if key in _LISTS:
        values[key] = value.split()
    elif key in _REPEATED:
        values.setdefault(key, []).append(value)
    else:
        values[key] = [value]


def _paramiko_lookup(path: str, name: str) -> dict[str, list[str]]:
    """The fallback: Host patterns and plain options only (no Include, no Match exec)."""
    import paramiko  # only without an ssh binary; it takes ~0.2 s to import

    try:
        parsed = paramiko.SSHConfig.from_path(path).lookup(name)
    except (OSError, paramiko.SSHException) as exc:
        raise HostError(f"{path}: cannot read it ({exc}); fix it or set ssh_config = false") from None
    values: dict[str, list[str]] = {}
    for key, raw in parsed.items():
        if key == "hostname" and raw == name:
            continue
        for value in raw if isinstance(raw, list) else [raw]:
            _add(values, key, str(value))
    return values

