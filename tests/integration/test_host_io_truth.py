"""The agent's network and disk figures against a known transfer (issue 58 §2).

In a network namespace host (tests/netns.py) only its veth carries traffic, so the agent's reader
(``launcher.agent.readings.HostReader``, the code every host agent samples with) must see what a
transfer of known size to another namespace host moved, within the TCP/IP headers' share. A file
written and fsync'ed must show in the disk's written bytes (at least its size: the machine's other
writes count too)."""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.integration.jobtools import REPO
from tests.netns import IP, NetnsLab, require_netns

pytestmark = [pytest.mark.netns]

SENT, RECEIVED = 16 << 20, 4 << 20
PORT = 47321

#: in host b: take SENT bytes, answer RECEIVED bytes, close
SERVER = f"""
import socket
s = socket.create_server(("0.0.0.0", {PORT}))
print("listening", flush=True)
c, _ = s.accept()
got = 0
while got < {SENT}:
    data = c.recv(1 << 20)
    if not data:
        break
    got += len(data)
c.sendall(b"y" * {RECEIVED})
c.close()
"""

#: in host a: a reading, the transfer and a file written, a reading; each figure times the interval
#: between the two reads is what moved
CLIENT = """
import json, os, socket, sys, time
from launcher.agent.readings import HostReader
address, port, sent, received, path = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4]), sys.argv[5]
reader = HostReader()
reader.read()
start = reader._io[0]  # when the counters were read: the rates are over the time between two reads
c = socket.create_connection((address, port), timeout=30)
c.sendall(b"x" * sent)
got = 0
while got < received:
    data = c.recv(1 << 20)
    if not data:
        break
    got += len(data)
c.close()
with open(path, "wb") as f:
    f.write(os.urandom(32 << 20))
    f.flush()
    os.fsync(f.fileno())
time.sleep(0.05)  # the block layer's counters settle after the fsync returned
reading = reader.read()
elapsed = reader._io[0] - start
print(json.dumps({k: reading[k] for k in ("net_rx_bytes_per_s", "net_tx_bytes_per_s", "disk_write_bytes_per_s")}
                 | {"elapsed": elapsed, "got": got}))
"""


@pytest.fixture
def lab() -> Iterator[NetnsLab]:
    require_netns()
    with NetnsLab(2) as made:
        yield made


def test_network_and_disk_figures_match_a_known_transfer(lab: NetnsLab, tmp_path: Path) -> None:
    # on a disk for sure (a /tmp may be a tmpfs): the clone's own ignored build/ folder, made if absent
    (REPO / "build").mkdir(exist_ok=True)
    written = REPO / "build" / f"io-truth-{lab.tag}.bin"
    server = subprocess.Popen([IP, "netns", "exec", lab.hosts["b"].netns, sys.executable, "-c", SERVER],
                              stdout=subprocess.PIPE, text=True)
    try:
        assert server.stdout is not None and server.stdout.readline().strip() == "listening"
        done = lab.exec("a", "env", f"PYTHONPATH={REPO}", sys.executable, "-c", CLIENT, lab.hosts["b"].address,
                        str(PORT), str(SENT), str(RECEIVED), str(written),
                        timeout=120)
        assert done.returncode == 0, done.stderr[-2000:]
        assert server.wait(timeout=30) == 0
    finally:
        if server.poll() is None:
            server.kill()
        written.unlink(missing_ok=True)
    figures = json.loads(done.stdout.splitlines()[-1])
    assert figures["got"] == RECEIVED
    # what crossed the veth: the payload plus its headers (a few per cent), nothing else
    tx = figures["net_tx_bytes_per_s"] * figures["elapsed"]
    rx = figures["net_rx_bytes_per_s"] * figures["elapsed"]
    assert SENT <= tx <= SENT * 1.10 + 64 * 1024, figures
    assert RECEIVED <= rx <= RECEIVED * 1.10 + 64 * 1024, figures
    # the 32 MiB file reached the disk within the interval (others' writes may add to it)
    assert figures["disk_write_bytes_per_s"] * figures["elapsed"] >= 32 << 20, figures
