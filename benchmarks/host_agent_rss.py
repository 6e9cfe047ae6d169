"""How many host agent processes run, and how much memory each holds, while a 16-task job runs?

``distlaunch up --no-tui`` of a local job (strategy custom) whose 16 tasks each print a line every
0.1 s, sampling every 1 s. Once every task runs, every ``--every`` s for ``--seconds``, the
processes whose environment carries the run id and whose command line is ``agent.pyz serve`` are
counted and their RSS (VmRSS) read. Then ``down``.

Target: one host agent process for the host; its RSS <= 40 MiB.

Run: ``.venv/bin/python benchmarks/host_agent_rss.py [--tasks 16] [--seconds 20] [--repeats 3]``
"""

from __future__ import annotations

import argparse
import contextlib
import os
import shutil
import tempfile
import time
from pathlib import Path

from common import PYTHON, REPO, EventsTail, down, machine, start_up, wait_for

PROFILE = """\
name = "agent-rss"
strategy = "custom"
sample_interval = 1.0
[defaults]
command = "{python} -c 'import time\\nwhile True: print(\\"a line of output\\", flush=True); time.sleep(0.1)'"
workdir = "{repo}"
restart = "never"
[hosts.local]
address = "localhost"
transport = "local"
[roles.worker]
count = {tasks}
hosts = ["local"]
"""


def host_agents(run_id: str) -> list[int]:
    needle = f"DISTLAUNCH_RUN_ID={run_id}".encode()
    found = []
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            env = Path(f"/proc/{name}/environ").read_bytes().split(b"\0")
            args = Path(f"/proc/{name}/cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        if needle in env and b"serve" in args and any(a.endswith(b"agent.pyz") for a in args):
            found.append(int(name))
    return found


def rss_mib(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return 0.0


def one_run(work: Path, tag: str, tasks: int, seconds: float, every: float) -> tuple[int, float]:
    profile = work / f"{tag}.toml"
    profile.write_text(PROFILE.format(python=PYTHON, repo=REPO, tasks=tasks))
    run_dir = work / tag
    proc = start_up(profile, run_dir, tag)
    tail = EventsTail(run_dir / "events.jsonl")
    running: set[str] = set()

    def all_running() -> bool:
        for e in tail.read():
            if e["kind"] == "state" and e.get("state") == "running":
                running.add(e["task"])
        return len(running) == tasks

    most, peak = 0, 0.0
    try:
        wait_for(all_running, 120, "every task running")
        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline:
            agents = host_agents(tag)
            most = max(most, len(agents))
            for pid in agents:
                with contextlib.suppress(OSError):  # an agent that ended meanwhile
                    peak = max(peak, rss_mib(pid))
            time.sleep(every)
    finally:
        down(run_dir)
        proc.wait(timeout=120)
    return most, peak


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--tasks", type=int, default=16)
    parser.add_argument("--seconds", type=float, default=20.0)
    parser.add_argument("--every", type=float, default=0.5)
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    work = Path(tempfile.mkdtemp(prefix="distlaunch-bench-agent-rss-"))
    results = []
    try:
        for rep in range(args.repeats):
            count, peak = one_run(work, f"agent-rss-{rep}", args.tasks, args.seconds, args.every)
            results.append((count, peak))
            print(f"  run {rep}: {count} host agent process(es), peak RSS {peak:.1f} MiB "
                  f"(load {os.getloadavg()[0]:.2f})", flush=True)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    worst = max(p for _, p in results)
    print(f"\nhost agent: {args.tasks} tasks on one local host, {args.seconds:g} s each run ({machine()})")
    print(f"  processes: {', '.join(str(c) for c, _ in results)} (target 1 per host: "
          f"{'met' if all(c == 1 for c, _ in results) else 'MISSED'})")
    print(f"  peak RSS: {', '.join(f'{p:.1f}' for _, p in results)} MiB (target <= 40 MiB: "
          f"{'met' if worst <= 40 else 'MISSED'})")


if __name__ == "__main__":
    os.chdir(REPO)
    main()
