"""The namespace lab itself: hosts reach each other, a cut really partitions, cleanup leaves nothing."""

from __future__ import annotations

import os
import socket
import subprocess
import sys

import pytest

from launcher.transport import SshHost
from tests.netns import IP, NetnsLab, require_netns

pytestmark = [pytest.mark.netns, pytest.mark.sshd]

PROBE = ("import socket, sys\n"
         "try:\n"
         "    s = socket.create_connection((sys.argv[1], 22), timeout=2); print(s.recv(4).decode())\n"
         "except OSError as e:\n"
         "    print('unreachable', e)\n")


def probe(lab: NetnsLab, src: str, dst: str) -> str:
    """What host ``src`` sees when it connects to host ``dst``'s sshd (from inside ``src``'s namespace)."""
    return lab.exec(src, sys.executable, "-c", PROBE, lab.hosts[dst].address).stdout.strip()


def test_lab_hosts_talk_partition_and_vanish() -> None:
    require_netns()
    lab = NetnsLab(3).start()
    try:
        # the launcher side reaches every host over SSH, and each host has its own HOME
        for name, host in lab.hosts.items():
            ssh = SshHost(host.host_config())
            try:
                assert ssh.home() == str(host.home)
                # and what it runs lives in that host's network namespace
                inode = int(ssh.run("stat -L -c %i /proc/$$/ns/net").stdout)
                assert inode == os.stat(f"/run/netns/{host.netns}").st_ino, name
            finally:
                ssh.close()
        # hosts reach each other directly (TF's gRPC between tasks needs it)
        assert probe(lab, "a", "c") == "SSH-"
        lab.cut("c")
        assert not lab.link_up("c")
        assert probe(lab, "a", "c").startswith("unreachable")
        with pytest.raises(OSError):
            socket.create_connection((lab.hosts["c"].address, 22), timeout=2)
        assert probe(lab, "a", "b") == "SSH-"  # only c is cut off
        lab.restore("c")
        assert probe(lab, "a", "c") == "SSH-"
    finally:
        lab.cleanup()
    names = {h.netns for h in lab.hosts.values()}
    listed = subprocess.run([IP, "netns", "list"], capture_output=True, text=True).stdout
    links = subprocess.run([IP, "-o", "link"], capture_output=True, text=True).stdout
    assert not [n for n in names if n in listed]
    assert lab.bridge not in links and lab.tag not in links
    assert all(h.sshd is not None and not h.sshd.running for h in lab.hosts.values())
    assert not lab.hosts["a"].home.exists()
