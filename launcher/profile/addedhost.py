"""The host ``distlaunch add-host RUN HOST`` (or a ``host_discovery`` command) names, as a HostConfig.

HOST is a host of the profile's [hosts] the run does not use yet, or ``[user@]address[:port]``: a
new ssh host named by its address, read as if it were written under [hosts] with the profile's
[ssh] (and [defaults]) settings, so its key policy, identity and client are the others'.
"""

from __future__ import annotations

import re
import tomllib
from typing import Any

from launcher.errors import UserError
from launcher.model import HostConfig, Profile
from launcher.profile.checks import DEFAULT_SSH, Checker
from launcher.profile.hosts import HostsReader
from launcher.profile.names import host_name_problem
from launcher.profile.overrides import resolve

_SPEC = re.compile(r"^(?:(?P<user>[^@\s]+)@)?(?P<address>[^@\s:]+)(?::(?P<port>[0-9]{1,5}))?$")


def added_host(profile: Profile, spec: str) -> HostConfig:
    """The HostConfig ``spec`` stands for; a UserError (one line) for one that cannot be a host."""
    spec = spec.strip()
    if spec in profile.hosts:
        return profile.hosts[spec]
    found = _SPEC.match(spec)
    if found is None:
        raise UserError(f"{spec!r} is no host: give a host of the profile's [hosts] or [user@]address[:port]")
    address = found.group("address")
    if address in profile.hosts:  # [user@]NAME[:port] of a profile's host: that host, as written, or nothing
        raise UserError(f"{address!r} is [hosts.{address}] of the profile; give {address} alone to add it as "
                        "written there")
    problem = host_name_problem(address)
    if problem is not None:
        raise UserError(f"{address!r} cannot name a host ({problem})")
    entry: dict[str, Any] = {"address": address}
    if found.group("user"):
        entry["user"] = found.group("user")
    if found.group("port"):
        entry["ssh_port"] = int(found.group("port"))
    data, _ = resolve(tomllib.loads(profile.text), profile.overrides) if profile.text else ({}, None)
    checker = Checker(profile.path, profile.text)
    reader = HostsReader(checker, profile.secrets)
    ssh_table = data.get("ssh", {}) if isinstance(data.get("ssh"), dict) else {}
    defaults_table = data.get("defaults", {}) if isinstance(data.get("defaults"), dict) else {}
    ssh = reader.ssh_settings(ssh_table, ("ssh",), DEFAULT_SSH)
    notice = reader.default_preemption_notice(defaults_table, ssh_table)
    try:
        return reader.hosts({address: entry}, ssh, notice)[address]
    except Exception as exc:  # a ProfileError naming [hosts.ADDRESS]: the spec's mistake
        raise UserError(f"{spec!r}: {str(exc).rsplit(': ', 1)[-1]}") from None
