"""End-to-end latency, loss and launcher CPU of the event path under load.

64 tasks (spread over 4 private sshds on loopback) each print a ``@distlaunch`` metric line
every 20 ms (50 lines/s, flushed, ``t_emit`` = time.time() in its values) for 30 s, all starting
3 s after every task runs: this measures the steady state, not the launch (launch_fanout.py's
subject). The path is the real one: task stdout -> the host agent (one per host; it appends the
event to the task's events.jsonl there and pushes it to its followers) -> ``agent follow`` over SSH
-> Supervisor -> run dir events.jsonl + subscribers. The Supervisor is built
in-process exactly as ``distlaunch up`` builds it (``prepare_hosts`` then ``Supervisor``), and a
subscriber stamps each metric's arrival: latency = arrival - t_emit (same clock, one machine).

Reported: latency p50/p99/max, events expected vs received (lost must be 0), and the
launcher's CPU (this process's CPU time / wall during the emission window; it includes the
subscriber, which only subtracts two floats per event). The report.py rate limiter is not
involved: the emitter prints its lines itself.

Baseline in the same run: ``--baseline`` rows time the same emitters with their stdout read
directly by a local reader (no agent, no SSH), i.e. the floor of "a line reaches a process".

Targets: p99 < 100 ms, launcher < 25% of one core.

Run: ``.venv/bin/python benchmarks/event_pipeline.py [--tasks 64] [--rate 50] [--seconds 30]``
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

from common import EMITTER_START, PYTHON, REPO, machine, mean, percentile, ssh_profile, sshd_hosts

from launcher.plan import build_plan
from launcher.profile.reader import load_profile
from launcher.remote.preflight import prepare_hosts
from launcher.rundir import RunDir
from launcher.supervise.supervisor import Supervisor
from launcher.transport import sshconfig

EMITTER = EMITTER_START + '''\
for i in range(count):
    delay = start + i * period - time.time()
    if delay > 0:
        time.sleep(delay)
    out.write("@distlaunch " + json.dumps({"kind": "metric", "step": i, "values": {"t_emit": time.time()}}) + "\\n")
    out.flush()
time.sleep(600)
'''


SETTLE_SECONDS = 3.0


def cpu_seconds() -> float:
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime


def run_pipeline(tasks: int, hosts_n: int, rate: float, seconds: float, work: Path,
                 nice: int = 0) -> dict[str, float]:
    emitter = work / "emit.py"
    emitter.write_text(EMITTER)
    count = int(rate * seconds)
    latencies: list[float] = []
    agent_part: list[float] = []  # t_emit -> the agent's event ts (task pipe, agent parsing)
    received: dict[str, int] = {}
    done = threading.Event()
    all_running = threading.Event()
    running: set[str] = set()
    expected = tasks * count
    with sshd_hosts(hosts_n, nice=nice) as hosts:
        profile_path = ssh_profile(work / "pipeline.toml", "pipeline", hosts, {"worker": {"count": tasks}},
                                   command="{python} " + f"{emitter} {count} {1.0 / rate} {work / 'go'}")
        profile = load_profile(profile_path)
        plan = build_plan(profile, sshconfig.resolve_addresses(profile))
        run_id = f"pipeline-{os.getpid()}"
        rundir = RunDir.create(run_id, work / "run")
        pre = prepare_hosts(plan, run_id, rundir.path / "hosts", lambda m: None, lambda m: None)
        sup = Supervisor(plan, rundir, pre.sessions, pre.ports)
        feed = sup.subscribe()

        def consume() -> None:
            for e in feed.events():
                if e.kind == "state" and e.data.get("state") == "running":
                    running.add(str(e.task))
                    if len(running) == tasks:
                        all_running.set()
                if e.kind == "metric":
                    now = time.time()
                    t_emit = e.data.get("values", {}).get("t_emit")
                    if t_emit is not None:
                        latencies.append(now - float(t_emit))
                        agent_part.append(e.ts - float(t_emit))
                        received[str(e.task)] = received.get(str(e.task), 0) + 1
                        if len(latencies) >= expected:
                            done.set()

        reader = threading.Thread(target=consume, daemon=True)
        reader.start()
        try:
            sup.launch()
            # steady state, not launch: emit once every agent runs and its start-up CPU is spent
            if not all_running.wait(120):
                raise RuntimeError(f"only {len(running)}/{tasks} tasks running after 120 s")
            start_at = time.time() + SETTLE_SECONDS
            (work / "go.tmp").write_text(f"{start_at:.6f}")
            (work / "go.tmp").rename(work / "go")
            time.sleep(max(0.0, start_at - time.time()))
            cpu0, wall0 = cpu_seconds(), time.time()
            done.wait(seconds + 30)
            cpu1, wall1 = cpu_seconds(), time.time()
        finally:
            sup.teardown("benchmark over")
            sup.wait(120)
            pre.close()
            rundir.close()
    got = len(latencies)
    ms = [x * 1000 for x in latencies]
    agent_ms = [x * 1000 for x in agent_part]
    return {"expected": expected, "received": got, "lost": expected - got,
            "agent_p50_ms": percentile(agent_ms, 50), "agent_p99_ms": percentile(agent_ms, 99),
            "p50_ms": percentile(ms, 50), "p99_ms": percentile(ms, 99), "max_ms": max(ms or [0.0]),
            "mean_ms": mean(ms), "cpu_pct": 100 * (cpu1 - cpu0) / (wall1 - wall0), "window_s": wall1 - wall0}


def run_baseline(tasks: int, rate: float, seconds: float, work: Path) -> dict[str, float]:
    """The same emitters read directly from pipes by one local thread each: no agent, no SSH."""
    emitter = work / "emit.py"
    emitter.write_text(EMITTER)
    count = int(rate * seconds)
    go = work / "go-baseline"
    latencies: list[float] = []
    lock = threading.Lock()
    procs = [subprocess.Popen([PYTHON, str(emitter), str(count), str(1.0 / rate), str(go)],
                              stdout=subprocess.PIPE, stdin=subprocess.DEVNULL) for _ in range(tasks)]

    def read(proc: subprocess.Popen[bytes]) -> None:
        assert proc.stdout is not None
        for _ in range(count):
            line = proc.stdout.readline()
            now = time.time()
            obj = json.loads(line[len(b"@distlaunch "):])
            with lock:
                latencies.append(now - obj["values"]["t_emit"])

    threads = [threading.Thread(target=read, args=(p,), daemon=True) for p in procs]
    for t in threads:
        t.start()
    (work / "go.tmp").write_text(f"{time.time() + 2.0 + tasks * 0.03:.6f}")
    (work / "go.tmp").rename(go)
    for t in threads:
        t.join(seconds + 60)
    for p in procs:
        p.kill()
        p.wait()
    ms = [x * 1000 for x in latencies]
    return {"expected": tasks * count, "received": len(ms), "lost": tasks * count - len(ms),
            "p50_ms": percentile(ms, 50), "p99_ms": percentile(ms, 99), "max_ms": max(ms or [0.0]),
            "mean_ms": mean(ms)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--tasks", type=int, default=64)
    parser.add_argument("--hosts", type=int, default=4)
    parser.add_argument("--rate", type=float, default=50.0, help="metric lines per second per task")
    parser.add_argument("--seconds", type=float, default=30.0)
    parser.add_argument("--no-baseline", action="store_true")
    parser.add_argument("--hosts-nice", type=int, default=0,
                        help="run the sshds (and so agents and tasks) at this nice level")
    args = parser.parse_args()
    work = Path(tempfile.mkdtemp(prefix="distlaunch-bench-pipeline-"))
    try:
        result = run_pipeline(args.tasks, args.hosts, args.rate, args.seconds, work, args.hosts_nice)
        base = None if args.no_baseline else run_baseline(args.tasks, args.rate, args.seconds, work)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    print(f"\nevent pipeline: {args.tasks} tasks x {args.rate:g} lines/s x {args.seconds:g} s over "
          f"{args.hosts} sshd hosts, hosts at nice {args.hosts_nice} ({machine()})")
    print(f"  distlaunch: received {result['received']:.0f}/{result['expected']:.0f} (lost {result['lost']:.0f}); "
          f"latency p50 {result['p50_ms']:.1f} ms, p99 {result['p99_ms']:.1f} ms, max {result['max_ms']:.1f} ms; "
          f"launcher CPU {result['cpu_pct']:.1f}% of one core over {result['window_s']:.1f} s")
    print(f"    of which t_emit -> agent event ts: p50 {result['agent_p50_ms']:.1f} ms, "
          f"p99 {result['agent_p99_ms']:.1f} ms")
    if base is not None:
        print(f"  direct pipe: received {base['received']:.0f}/{base['expected']:.0f}; latency p50 "
              f"{base['p50_ms']:.1f} ms, p99 {base['p99_ms']:.1f} ms, max {base['max_ms']:.1f} ms")
        print(f"  ratio p99 distlaunch / direct pipe: {result['p99_ms'] / max(base['p99_ms'], 0.001):.1f}x")
    print(f"  targets: p99 < 100 ms: {'met' if result['p99_ms'] < 100 else 'MISSED'}; lost 0: "
          f"{'met' if result['lost'] == 0 else 'MISSED'}; CPU < 25%: {'met' if result['cpu_pct'] < 25 else 'MISSED'}")
    sys.stdout.flush()


if __name__ == "__main__":
    os.chdir(REPO)
    main()
