"""`make docs-serve` never listens on a port another user could take first (issue 59, item 11):
it used 127.0.0.1:8000, and a page another user served there first was what the documented URL
showed. The recipe is run with mkdocs replaced by `echo`, while this test holds port 8000."""

from __future__ import annotations

import contextlib
import re
import shutil
import socket
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]


def _dev_addr() -> str:
    done = subprocess.run(["make", "-s", "docs-serve", "STAMP=Makefile", f"BIN={Path(sys.executable).parent}",
                           "MKDOCS=echo"], cwd=REPO, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    found = re.search(r"--dev-addr (\S+)", done.stdout)
    assert found, done.stdout
    return found.group(1)


def test_docs_serve_picks_a_free_port_each_time() -> None:
    if shutil.which("make") is None:
        pytest.skip("needs make")
    squatter = socket.socket()
    try:
        with contextlib.suppress(OSError):  # taken already: the recipe must not want it either way
            squatter.bind(("127.0.0.1", 8000))  # what another user did first
        first, second = _dev_addr(), _dev_addr()
    finally:
        squatter.close()
    for addr in (first, second):
        host, _, port = addr.rpartition(":")
        assert host == "127.0.0.1" and port.isdigit() and int(port) not in (0, 8000), addr
