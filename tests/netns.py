"""Several test hosts on one machine: network namespaces, each with its own address and sshd.

As root, ``NetnsLab`` creates a bridge ``dl-br-<hex>`` in the root namespace holding
``10.233.X.1/24`` (X random, unused here), and per host a namespace ``dl-<hex>-<letter>``
joined to the bridge by a veth pair, holding ``10.233.X.(10+i)/24`` and running a private sshd
on port 22 there. Namespaces share one L2 segment, so they reach each other directly (what TF's
gRPC needs) and the launcher in the root namespace reaches them through the bridge. No
routing, no forwarding sysctl, and no address other than these is touched.

``cut(host)`` / ``restore(host)`` take the root-side veth end down / up: a partition in which
packets are dropped silently, not refused. Processes started over SSH live in their host's
namespace (sshd does) but share the filesystem and the PID namespace with the test.

Each host's sshd sets its own ``HOME`` (``SetEnv``) so each gets its own host run dir and lease,
as separate machines would; ``home(host)`` says where.

Where it cannot run (not root, no ``ip`` or sshd) the ``netns_lab`` fixture skips with the
reason, and fails instead under ``CI=true`` or ``DISTLAUNCH_REQUIRE_SSHD=1``.
"""

from __future__ import annotations

import atexit
import contextlib
import ipaddress
import os
import random
import secrets
import shutil
import subprocess
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from launcher.model import HostConfig
from tests.sshd import PrivateSshd, sshd_available

IP = "/usr/sbin/ip" if os.path.exists("/usr/sbin/ip") else "ip"


class NetnsError(RuntimeError):
    """An ``ip`` command of the harness failed."""


def _ip(*args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    result = subprocess.run([IP, *args], capture_output=True, text=True, timeout=30,
                            stdin=subprocess.DEVNULL)
    if check and result.returncode != 0:
        raise NetnsError(f"ip {' '.join(args)}: {result.stderr.strip() or result.returncode}")
    return result


def netns_available() -> tuple[bool, str]:
    if os.geteuid() != 0:
        return False, "network namespaces need root"
    if shutil.which(IP) is None:
        return False, "`ip` (iproute2) not found"
    return sshd_available()


def require_netns() -> None:
    """Skip where namespaces cannot be made; fail instead where CI demands every test runs."""
    ok, reason = netns_available()
    if ok:
        return
    if os.environ.get("CI") == "true" or os.environ.get("DISTLAUNCH_REQUIRE_SSHD") == "1":
        pytest.fail(f"multi-host tests must run here but {reason}")
    pytest.skip(reason)


def _subnets_in_use() -> set[ipaddress.IPv4Network]:
    """Every IPv4 network this machine has an address or a route in (root namespace)."""
    used = set()
    for line in (_ip("-4", "-o", "addr").stdout + _ip("-4", "route").stdout).splitlines():
        for word in line.split():
            with contextlib.suppress(ValueError):
                if "/" in word or word[0].isdigit():
                    used.add(ipaddress.IPv4Network(word, strict=False))
    return used


def pick_subnet() -> ipaddress.IPv4Network:
    """A random 10.233.X.0/24 overlapping nothing configured here."""
    used = _subnets_in_use()
    candidates = list(range(1, 255))
    random.shuffle(candidates)
    for third in candidates:
        net = ipaddress.IPv4Network(f"10.233.{third}.0/24")
        if not any(net.overlaps(other) for other in used if other.prefixlen > 0):
            return net
    raise NetnsError("no free 10.233.X.0/24 subnet")


@dataclass
class NsHost:
    """One namespace host: its namespace, root-side veth end, address, sshd and HOME."""

    name: str
    netns: str
    veth_root: str
    veth_ns: str
    address: str
    home: Path
    sshd: PrivateSshd | None = None

    def host_config(self, **overrides: Any) -> HostConfig:
        assert self.sshd is not None
        return self.sshd.host_config(self.name, **overrides)


class NetnsLab:
    """``count`` namespace hosts named ``a``, ``b``, ... (see the module docstring)."""

    def __init__(self, count: int = 3) -> None:
        if not 1 <= count <= 26:
            raise ValueError("count must be 1..26")
        self.tag = secrets.token_hex(3)
        self.bridge = f"dl-br-{self.tag}"
        self.subnet = pick_subnet()
        self.gateway = str(self.subnet.network_address + 1)
        self._tmp = tempfile.TemporaryDirectory(prefix=f"distlaunch-netns-{self.tag}-")
        self.hosts: dict[str, NsHost] = {}
        for i in range(count):
            letter = chr(ord("a") + i)
            self.hosts[letter] = NsHost(
                name=letter, netns=f"dl-{self.tag}-{letter}",
                veth_root=f"dlr{self.tag}{letter}", veth_ns=f"dln{self.tag}{letter}",
                address=str(self.subnet.network_address + 10 + i),
                home=Path(self._tmp.name) / f"home-{letter}")
        self._cleaned = False
        self._made_bridge = False
        self._made_netns: list[str] = []

    # -- setup and teardown -------------------------------------------------------------------

    def start(self) -> NetnsLab:
        atexit.register(self.cleanup)
        try:
            _ip("link", "add", self.bridge, "type", "bridge")
            self._made_bridge = True
            _ip("addr", "add", f"{self.gateway}/{self.subnet.prefixlen}", "dev", self.bridge)
            _ip("link", "set", self.bridge, "up")
            for host in self.hosts.values():
                self._add_host(host)
        except BaseException:
            self.cleanup()
            raise
        return self

    def _add_host(self, host: NsHost) -> None:
        _ip("netns", "add", host.netns)
        self._made_netns.append(host.netns)
        _ip("link", "add", host.veth_root, "type", "veth", "peer", "name", host.veth_ns)
        _ip("link", "set", host.veth_ns, "netns", host.netns)
        _ip("link", "set", host.veth_root, "master", self.bridge)
        _ip("link", "set", host.veth_root, "up")
        _ip("-n", host.netns, "addr", "add", f"{host.address}/{self.subnet.prefixlen}", "dev", host.veth_ns)
        _ip("-n", host.netns, "link", "set", host.veth_ns, "up")
        _ip("-n", host.netns, "link", "set", "lo", "up")
        host.home.mkdir(parents=True)
        # SetEnv HOME: each host gets its own ~/.cache run dir and lease, like a real machine
        host.sshd = PrivateSshd(host.address, 22, netns=host.netns, extra_config=f"SetEnv HOME={host.home}")
        host.sshd.start()

    def cleanup(self) -> None:
        """Stop every sshd, delete namespaces (their veth pairs go with them) and the bridge.
        Safe to call twice and from atexit; tolerates a half-built lab."""
        if self._cleaned:
            return
        self._cleaned = True
        for host in self.hosts.values():
            if host.sshd is not None:
                with contextlib.suppress(Exception):
                    host.sshd.cleanup()
        for netns in self._made_netns:
            _ip("netns", "del", netns, check=False)
        for host in self.hosts.values():  # normally gone with the namespace
            if _ip("link", "show", host.veth_root, check=False).returncode == 0:
                _ip("link", "del", host.veth_root, check=False)
        if self._made_bridge:
            _ip("link", "del", self.bridge, check=False)
        self._tmp.cleanup()
        atexit.unregister(self.cleanup)

    def __enter__(self) -> NetnsLab:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.cleanup()

    # -- partitions ----------------------------------------------------------------------------

    def cut(self, name: str) -> None:
        """Partition host ``name`` from everyone: its root-side veth end goes down."""
        _ip("link", "set", self.hosts[name].veth_root, "down")

    def restore(self, name: str) -> None:
        _ip("link", "set", self.hosts[name].veth_root, "up")

    def link_up(self, name: str) -> bool:
        out = _ip("-o", "link", "show", self.hosts[name].veth_root).stdout
        return ",UP" in out or "<UP" in out

    # -- inside a namespace ----------------------------------------------------------------------

    def exec(self, name: str, *argv: str, timeout: float = 30) -> subprocess.CompletedProcess[str]:
        """Run ``argv`` inside host ``name``'s namespace (for checks, not for tasks)."""
        return subprocess.run([IP, "netns", "exec", self.hosts[name].netns, *argv], capture_output=True,
                              text=True, timeout=timeout, stdin=subprocess.DEVNULL)

    def run_dir(self, name: str, run_id: str) -> Path:
        """Host ``name``'s run dir for ``run_id`` (same filesystem as the test)."""
        return self.hosts[name].home / ".cache" / "distlaunch" / "runs" / run_id

    def host_of_pid(self, pid: int) -> str | None:
        """Which lab host's namespace process ``pid`` lives in (None: elsewhere, or gone)."""
        try:
            inode = os.stat(f"/proc/{pid}/ns/net").st_ino
        except OSError:
            return None
        for name, host in self.hosts.items():
            if os.stat(f"/run/netns/{host.netns}").st_ino == inode:
                return name
        return None


@pytest.fixture
def netns_lab() -> Iterator[NetnsLab]:
    """Three namespace hosts ``a``, ``b``, ``c`` with sshd each, removed after the test."""
    require_netns()
    with NetnsLab(3) as lab:
        yield lab
