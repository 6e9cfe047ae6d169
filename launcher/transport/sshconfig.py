"""Where an SSH host really is: the profile's settings over ``~/.ssh/config``, resolved as OpenSSH does.

``ssh -G`` prints the final settings after Include, Match and Host patterns; paramiko's own
SSHConfig ignores Include and most Match forms, so it is only the fallback where no ``ssh``
client is installed. What the config sets is told apart from OpenSSH's built-in defaults by
resolving the same name once more against an empty config (``-F /dev/null``): only values
that differ came from the file. Values the profile sets always win.
"""

from __future__ import annotations

import getpass
import os
import shutil
import subprocess
import threading
from dataclasses import dataclass

from launcher.errors import HostError
from launcher.model import HostConfig

#: keys of ``ssh -G`` output used here
_KEYS = ("hostname", "user", "port", "identityfile", "proxyjump", "serveraliveinterval",
         "serveralivecountmax", "connecttimeout", "userknownhostsfile")


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

    def describe(self) -> str:
        text = str(self.target)
        if self.jumps:
            text += " via " + " -> ".join(str(hop) for hop in self.jumps)
        return text


_cache: dict[tuple[str, str], dict[str, list[str]]] = {}
_cache_lock = threading.Lock()


def resolve(config: HostConfig) -> Route:
    """The route to ``config``'s host; raise HostError (one line) for an unusable ssh_config."""
    settings = config.ssh
    path = _config_path(config)
    found: dict[str, list[str]] = {}
    source = "profile only"
    if path is not None:
        found, source = _lookup(path, config.address)
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
    identities: tuple[str, ...] = (settings.identity_file,) if settings.identity_file else ()
    if (value := pick("identity_file", "identityfile")) is not None:
        identities = tuple(value)
    timeout = settings.connect_timeout
    if (value := pick("connect_timeout", "connecttimeout")) is not None and value[0] != "none":
        timeout = float(value[0])
    known = settings.known_hosts
    if (value := pick("known_hosts", "userknownhostsfile")) is not None:
        known = value[0]
    keepalive = int(found["serveraliveinterval"][0]) if "serveraliveinterval" in found else None
    target = Endpoint(alias=config.address, hostname=hostname, port=port, user=user,
                      identity_files=identities, keepalive_seconds=keepalive or None)
    jumps: tuple[Endpoint, ...] = ()
    proxy = found.get("proxyjump", ["none"])[0]
    if proxy != "none":
        jumps = tuple(_jump(spec, path, config) for spec in proxy.split(","))
    return Route(target=target, jumps=jumps, known_hosts=known, connect_timeout=timeout, source=source)


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
        found, _ = _lookup(path, host)
    try:
        port = int(port_text) if port_text else int(found.get("port", ["22"])[0])
    except ValueError:
        raise HostError(f"host {config.name}: ProxyJump {spec!r} has a bad port; fix it in "
                        f"{config.ssh.ssh_config}") from None
    return Endpoint(alias=host, hostname=found.get("hostname", [host])[0], port=port,
                    user=user or found.get("user", [getpass.getuser()])[0],
                    identity_files=tuple(found.get("identityfile", ())))


def _lookup(path: str, name: str) -> tuple[dict[str, list[str]], str]:
    key = (path, name)
    with _cache_lock:
        if key in _cache:
            return _cache[key], _source(path)
    found = _ssh_g(path, name) if shutil.which("ssh") is not None else _paramiko_lookup(path, name)
    with _cache_lock:
        _cache[key] = found
    return found, _source(path)


def _source(path: str) -> str:
    return f"{'ssh -G' if shutil.which('ssh') else 'paramiko'} {path}"


def _ssh_g(path: str, name: str) -> dict[str, list[str]]:
    configured = _run_ssh_g(["-F", path], name, path)
    defaults = _run_ssh_g(["-F", "/dev/null"], name, path)
    return {k: v for k, v in configured.items() if defaults.get(k) != v}


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
        if key in _KEYS:
            values.setdefault(key, []).extend(value.split() if key == "userknownhostsfile" else [value])
    return values


def _paramiko_lookup(path: str, name: str) -> dict[str, list[str]]:
    """The fallback: Host patterns and plain options only (no Include, no Match exec)."""
    import paramiko  # only without an ssh binary; it takes ~0.2 s to import

    try:
        parsed = paramiko.SSHConfig.from_path(path).lookup(name)
    except (OSError, paramiko.SSHException) as exc:
        raise HostError(f"{path}: cannot read it ({exc}); fix it or set ssh_config = false") from None
    values: dict[str, list[str]] = {}
    for key in _KEYS:
        if key in parsed and not (key == "hostname" and parsed[key] == name):
            raw = parsed[key]
            values[key] = list(raw) if isinstance(raw, list) else str(raw).split() \
                if key == "userknownhostsfile" else [str(raw)]
    return values

