"""Helpers for tests that run whole jobs: profiles in tmp dirs, the CLI as a process, event waits."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from launcher.agent.procs import default_signals
from tests.profiles import build_profile, ps_mnist_command

REPO = Path(__file__).resolve().parents[2]
PYTHON = sys.executable


def cli(*args: str, timeout: float = 240, env: dict[str, str] | None = None,
        cwd: Path = REPO) -> subprocess.CompletedProcess[str]:
    return subprocess.run([PYTHON, "-m", "launcher.cli", *args], capture_output=True, text=True,
                          timeout=timeout, env={**os.environ, **(env or {})}, cwd=cwd, preexec_fn=default_signals)


def start_cli(*args: str, log: Path, env: dict[str, str] | None = None) -> subprocess.Popen[bytes]:
    """The CLI as a background process (its own process group), output to ``log``. Both start it
    as a terminal would, every signal at its default: under `nohup` or a script's background job
    the test run itself ignores SIGINT, and a Python started so keeps ignoring it (Ctrl-C tests)."""
    fh = log.open("wb")
    return subprocess.Popen([PYTHON, "-m", "launcher.cli", *args], stdout=fh, stderr=subprocess.STDOUT,
                            cwd=REPO, env={**os.environ, **(env or {})}, start_new_session=True,
                            preexec_fn=default_signals)


def read_events(run_dir: Path) -> list[dict[str, Any]]:
    path = run_dir / "events.jsonl"
    if not path.exists():
        return []
    out = []
    for line in path.read_text().splitlines():
        with contextlib.suppress(ValueError):
            out.append(json.loads(line))
    return out


def task_step(run_dir: Path, task: str) -> int:
    """The highest step ``task`` reported in the run's events (-1: none yet). Read from the file,
    where a poll of `status --json` would start a Python every time (~0.3 s of CPU each)."""
    return max((e["step"] for e in read_events(run_dir) if e["kind"] == "metric" and e.get("task") == task
                and isinstance(e.get("step"), int)), default=-1)


def wait_for(predicate: Callable[[], Any], timeout: float, what: str, interval: float = 0.1) -> Any:
    """Poll ``predicate`` until it returns something truthy; fail with ``what`` after ``timeout``."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(interval)
    raise AssertionError(f"timed out after {timeout:.0f}s waiting for {what}")


def wait_for_event(run_dir: Path, match: Callable[[dict[str, Any]], bool], timeout: float,
                   what: str) -> dict[str, Any]:
    def find() -> dict[str, Any] | None:
        return next((e for e in read_events(run_dir) if match(e)), None)

    result: dict[str, Any] = wait_for(find, timeout, what)
    return result


def describe_pids(pids: list[int]) -> str:
    """pid, parent, state and command line of each process (what a failed "nothing left" shows)."""
    lines = []
    for pid in pids:
        try:
            cmdline = (Path("/proc") / str(pid) / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
            stat = (Path("/proc") / str(pid) / "stat").read_text()
        except OSError:
            continue
        fields = stat[stat.rindex(")") + 2:].split()
        lines.append(f"{pid} ppid={fields[1]} state={fields[0]} {cmdline.strip()[:200]}")
    return "; ".join(lines) or "(none now)"


def pids_with_run_id(run_id: str) -> list[int]:
    """Every process on this machine whose environment carries DISTLAUNCH_RUN_ID=run_id (the host
    agents and the tasks), and the run's supervisor (supervisor_pids)."""
    needle = f"DISTLAUNCH_RUN_ID={run_id}".encode()
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            env = (entry / "environ").read_bytes()
        except OSError:
            continue
        if needle in env.split(b"\0"):
            found.append(int(entry.name))
    return found + [pid for pid in supervisor_pids(run_id) if pid not in found]


def supervisor_pids(run_id: str) -> list[int]:
    """The run's supervisor: a process named distlaunch-sup (forked by `up` or `attach`, so its
    environment is theirs) whose command line names the run, or that holds the run's control
    socket (@distlaunch/<run id>). A zombie has neither."""
    inodes = set()
    with contextlib.suppress(OSError):
        for line in Path("/proc/net/unix").read_text().splitlines()[1:]:
            parts = line.split()
            if len(parts) >= 8 and parts[7] == f"@distlaunch/{run_id}":
                inodes.add(f"socket:[{parts[6]}]")
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            if (entry / "comm").read_text().strip() != "distlaunch-sup":
                continue
            cmdline = (entry / "cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        # its command line reads "distlaunch supervisor RUN" once it runs; `up`'s own just after the fork
        named = run_id.encode() in cmdline or any(arg.endswith(b" " + run_id.encode()) or arg.endswith(
            run_id.encode()) for arg in cmdline)
        holds = False
        if inodes and not named:
            with contextlib.suppress(OSError):
                holds = any(os.readlink(fd) in inodes for fd in (entry / "fd").iterdir())
        if named or holds:
            found.append(int(entry.name))
    return found


def supervisor_pid(run_dir: Path) -> int:
    """The supervisor's pid as the run's state.json records it."""
    state = json.loads((run_dir / "state.json").read_text())
    return int(state["supervisor_pid"])


def kill_run_processes(run_id: str) -> None:
    """Last-resort cleanup so a failing test does not leave a cluster running."""
    for pid in pids_with_run_id(run_id):
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)


def write_profile(path: Path, body: str) -> Path:
    path.write_text(body)
    return path


def local_ps_profile(tmp: Path, *, steps: int = 120, name: str = "it-local", orphan_grace: int = 60,
                     extra: str = "", ports: bool | dict[str, int] = False, grace: float = 5,
                     defaults: dict[str, Any] | None = None, roles: dict[str, dict[str, Any]] | None = None) -> Path:
    """A small ParameterServerStrategy job on this machine (1 ps, 1 worker, 1 chief). ``ports``: True
    gives each role a free port, a mapping the ports of the roles it names; ``roles`` adds values to
    the roles it names; ``extra`` is top-level TOML."""
    if ports is True:
        from tests.sshd import free_port

        ports = {role: free_port() for role in ("ps", "worker", "chief")}
    chosen = ports or {}
    tables = {role: {**({"port": chosen[role]} if role in chosen else {}), **(roles or {}).get(role, {})}
              for role in ("ps", "worker", "chief")}
    return build_profile(tmp / "local.toml", name=name, orphan_grace=orphan_grace, top=extra,
                         command=ps_mnist_command(steps), workdir=REPO, env={"TF_CPP_MIN_LOG_LEVEL": "2"},
                         grace=grace, defaults=defaults, roles=tables)


def launch_up(tmp: Path, profile: Path, run_id: str) -> tuple[subprocess.Popen[bytes], Path]:
    """``up PROFILE --no-tui`` into ``tmp/run``, its output in ``tmp/up.log``: the process and the run dir."""
    run_dir = tmp / "run"
    proc = start_cli("up", str(profile), "--no-tui", "--run-dir", str(run_dir), "--run-id", run_id,
                     log=tmp / "up.log")
    return proc, run_dir


def finish_up(proc: subprocess.Popen[bytes], tmp: Path, timeout: float) -> int:
    """The exit code of ``launch_up``'s process; it is killed, and the test fails with its log's end,
    when it has not finished within ``timeout``."""
    try:
        return proc.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        proc.kill()
        raise AssertionError("launcher did not finish: " + (tmp / "up.log").read_text()[-4000:]) from None
