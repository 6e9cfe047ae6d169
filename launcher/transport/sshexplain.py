"""Why an SSH connect failed, as one line the user can act on (the built-in client, ssh.py)."""

from __future__ import annotations

import errno
import os
import socket

import paramiko

from launcher.transport import known_hosts, sshconfig


def explain_failure(exc: Exception, endpoint: sshconfig.Endpoint, route: sshconfig.Route, label: str,
                    name: str, ssh_config: str | None) -> str:
    """One actionable line for a failed connect to ``endpoint`` (the target or a jump host) of
    host ``name`` (the profile's), whose OpenSSH settings come from ``ssh_config``."""
    kh = route.known_hosts
    host, port, user = endpoint.hostname, endpoint.port, endpoint.user
    timeout = route.connect_timeout
    identity = ", ".join(endpoint.identity_files)
    if isinstance(exc, known_hosts.UnknownHostKey):
        offered = f"{exc.key.get_name()} {known_hosts.fingerprint(exc.key)}"
        return (f"{label}: unknown host key ({offered}); "
                f"add it with `ssh-keyscan -p {port} {host} >> {kh}` "
                f"or set host_key_policy = \"accept-new\"")
    if isinstance(exc, paramiko.BadHostKeyException):
        name = known_hosts.host_key_name(host, port)
        offered = f"{exc.key.get_name()} {known_hosts.fingerprint(exc.key)}"
        return (f"{label}: host key CHANGED (offers {offered}, "
                f"{kh} has {known_hosts.fingerprint(exc.expected_key)}); "
                f"this may be an attack; if the host was reinstalled, remove the old key with "
                f"`ssh-keygen -R '{name}' -f {kh}`")
    if isinstance(exc, paramiko.PasswordRequiredException):
        agent = ("ssh-agent does not hold it" if os.environ.get("SSH_AUTH_SOCK")
                 else "no ssh-agent is running (SSH_AUTH_SOCK unset)")
        return (f"{label}: key {identity} is passphrase-protected and {agent}; "
                f"run `ssh-add {identity}` (start one with `eval $(ssh-agent)`), "
                f"or use a key without passphrase")
    if isinstance(exc, paramiko.BadAuthenticationType) and "publickey" not in exc.allowed_types:
        return (f"{label}: the server accepts only {', '.join(exc.allowed_types)} authentication, "
                f"which the built-in SSH client does not do; set transport = \"openssh\" for this host")
    if isinstance(exc, paramiko.AuthenticationException):
        if identity:
            return (f"{label}: refused key {identity} for user {user}; "
                    f"add {identity}.pub to ~{user}/.ssh/authorized_keys there "
                    f"or fix user / identity_file")
        return (f"{label}: refused every key from ssh-agent and ~/.ssh for user {user}; "
                f"set identity_file or user")
    if isinstance(exc, paramiko.ssh_exception.NoValidConnectionsError) and not all(
            getattr(e, "errno", None) == errno.ECONNREFUSED for e in exc.errors.values()):
        # paramiko raises this for any failed connect: "no route to host" is no refusal
        why = next((e.strerror or str(e) for e in exc.errors.values()), str(exc))
        return f"{label}: unreachable ({why}); check the address and the network"
    if isinstance(exc, paramiko.ssh_exception.NoValidConnectionsError | ConnectionRefusedError):
        return (f"{label}: connection refused; is sshd running there and is "
                f"ssh_port = {port} right?")
    if isinstance(exc, paramiko.ProxyCommandFailure):
        return (f"{label}: ProxyCommand `{route.proxy_command}` failed ({exc.error}); "
                f"fix it in {ssh_config}")
    if isinstance(exc, paramiko.ChannelException):
        return (f"{label}: the jump host could not connect on to {host}:{port} ({exc.text}); "
                f"check HostName/Port in {ssh_config} and that the jump host reaches it")
    if isinstance(exc, TimeoutError):
        return (f"{label}: no answer within {timeout:g}s (connect_timeout); "
                f"check the address and that the host is up")
    if isinstance(exc, socket.gaierror):
        return f"{label}: cannot resolve address {host}; fix hosts.{name}.address"
    if isinstance(exc, OSError):
        return f"{label}: unreachable ({exc.strerror or exc}); check the address and the network"
    if isinstance(exc, paramiko.SSHException) and any(
            sign in str(exc) for sign in ("banner", "No existing session", "Negotiation failed")):
        # the TCP port answered but no SSH handshake finished in time (or the peer hung up)
        return (f"{label}: no SSH answer within {timeout:g}s "
                f"(connect_timeout); check that ssh_port = {port} is an SSH server "
                f"and the host is up")
    if isinstance(exc, paramiko.SSHException) and "No authentication methods" in str(exc):
        return (f"{label}: no SSH key to offer for user {user}; set identity_file, "
                "or load a key into ssh-agent (`ssh-add`)")
    return f"{label}: SSH failed: {exc}"
