"""The step-time split against ground truth (issue 37 §3): the jobs of tests/data/steptime/bottleneck.py,
whose bottleneck is known by construction, run under `distlaunch up` on this machine; once each
task has ~8 s of live readings, `distlaunch profile` captures the tasks, and the script prints the
live split and verdict (`status --json`) beside TensorFlow's own breakdown of the same moment.

Jobs: input (Keras fit, a tf.data map sleeping 30 ms per batch), compute (a custom loop of three
1024x1024 matmuls per step on cached data), mwms (MultiWorkerMirrored, worker:1's pipeline slowed),
pss (ParameterServerStrategy, worker:1 stopped half of every 100 ms).
Run: ``.venv/bin/python benchmarks/step_time_truth.py [--jobs input,compute,mwms,pss]``
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
PYTHON = sys.executable
ROLES = {
    "input": ("custom", '[roles.worker]\nhosts = ["local"]', ["worker:0"]),
    "compute": ("custom", '[roles.worker]\nhosts = ["local"]', ["worker:0"]),
    "mwms": ("multi_worker_mirrored", '[roles.worker]\ncount = 2\nhosts = ["local"]', ["worker:0", "worker:1"]),
    "pss": ("parameter_server", '[roles.ps]\nhosts = ["local"]\n[roles.worker]\ncount = 2\nhosts = ["local"]\n'
            '[roles.chief]\nhosts = ["local"]', ["chief:0", "ps:0", "worker:0", "worker:1"]),
}


def cli(*args: str, timeout: float = 240) -> subprocess.CompletedProcess[str]:
    return subprocess.run([PYTHON, "-c", "import sys; from launcher.cli import main; sys.exit(main())", *args],
                          capture_output=True, text=True, timeout=timeout, check=False,
                          env=dict(os.environ, PYTHONPATH=str(REPO)))


def load() -> str:
    one, five, fifteen = os.getloadavg()
    return f"{one:.2f} {five:.2f} {fifteen:.2f}"


def run_job(mode: str, scratch: Path) -> None:
    strategy, roles, tasks = ROLES[mode]
    profile = scratch / f"{mode}.toml"
    profile.write_text(f"""
name = "truth-{mode}"
strategy = "{strategy}"
[defaults]
command = "{{python}} tests/data/steptime/bottleneck.py"
workdir = "{REPO}"
env = {{ TF_CPP_MIN_LOG_LEVEL = "2", MODE = "{mode}", SECONDS = "90", SLOW_TASK = "worker:1" }}
grace_seconds = 5
[hosts.local]
address = "localhost"
transport = "local"
{roles}
""")
    run_id = f"truth-{mode}-{int(time.time())}"
    run_dir = scratch / run_id
    try:
        started = cli("up", str(profile), "--detach", "--run-dir", str(run_dir), "--run-id", run_id)
        if started.returncode != 0:
            print(f"{mode}: up failed: {started.stderr.strip()[-300:]}")
            return
        watch = "chief:0" if mode == "pss" else "worker:0"
        deadline = time.time() + 150
        while time.time() < deadline:
            text = (run_dir / "events.jsonl").read_text() if (run_dir / "events.jsonl").exists() else ""
            if sum(1 for line in text.splitlines() if watch in line and "step_time/input" in line) >= 8:
                break
            time.sleep(0.5)
        captured = cli("profile", run_id, *tasks, "--seconds", "2", "--json", timeout=120)
        status = json.loads(cli("status", run_id, "--json").stdout)["tasks"]
        analysis = {t["task"]: t for t in json.loads(captured.stdout or "{}").get("tasks", [])}
        print(f"{mode} (load {load()}):")
        for task in tasks:
            show(task, status.get(task, {}), analysis.get(task))
    finally:
        cli("down", run_id, timeout=120)


def show(task: str, live: dict[str, Any], profiled: dict[str, Any] | None) -> None:
    split = live.get("step_time")
    if isinstance(split, dict):
        text = " ".join(f"{p} {100 * split[p]:.0f}%" for p in ("input", "compute", "peers", "other"))
        line = f"  {task:9} live: {text} ({split['verdict']})"
    elif live.get("closures_per_s") is not None:
        latency = 1000 * (live.get("closure_latency_s") or 0.0)
        line = f"  {task:9} live: {live['closures_per_s']:.1f} closures/s, {latency:.0f} ms each"
    else:
        line = f"  {task:9} live: -"
    if profiled and profiled.get("input") is not None:
        line += (f" | profile: input {profiled['input']:.0f}% compute {profiled['compute']:.0f}% "
                 f"communication {profiled['communication']:.0f}% other {profiled['other']:.0f}%, "
                 f"{profiled['steps']} steps of {profiled['step_ms']:.1f} ms")
    elif profiled:
        line += f" | profile: {profiled['steps']} steps"
    print(line)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--jobs", default="input,compute,mwms,pss")
    args = parser.parse_args()
    print(f"python {sys.version.split()[0]}, {os.cpu_count()} cpus, load {load()} at start")
    with tempfile.TemporaryDirectory(prefix="distlaunch-truth-") as scratch:
        for mode in args.jobs.split(","):
            run_job(mode, Path(scratch))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
