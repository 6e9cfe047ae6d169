"""Does supervision slow training down? examples/ps_mnist.py under ``distlaunch up`` vs bare.

One ps, two workers and a chief on this machine (as cluster_profiles/local.toml, with ports
picked at launch, sampling every 1 s and report lines on). Two ways to start the same tasks:

* ``distlaunch``: ``distlaunch up PROFILE --no-tui`` (local transport, real agents);
* ``bare``: plain subprocesses with the same TF_CONFIGs (``launcher.plan.tf_config``) and
  environment, no agent; the chief's stdout is read by this script.

They alternate (bare, distlaunch, bare, ...) ``--repeats`` times each. Steps/s comes from the
chief's own metric reports (one per 20 steps), stamped when they arrive (by the agent under
distlaunch, by this script's pipe reader when bare), between the first report at or after
step ``--from-step`` and the last one, so start-up does not count.

Targets: distlaunch / bare >= 0.97 (steps/s; on 2 shared cores its noise is larger than that),
and supervision CPU <= 1 % of the training tasks' CPU: ``common.RunCpu`` reads /proc every 0.5 s
and sums the CPU seconds the launcher, the host agent and its verbs, and the tasks (processes with
``DISTLAUNCH_TASK``) used between the chief's first report at ``--from-step`` and its last.

Run: ``.venv/bin/python benchmarks/training_overhead.py [--steps 3000] [--repeats 3]``
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import socket
import subprocess
import tempfile
import threading
import time
from pathlib import Path

from common import PYTHON, REPO, EventsTail, RunCpu, machine, mean, start_up

from launcher.plan import build_plan, tf_config
from launcher.profile.reader import load_profile

PROFILE = """\
name = "overhead"
strategy = "parameter_server"
success_policy = "chief"
sample_interval = 1.0

[defaults]
command = "{{python}} examples/ps_mnist.py --steps {steps}"
python = "{python}"
workdir = "{repo}"
env = {{ TF_CPP_MIN_LOG_LEVEL = "2" }}
restart = "never"

[hosts.local]
address = "localhost"
transport = "local"

[roles.ps]
hosts = ["local"]
[roles.worker]
count = 2
hosts = ["local"]
[roles.chief]
hosts = ["local"]
"""


def steps_per_sec(points: list[tuple[float, int]], from_step: int) -> float:
    """Rate between the first report at or after ``from_step`` and the last one."""
    later = [(t, s) for t, s in sorted(points, key=lambda p: p[1]) if s >= from_step]
    if len(later) < 2:
        raise RuntimeError(f"too few metric reports after step {from_step}: {points[-3:]}")
    (t0, s0), (t1, s1) = later[0], later[-1]
    return (s1 - s0) / (t1 - t0)


def run_distlaunch(profile: Path, work: Path, tag: str, from_step: int) -> tuple[float, dict[str, float]]:
    """Steps/s, and CPU seconds by kind (launcher, agent, ssh, tasks) while the chief trains."""
    run_dir = work / tag
    proc = start_up(profile, run_dir, tag)
    cpu = RunCpu(proc.pid, tag)
    try:
        code = proc.wait(timeout=900)
    finally:
        cpu.stop()
    points = [(float(e["ts"]), int(e["step"])) for e in EventsTail(run_dir / "events.jsonl").read()
              if e["kind"] == "metric" and e["task"] == "chief:0" and e.get("step") is not None]
    if code != 0:
        raise RuntimeError(f"{tag}: distlaunch up exited {code}")
    later = sorted(t for t, s in points if s >= from_step)
    return steps_per_sec(points, from_step), cpu.window(later[0], later[-1])


def free_ports(n: int) -> list[int]:
    socks = [socket.socket() for _ in range(n)]
    try:
        for s in socks:
            s.bind(("127.0.0.1", 0))
        return [int(s.getsockname()[1]) for s in socks]
    finally:
        for s in socks:
            s.close()


def run_bare(profile: Path, from_step: int) -> float:
    plan = build_plan(load_profile(profile))
    ports = dict(zip([t.task_id for t in plan.tasks], free_ports(len(plan.tasks)), strict=True))
    procs: dict[str, subprocess.Popen[bytes]] = {}
    points: list[tuple[float, int]] = []
    try:
        for task in sorted(plan.tasks, key=lambda t: t.role == "chief"):
            env = dict(os.environ, **task.env, TF_CONFIG=json.dumps(tf_config(plan, task.task_id, ports)))
            command = task.command.replace("{python}", PYTHON)
            out = subprocess.PIPE if task.role == "chief" else subprocess.DEVNULL
            procs[task.task_id] = subprocess.Popen(command, shell=True, cwd=REPO, env=env, stdout=out,
                                                   stderr=subprocess.DEVNULL, stdin=subprocess.DEVNULL,
                                                   start_new_session=True)
        chief = procs["chief:0"]
        assert chief.stdout is not None

        def read() -> None:
            assert chief.stdout is not None
            for line in chief.stdout:
                if line.startswith(b"@distlaunch "):
                    obj = json.loads(line[len(b"@distlaunch "):])
                    if obj.get("kind") == "metric" and obj.get("step") is not None:
                        points.append((time.time(), int(obj["step"])))

        reader = threading.Thread(target=read, daemon=True)
        reader.start()
        code = chief.wait(timeout=900)
        reader.join(10)
        if code != 0:
            raise RuntimeError(f"bare chief exited {code}")
    finally:
        for p in procs.values():
            if p.poll() is None:
                os.killpg(p.pid, signal.SIGKILL)
            p.wait(timeout=30)
    return steps_per_sec(points, from_step)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--steps", type=int, default=3000)
    parser.add_argument("--from-step", type=int, default=100)
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    work = Path(tempfile.mkdtemp(prefix="distlaunch-bench-training-"))
    profile = work / "overhead.toml"
    profile.write_text(PROFILE.format(steps=args.steps, python=PYTHON, repo=REPO))
    bare: list[float] = []
    supervised: list[float] = []
    shares: list[float] = []
    try:
        for rep in range(args.repeats):
            bare.append(run_bare(profile, args.from_step))
            print(f"  rep {rep}: bare {bare[-1]:.1f} steps/s", flush=True)
            rate, cpu = run_distlaunch(profile, work, f"train-{rep}", args.from_step)
            supervised.append(rate)
            own = cpu.get("launcher", 0.0) + cpu.get("agent", 0.0) + cpu.get("ssh", 0.0)
            shares.append(own / max(cpu.get("tasks", 0.0), 1e-9))
            print(f"  rep {rep}: distlaunch {rate:.1f} steps/s; CPU s while training: tasks "
                  f"{cpu.get('tasks', 0.0):.1f}, launcher {cpu.get('launcher', 0.0):.2f}, host agent "
                  f"{cpu.get('agent', 0.0):.2f} -> supervision {100 * shares[-1]:.2f} % of the tasks' CPU", flush=True)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    print(f"\ntraining overhead: ps_mnist.py, 1 ps + 2 workers + chief, {args.steps} steps, rate from step "
          f"{args.from_step} ({machine()})")
    print(f"  bare subprocesses: mean {mean(bare):.1f} steps/s  ({', '.join(f'{x:.1f}' for x in bare)})")
    print(f"  distlaunch up:     mean {mean(supervised):.1f} steps/s  ({', '.join(f'{x:.1f}' for x in supervised)})")
    ratio = mean(supervised) / mean(bare)
    print(f"  ratio distlaunch / bare: {ratio:.3f} (target >= 0.97: {'met' if ratio >= 0.97 else 'MISSED'})")
    worst = max(shares)
    print(f"  supervision CPU (launcher + host agent + its verbs) / training tasks' CPU, while the chief trains: "
          f"{', '.join(f'{100 * x:.2f} %' for x in shares)} (target <= 1 %: {'met' if worst <= 0.01 else 'MISSED'})")


if __name__ == "__main__":
    os.chdir(REPO)
    main()
