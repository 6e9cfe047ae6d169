"""How long does ``distlaunch stacks`` take for every task of a live job over SSH?

Hosts are private sshds on loopback ports (default 4); the tasks (default 64, spread over the
hosts in order) are light Python sleepers hung in a function of their own. Once every task
answers, ``distlaunch stacks RUN`` runs ``--repeats`` times after one warm-up, as a user runs it:
a CLI process that asks the live launcher over its control socket, which asks every host's agent
over its open follow channel; each agent reads its tasks in parallel (py-spy beside the task's
Python, the venv's). The figure is the CLI's wall time, best and median.

Target (issue 28): 64 tasks over 4 hosts in under 3 s.

Run: ``.venv/bin/python benchmarks/stacks.py [--hosts 4] [--tasks 64] [--repeats 3] [--json]``
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import tempfile
import time
from pathlib import Path

from common import PYTHON, REPO, machine, ssh_profile, sshd_hosts, start_up, stop_up, wait_for

SLEEPER = """\
import time


def wait_for_peer():
    while True:
        time.sleep(1)


wait_for_peer()
"""
TARGET_SECONDS = 3.0


def stacks(run_dir: Path) -> tuple[float, int, list[dict[str, object]]]:
    """(seconds, exit code, captures) of one ``distlaunch stacks RUN --json``."""
    t0 = time.perf_counter()
    done = subprocess.run([PYTHON, "-m", "launcher.cli", "stacks", str(run_dir), "--json"], cwd=REPO,
                          capture_output=True, text=True, timeout=120, stdin=subprocess.DEVNULL)
    elapsed = time.perf_counter() - t0
    try:
        found = json.loads(done.stdout)
    except ValueError:
        found = []
    return elapsed, done.returncode, found


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--hosts", type=int, default=4)
    parser.add_argument("--tasks", type=int, default=64)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--json", action="store_true", help="the figures as one JSON object")
    args = parser.parse_args()
    work = Path(tempfile.mkdtemp(prefix="distlaunch-bench-stacks-"))
    (work / "sleeper.py").write_text(SLEEPER)
    with sshd_hosts(args.hosts, nice=5) as hosts:
        profile = ssh_profile(work / "job.toml", "stacks-bench", hosts, {"worker": {"count": args.tasks}},
                              command="{python} sleeper.py", workdir=str(work))
        run_dir = work / "run"
        proc = start_up(profile, run_dir, "bench-stacks")
        try:
            warm: list[tuple[float, int, list[dict[str, object]]]] = []

            def all_answer() -> bool:
                warm[:] = [stacks(run_dir)]
                return warm[0][1] == 0 and len(warm[0][2]) == args.tasks
            if not wait_for(all_answer, timeout=240, interval=1.0):
                raise SystemExit(f"not every task answered: exit {warm[0][1] if warm else '?'}")
            times = []
            for _ in range(args.repeats):
                elapsed, code, found = stacks(run_dir)
                if code != 0 or len(found) != args.tasks:
                    raise SystemExit(f"distlaunch stacks exited {code} with {len(found)} captures")
                times.append(elapsed)
            methods = sorted({str(c.get("method")) for c in warm[0][2]})
        finally:
            stop_up(proc, run_dir)
    figures = {"hosts": args.hosts, "tasks": args.tasks, "repeats": args.repeats, "best_s": min(times),
               "median_s": statistics.median(times), "methods": methods, "target_s": TARGET_SECONDS,
               "machine": machine()}
    if args.json:
        print(json.dumps(figures))
        return
    print(f"distlaunch stacks: {args.tasks} tasks over {args.hosts} hosts ({', '.join(methods)}), "
          f"{machine()}")
    print(f"  best {min(times):.2f} s, median {statistics.median(times):.2f} s of {args.repeats} "
          f"(target < {TARGET_SECONDS:g} s for 64 tasks over 4 hosts)")


if __name__ == "__main__":
    main()
