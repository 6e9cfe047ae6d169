"""Host key checking for SSH hosts: the profile's known_hosts file is the only source of trust.

Fabric installs paramiko's ``AutoAddPolicy``, which trusts any key it has never seen. We replace
it with one of two policies: ``reject`` (unknown key: refuse) and ``accept-new`` (unknown key:
record it in the profile's known_hosts and say so once). A key that differs from the recorded
one is refused under both, because paramiko raises ``BadHostKeyException`` before it consults
any policy.
"""

from __future__ import annotations

import base64
import contextlib
import hashlib
import os
import threading
from collections.abc import Callable, Sequence

import paramiko

from launcher.model import HostKeyPolicy

_append_lock = threading.Lock()


class UnknownHostKey(paramiko.SSHException):
    """The server's key is not in known_hosts and the policy does not allow adding it."""

    def __init__(self, key_name: str, key: paramiko.PKey) -> None:
        super().__init__(f"no known_hosts entry for {key_name}")
        self.key_name = key_name
        self.key = key


def fingerprint(key: paramiko.PKey) -> str:
    """The ``SHA256:...`` form ssh prints, so users can compare it with ``ssh-keygen -l``."""
    digest = hashlib.sha256(key.asbytes()).digest()
    return "SHA256:" + base64.b64encode(digest).decode().rstrip("=")


def host_key_name(address: str, port: int) -> str:
    """The name known_hosts files use for ``address:port`` (``[addr]:port`` unless port 22)."""
    return address if port == 22 else f"[{address}]:{port}"


def append_known_host(path: str, key_name: str, key: paramiko.PKey) -> None:
    """Append one plain ``name keytype base64`` line, creating the file (and its dir) if needed."""
    directory = os.path.dirname(path)
    if directory:
        os.makedirs(directory, mode=0o700, exist_ok=True)
    line = f"{key_name} {key.get_name()} {key.get_base64()}\n"
    with _append_lock:
        needs_newline = False
        if os.path.exists(path) and os.path.getsize(path) > 0:
            with open(path, "rb") as existing:
                existing.seek(-1, os.SEEK_END)
                needs_newline = existing.read(1) != b"\n"
        fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
        with os.fdopen(fd, "a") as out:
            out.write(("\n" if needs_newline else "") + line)


class _RejectUnknown(paramiko.MissingHostKeyPolicy):
    def missing_host_key(self, client: paramiko.SSHClient, hostname: str, key: paramiko.PKey) -> None:
        raise UnknownHostKey(hostname, key)


class _AcceptNew(paramiko.MissingHostKeyPolicy):
    def __init__(self, known_hosts_path: str, notify: Callable[[str, paramiko.PKey], None],
                 alias: str | None) -> None:
        self._path = known_hosts_path
        self._notify = notify
        self._alias = alias

    def missing_host_key(self, client: paramiko.SSHClient, hostname: str, key: paramiko.PKey) -> None:
        name = self._alias or hostname  # as ssh: a HostKeyAlias is what the file records
        append_known_host(self._path, name, key)
        client.get_host_keys().add(hostname, key.get_name(), key)
        self._notify(name, key)


def install_policy(client: paramiko.SSHClient, known_hosts_path: str, policy: HostKeyPolicy,
                   notify: Callable[[str, paramiko.PKey], None], extra: Sequence[str] = (),
                   alias: str | None = None, name: str = "") -> None:
    """Load ``known_hosts_path`` (a missing file counts as empty) and set the matching policy.
    ``extra``: more files whose keys are trusted (never written); ``alias``: HostKeyAlias, the
    name keys are looked up and recorded under instead of ``name`` (the host as paramiko names it)."""
    if os.path.exists(known_hosts_path):
        client.load_host_keys(known_hosts_path)
    for path in extra:
        if os.path.exists(path):
            with contextlib.suppress(OSError):
                client.load_system_host_keys(path)
    if alias:
        for keys in (client.get_host_keys(), client._system_host_keys):
            for key in (keys.lookup(alias) or {}).values():
                keys.add(name, key.get_name(), key)
    if policy == "accept-new":
        client.set_missing_host_key_policy(_AcceptNew(known_hosts_path, notify, alias))
    else:
        client.set_missing_host_key_policy(_RejectUnknown())
