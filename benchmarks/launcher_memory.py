"""Does the launcher's memory stay flat while its tasks talk a lot?

``distlaunch up --no-tui`` supervises 64 tasks over 4 private sshds; each task prints a log line
(~100 bytes) every ``--interval`` seconds (default 0.05 s: 1,280 lines/s in all) plus a
``@distlaunch`` metric line every 10th line, for ``--minutes`` (default 10). The launcher's RSS
(psutil, the ``up`` process) is sampled every ``--every`` seconds from the moment every task runs.

Reported: RSS at the first and last sample, the least-squares slope over the second half of the
run (after caches and buffers have reached their steady size) and over the whole run, the
number of events the run dir received, and whether the RSS is flat (slope over the second half
under 1 MiB per 10 minutes... i.e. well below what retaining the output would cost: the output
itself grows by tens of MiB per minute).

Baseline in the same run: the total bytes of task output produced, so a leak proportional to
the output would be obvious.

Run: ``.venv/bin/python benchmarks/launcher_memory.py [--minutes 10] [--tasks 64]``
"""

from __future__ import annotations

import argparse
import shutil
import tempfile
import time
from pathlib import Path

import psutil
from common import EventsTail, machine, ssh_profile, sshd_hosts, start_up, stop_up, wait_for

TALKER = '''\
import json, sys, time
period = float(sys.argv[1])
out = sys.stdout
i = 0
while True:
    out.write("step %d: some log line of a chatty training script, padded to about 100 bytes ....\\n" % i)
    if i % 10 == 0:
        out.write("@distlaunch " + json.dumps({"kind": "metric", "step": i, "loss": 1.0 / (i + 1)}) + "\\n")
    out.flush()
    i += 1
    time.sleep(period)
'''

MIB = 1024 * 1024


def slope(points: list[tuple[float, float]]) -> float:
    """Least-squares slope of (seconds, bytes) points, in bytes per second."""
    n = len(points)
    if n < 2:
        return 0.0
    mx = sum(p[0] for p in points) / n
    my = sum(p[1] for p in points) / n
    sxx = sum((p[0] - mx) ** 2 for p in points)
    return sum((p[0] - mx) * (p[1] - my) for p in points) / sxx if sxx else 0.0


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--minutes", type=float, default=10.0)
    parser.add_argument("--tasks", type=int, default=64)
    parser.add_argument("--hosts", type=int, default=4)
    parser.add_argument("--interval", type=float, default=0.05, help="seconds between a task's lines")
    parser.add_argument("--every", type=float, default=5.0, help="seconds between RSS samples")
    args = parser.parse_args()
    work = Path(tempfile.mkdtemp(prefix="distlaunch-bench-memory-"))
    talker = work / "talk.py"
    talker.write_text(TALKER)
    samples: list[tuple[float, float]] = []
    events = 0
    try:
        with sshd_hosts(args.hosts) as hosts:
            profile = ssh_profile(work / "memory.toml", "memory", hosts, {"worker": {"count": args.tasks}},
                                  command="{python} " + f"{talker} {args.interval}")
            run_dir = work / "run"
            proc = start_up(profile, run_dir, f"memory-{int(time.time())}")
            tail = EventsTail(run_dir / "events.jsonl")
            running: set[str] = set()

            def all_running() -> bool:
                nonlocal events
                for e in tail.read():
                    events += 1
                    if e["kind"] == "state" and e.get("state") == "running":
                        running.add(e["task"])
                return len(running) == args.tasks

            try:
                if not wait_for(all_running, 300, 0.1):
                    raise RuntimeError(f"only {len(running)}/{args.tasks} tasks running after 300 s")
                launcher = psutil.Process(proc.pid)
                t0 = time.time()
                end = t0 + args.minutes * 60
                while time.time() < end and proc.poll() is None:
                    samples.append((time.time() - t0, float(launcher.memory_info().rss)))
                    events += len(tail.read())
                    time.sleep(args.every)
                samples.append((time.time() - t0, float(launcher.memory_info().rss)))
                events += len(tail.read())
                out_bytes = sum(f.stat().st_size for f in (run_dir / "logs").glob("*.log"))
            finally:
                stop_up(proc, run_dir)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    duration = samples[-1][0]
    half = [p for p in samples if p[0] >= duration / 2]
    s_half = slope(half) * 600 / MIB
    s_all = slope(samples) * 600 / MIB
    print(f"\nlauncher memory: {args.tasks} tasks x {1 / args.interval:g} log lines/s over {args.hosts} sshd hosts, "
          f"{duration / 60:.1f} min ({machine()})")
    print(f"  RSS at start {samples[0][1] / MIB:.1f} MiB, end {samples[-1][1] / MIB:.1f} MiB, "
          f"max {max(p[1] for p in samples) / MIB:.1f} MiB ({len(samples)} samples)")
    print(f"  slope: {s_half:+.2f} MiB per 10 min over the second half, {s_all:+.2f} MiB per 10 min overall")
    print(f"  events received: {events}; task log output kept in the run dir: {out_bytes / MIB:.1f} MiB "
          f"({out_bytes / MIB / max(duration / 60, 1e-9):.1f} MiB/min)")
    flat = abs(s_half) < 1.0
    print(f"  flat (|slope| over the second half < 1 MiB per 10 min): {'yes' if flat else 'NO'}")


if __name__ == "__main__":
    main()
