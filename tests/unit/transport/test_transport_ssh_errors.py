"""What a failed SSH connect is called: paramiko reports every socket error of a connect as
NoValidConnectionsError, and only a refusal may be told as "connection refused"."""

from __future__ import annotations

import errno

import paramiko

from launcher.model import HostConfig
from launcher.transport import sshconfig
from launcher.transport.ssh import SshHost
from launcher.transport.sshexplain import explain_failure


def explain(error: OSError) -> str:
    host = SshHost(HostConfig(name="b", address="10.233.1.11"))
    endpoint = sshconfig.Endpoint(alias="b", hostname="10.233.1.11", port=22, user="alice", identity_files=())
    route = sshconfig.Route(target=endpoint, jumps=(), known_hosts="/dev/null", connect_timeout=5,
                            source="profile only")
    exc = paramiko.ssh_exception.NoValidConnectionsError({("10.233.1.11", 22): error})
    return explain_failure(exc, endpoint, route, "host b (10.233.1.11:22)", host.name, host.settings.ssh_config)


def test_a_refused_connect_is_called_refused() -> None:
    said = explain(ConnectionRefusedError(errno.ECONNREFUSED, "Connection refused"))
    assert "connection refused; is sshd running there" in said


def test_no_route_to_host_is_called_unreachable_not_refused() -> None:
    said = explain(OSError(errno.EHOSTUNREACH, "No route to host"))
    assert said == "host b (10.233.1.11:22): unreachable (No route to host); check the address and the network"
