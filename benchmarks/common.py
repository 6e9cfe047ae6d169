"""Shared parts of the benchmarks: private sshds as "hosts", generated profiles, watching a run.

Every benchmark here runs real parts on this machine: private OpenSSH servers on loopback ports
(``tests.sshd.PrivateSshd``), the real ``distlaunch up`` (as a subprocess, or the Supervisor
in-process), real agents. The sshds all log in as the same user on the same machine, so each
one gets its own ``$HOME`` (sshd ``SetEnv``): otherwise every "host" would share one host run
dir and each host's ``agent follow`` would stream every other host's tasks too.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from tests.sshd import PrivateSshd  # noqa: E402

PYTHON = str(REPO / ".venv" / "bin" / "python")


#: the start of an emitter task (argv: count, period, go file): it waits until the benchmark
#: writes the common start time into the go file, once every task runs (event_pipeline, scale)
EMITTER_START = '''\
import json, sys, time
count, period, go = int(sys.argv[1]), float(sys.argv[2]), sys.argv[3]
while True:
    try:
        start = float(open(go).read())
        break
    except (OSError, ValueError):
        time.sleep(0.05)
out = sys.stdout
'''


@dataclass
class BenchHost:
    """One sshd standing in for one host, with its own home directory."""

    name: str
    sshd: PrivateSshd
    home: Path


@contextlib.contextmanager
def sshd_hosts(count: int, prefix: str = "h", nice: int = 0) -> Iterator[list[BenchHost]]:
    """Start ``count`` private sshds, each with its own ``$HOME``; stop them and remove the homes.

    ``nice`` > 0 lowers the priority of each sshd and so of everything started through it
    (agents, tasks, followers): the "hosts" then take CPU the launcher leaves over, roughly as if
    they were other machines, instead of outnumbering the launcher on this one.
    """
    root = Path(tempfile.mkdtemp(prefix="distlaunch-bench-homes-"))
    hosts: list[BenchHost] = []
    try:
        for i in range(count):
            home = root / f"{prefix}{i}"
            home.mkdir()
            server = PrivateSshd(extra_config=f"SetEnv HOME={home}").start()
            if nice:
                os.setpriority(os.PRIO_PROCESS, int((server.dir / "sshd.pid").read_text()), nice)
            hosts.append(BenchHost(f"{prefix}{i}", server, home))
        yield hosts
    finally:
        for h in hosts:
            h.sshd.cleanup()
        shutil.rmtree(root, ignore_errors=True)


def ssh_profile(path: Path, name: str, hosts: list[BenchHost], roles: dict[str, dict[str, Any]], *,
                strategy: str = "custom", command: str = "sleep 30", sample_interval: float = 1.0,
                workdir: str = "/tmp", extra_top: str = "", client: str = "builtin",
                container: str | None = None) -> Path:
    """Write a profile whose hosts are the given sshds; ``roles`` maps role -> {count, command?};
    ``client``: [ssh] client, "openssh" for the system ssh client; ``container``: an image every
    task runs in (docker; {python} is then the image's)."""
    runs_in = f"container = {{ image = {json.dumps(container)} }}" if container else f'python = "{PYTHON}"'
    lines = [f'name = "{name}"', f'strategy = "{strategy}"', 'success_policy = "chief"',
             "orphan_grace_seconds = 30", f"sample_interval = {sample_interval}", extra_top, "",
             "[defaults]", f"command = {json.dumps(command)}", runs_in,
             f'workdir = "{workdir}"', 'restart = "never"', "grace_seconds = 5", "",
             "[ssh]", 'host_key_policy = "reject"', "connect_timeout = 10", f'client = "{client}"', ""]
    for h in hosts:
        lines += [f"[hosts.{h.name}]", 'address = "127.0.0.1"', f"ssh_port = {h.sshd.port}",
                  f'identity_file = "{h.sshd.identity_file}"', f'known_hosts = "{h.sshd.known_hosts}"', ""]
    names = json.dumps([h.name for h in hosts])
    for role, opts in roles.items():
        lines += [f"[roles.{role}]", f"count = {opts.get('count', 1)}", f"hosts = {names}"]
        if "command" in opts:
            lines.append(f"command = {json.dumps(opts['command'])}")
        lines.append("")
    path.write_text("\n".join(lines))
    return path


def ssh_config(path: Path, hosts: list[BenchHost]) -> Path:
    """An ssh_config with one alias per sshd (port, identity, known_hosts): for ssh and pdsh."""
    blocks = []
    for h in hosts:
        blocks.append("\n".join([
            f"Host {h.name}", "  HostName 127.0.0.1", f"  Port {h.sshd.port}", f"  User {h.sshd.user}",
            f"  IdentityFile {h.sshd.identity_file}", "  IdentitiesOnly yes",
            f"  UserKnownHostsFile {h.sshd.known_hosts}", "  StrictHostKeyChecking yes",
            "  BatchMode yes", "  LogLevel ERROR"]))
    path.write_text("\n\n".join(blocks) + "\n")
    return path


def start_up(profile: Path, run_dir: Path, run_id: str, *, json_out: bool = False,
             env: dict[str, str] | None = None) -> subprocess.Popen[bytes]:
    """``distlaunch up PROFILE --no-tui`` (or ``--json``) as a subprocess, output discarded."""
    cmd = [PYTHON, "-m", "launcher.cli", "up", str(profile), "--json" if json_out else "--no-tui",
           "--run-dir", str(run_dir), "--run-id", run_id]
    full_env = dict(os.environ)
    full_env.update(env or {})
    return subprocess.Popen(cmd, cwd=REPO, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL, env=full_env)


def down(run_dir: Path, timeout: float = 120.0) -> None:
    subprocess.run([PYTHON, "-m", "launcher.cli", "down", str(run_dir)], cwd=REPO, timeout=timeout,
                   stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


def stop_up(proc: subprocess.Popen[bytes], run_dir: Path, timeout: float = 120.0) -> None:
    """Tear a running ``up`` down the way a user would (SIGINT), falling back to ``down``."""
    if proc.poll() is None:
        proc.send_signal(2)
        try:
            proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            down(run_dir)
            proc.kill()
            proc.wait(timeout=30)


class EventsTail:
    """New events of a run dir's ``events.jsonl``, read as they are appended."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._offset = 0
        self._partial = b""

    def read(self) -> list[dict[str, Any]]:
        try:
            with self.path.open("rb") as fh:
                fh.seek(self._offset)
                data = fh.read()
        except FileNotFoundError:
            return []
        self._offset += len(data)
        parts = (self._partial + data).split(b"\n")
        self._partial = parts.pop()
        return [json.loads(p) for p in parts if p.strip()]


def wait_for(predicate: Callable[[], bool], timeout: float, interval: float = 0.01) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(interval)
    return False


def percentile(values: list[float], q: float) -> float:
    if not values:
        return float("nan")
    ordered = sorted(values)
    k = min(len(ordered) - 1, max(0, round(q / 100 * (len(ordered) - 1))))
    return ordered[k]


def mean(values: list[float]) -> float:
    return statistics.fmean(values) if values else float("nan")


def machine() -> str:
    return f"{os.cpu_count()} cores, no GPU, {sys.platform}, Python {sys.version.split()[0]}"


class RunCpu:
    """CPU seconds of a run's processes by kind, from /proc every ``interval`` s on a thread:

    * ``launcher``: the ``up`` process and every agent verb it runs (``follow``, ``start``, ...);
    * ``agent``: host agents (named ``distlaunch-host``, or ``agent.pyz serve``);
    * ``ssh``: sshd processes serving the run (children of an sshd, ancestors of agent verbs);
    * ``tasks``: processes with ``DISTLAUNCH_TASK`` in their environment (the training tasks).

    ``window(t0, t1)`` gives each kind's CPU seconds between two times (snapshots nearest them)."""

    def __init__(self, launcher_pid: int, run_id: str, interval: float = 0.5) -> None:
        self.launcher_pid = launcher_pid
        self.run_id = run_id.encode()
        self.interval = interval
        self.snapshots: list[tuple[float, dict[int, tuple[str, float]]]] = []
        self._stop = threading.Event()
        self._kinds: dict[tuple[int, str], str] = {}
        self._ticks = float(os.sysconf("SC_CLK_TCK"))
        self._thread = threading.Thread(target=self._loop, daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(10)

    def _loop(self) -> None:
        while not self._stop.is_set():
            self.snapshots.append((time.time(), self._read()))
            self._stop.wait(self.interval)

    def _read(self) -> dict[int, tuple[str, float]]:
        out: dict[int, tuple[str, float]] = {}
        stats: dict[int, tuple[int, float, str]] = {}
        for name in os.listdir("/proc"):
            if not name.isdigit():
                continue
            try:
                raw = Path(f"/proc/{name}/stat").read_text()
            except OSError:
                continue
            fields = raw[raw.rfind(")") + 2:].split()
            stats[int(name)] = (int(fields[1]), (int(fields[11]) + int(fields[12])) / self._ticks, fields[19])
        for pid, (_ppid, cpu, start) in stats.items():
            kind = self._kind(pid, start, stats)
            if kind:
                out[pid] = (kind, cpu)
        return out

    def _kind(self, pid: int, start: str, stats: dict[int, tuple[int, float, str]]) -> str:
        key = (pid, start)
        if key in self._kinds:
            return self._kinds[key]
        kind = ""
        try:
            env = Path(f"/proc/{pid}/environ").read_bytes().split(b"\0")
            args = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
        except OSError:
            return ""
        try:
            comm = Path(f"/proc/{pid}/comm").read_text().strip()
        except OSError:
            return ""
        if pid == self.launcher_pid:
            kind = "launcher"
        elif comm == "distlaunch-host" or (b"serve" in args and any(a.endswith(b"agent.pyz") for a in args)):
            kind = "agent"
        elif any(a.endswith(b"agent.pyz") for a in args):
            kind = "launcher"
        elif any(e.startswith(b"DISTLAUNCH_TASK=") for e in env) and b"DISTLAUNCH_RUN_ID=" + self.run_id in env:
            kind = "tasks"
        elif args and args[0].startswith(b"sshd"):
            kind = "ssh" if self._serves_run(pid, stats) else ""
        self._kinds[key] = kind
        return kind

    def _serves_run(self, sshd: int, stats: dict[int, tuple[int, float, str]]) -> bool:
        for pid in stats:
            node, hops = pid, 0
            while node in stats and hops < 8:
                if stats[node][0] == sshd:
                    try:
                        args = Path(f"/proc/{pid}/cmdline").read_bytes()
                    except OSError:
                        break
                    if b"agent.pyz" in args:
                        return True
                    break
                node, hops = stats[node][0], hops + 1
        return False

    def window(self, t0: float, t1: float) -> dict[str, float]:
        inside = [(t, snap) for t, snap in self.snapshots if t0 <= t <= t1]
        if len(inside) < 2:
            raise RuntimeError("too few CPU snapshots in the window")
        first, last = inside[0][1], {}
        for _, snap in inside:
            last.update(snap)  # a process's last reading inside the window
        totals: dict[str, float] = {}
        for pid, (kind, cpu) in last.items():
            before = first.get(pid, (kind, 0.0))[1]
            totals[kind] = totals.get(kind, 0.0) + max(0.0, cpu - before)
        return totals
