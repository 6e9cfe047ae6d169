"""The agent's host checks: which ports are busy or free, and what the host's Python offers.

Stdlib-only, Python >= 3.9 (runs on hosts from the agent zipapp).
"""

from __future__ import annotations

import errno
import importlib
import importlib.util
import json
import os
import socket
import sys

# typing only for the type checker: a launch's preflight on each host imports this module,
# and `typing` cost ~10 ms of CPU there (annotations are strings here, never evaluated)
TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any, Dict, List, Optional, Set, Tuple


def _listening_ports() -> Set[int]:
    """TCP ports in LISTEN state on any address (TF's gRPC server binds every address)."""
    ports = set()
    for name in ("/proc/net/tcp", "/proc/net/tcp6"):
        try:
            with open(name, encoding="ascii") as f:
                next(f, None)
                for row in f:
                    cols = row.split()
                    if len(cols) > 3 and cols[3] == "0A":
                        ports.add(int(cols[1].rsplit(":", 1)[1], 16))
        except (OSError, ValueError):
            continue
    return ports


def _family(addr: str) -> int:
    return socket.AF_INET6 if ":" in addr else socket.AF_INET


def _bindable_address(addr: str) -> str:
    """``addr``, or the wildcard address when ``addr`` is not on this host (a NAT address).

    TF's gRPC server listens on every address anyway, so the wildcard check is the honest one.
    """
    with socket.socket(_family(addr), socket.SOCK_STREAM) as sock:
        try:
            sock.bind((addr, 0))
            return addr
        except OSError as exc:
            if exc.errno != errno.EADDRNOTAVAIL:
                raise
    return "::" if _family(addr) == socket.AF_INET6 else "0.0.0.0"


def _can_bind(addr: str, port: int) -> bool:
    # SO_REUSEADDR on, as TF's gRPC server has it: sockets in TIME_WAIT do not make a port busy,
    # while a listener or a plain bound socket still does.
    with socket.socket(_family(addr), socket.SOCK_STREAM) as sock:
        try:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            sock.bind((addr, port))
            return True
        except OSError:
            return False


def cmd_ports(addr: str, check: List[int], pick: int, keep: Optional[List[socket.socket]] = None) -> Dict[str, Any]:
    """Which of ``check`` are busy, and ``pick`` free ports; with ``keep``, the picked ports' bound
    sockets are put there instead of closed (the reach check holds them open)."""
    addr = _bindable_address(addr)
    listening = _listening_ports()
    busy = [p for p in check if p in listening or not _can_bind(addr, p)]
    picked: List[int] = []
    held: List[socket.socket] = []
    try:
        for _ in range(pick * 20):
            if len(picked) >= pick:
                break
            sock = socket.socket(_family(addr), socket.SOCK_STREAM)
            held.append(sock)
            sock.bind((addr, 0))
            port = sock.getsockname()[1]
            if port in check or port in listening or port in picked:
                continue
            picked.append(port)
            if keep is not None:
                keep.append(held.pop())
    finally:
        for sock in held:
            sock.close()
    if len(picked) < pick:
        raise OSError("could not find %d free ports on %s" % (pick, addr))
    return {"busy": busy, "picked": picked}



def cmd_preflight(checks_json: Optional[str] = None, cwd: Optional[str] = None,
                  ports: Optional[Tuple[str, List[int], int]] = None, tensorflow: bool = False,
                  keep: Optional[List[socket.socket]] = None) -> Dict[str, Any]:
    """What this host's Python offers; with ``checks_json`` the failed path checks (launcher/agent/hostcheck.py,
    relative paths under ``cwd``), with ``ports`` the answer of ``ports`` too: one round trip for all.
    ``keep``: see ``cmd_ports``."""
    def has(module: str) -> bool:
        try:
            return importlib.util.find_spec(module) is not None
        except (ImportError, ValueError):
            return False

    # sys.version's first word is platform.python_version() (without importing platform: 3 ms)
    answer: Dict[str, Any] = {"python": sys.version.split()[0], "psutil": has("psutil"),
                              "pynvml": has("pynvml")}
    if checks_json is not None:
        hostcheck = importlib.import_module("launcher.agent.hostcheck")
        answer["failed"] = hostcheck.run_checks(json.loads(checks_json), cwd or os.getcwd())
    if ports is not None:
        answer["ports"] = cmd_ports(*ports, keep=keep)
    if tensorflow:
        answer["tensorflow"] = tensorflow_version()
    return answer


#: an import of TensorFlow can take a while on a cold disk; a hung one must not hang the launch
TF_IMPORT_SECONDS = 170.0
#: the distributions TensorFlow ships as (also the launcher's check of a second python)
TF_DISTRIBUTIONS = ("tensorflow", "tensorflow-cpu", "tensorflow-gpu", "tensorflow-intel", "tensorflow-macos",
                     "intel-tensorflow", "tensorflow-rocm", "tensorflow-aarch64", "tensorflow-cpu-aws",
                     "tf-nightly", "tf-nightly-cpu")


def tensorflow_version() -> Dict[str, Any]:
    """TensorFlow's version from its package metadata (milliseconds; an import takes seconds), or
    by importing it when no distribution says (a source tree on the path); ``error`` if neither."""
    try:
        from importlib import metadata

        for name in TF_DISTRIBUTIONS:
            try:
                return {"version": metadata.version(name), "how": "package metadata"}
            except metadata.PackageNotFoundError:
                continue
    except ImportError:
        pass
    # imported in a child: this process may live on as a launch's follow channel and fork the host
    # agent, which must not carry TensorFlow (hundreds of MB, native threads) into every task's parent
    import subprocess

    try:
        done = subprocess.run([sys.executable, "-c", "import tensorflow as tf; print(tf.__version__)"],
                              stdin=subprocess.DEVNULL, capture_output=True, timeout=TF_IMPORT_SECONDS)
    except (OSError, subprocess.TimeoutExpired) as exc:
        return {"error": "%s: %s" % (type(exc).__name__, exc)}
    out = done.stdout.decode("utf-8", "replace").strip().splitlines()
    if done.returncode == 0 and out:
        return {"version": out[-1], "how": "imported"}
    err = done.stderr.decode("utf-8", "replace").strip().splitlines()
    return {"error": err[-1] if err else "import tensorflow exited with %d" % done.returncode}


# -- entry point ------------------------------------------------------------------------------

