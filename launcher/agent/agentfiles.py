"""The host agent's helpers that need none of its state: task specs written whole, a request's
first line.

Stdlib-only, Python >= 3.9 (runs on hosts from the agent zipapp).
"""

from __future__ import annotations

import json
import os
import socket
from typing import Any, Dict


def write_specs(run_dir: str, specs: Dict[str, Any]) -> None:
    """Each ``tasks/<slug>/spec.json`` (0600), written whole (rename). One line of JSON: with an
    indent, ``json`` encodes in pure Python, and 16 specs (TF_CONFIG lists every task) took
    50-70 ms of a launch's critical path on a busy host."""
    for slug, spec in specs.items():
        task_dir = os.path.join(run_dir, "tasks", str(slug))
        os.makedirs(task_dir, mode=0o700, exist_ok=True)
        path = os.path.join(task_dir, "spec.json")
        fd = os.open(path + ".tmp", os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "wb") as f:
            f.write(json.dumps(spec, sort_keys=True).encode("utf-8") + b"\n")
        os.replace(path + ".tmp", path)


def _read_line(conn: socket.socket) -> "tuple[bytes, bytes]":
    """The first line of a connection, and what came after it in the same reads (a follower's
    first pings or requests)."""
    data = b""
    while b"\n" not in data:
        chunk = conn.recv(65536)
        if not chunk:
            break
        data += chunk
    line, _, rest = data.partition(b"\n")
    return line, rest
