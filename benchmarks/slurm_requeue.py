"""What a Slurm requeue costs a submitted run: steps redone and seconds until it trains again.

A private one-node Slurm cluster (tests/slurm.py: slurmctld, slurmd and munged started here; root,
the Debian packages slurm-wlm and munge). `distlaunch up` submits the run from outside an
allocation; its task (tests/data/slurm/resumable_steps.py) steps every 0.1 s, keeps its step in a
checkpoint file at every step and on SIGTERM, and resumes from it. At step ``--at`` the job is
requeued (`scontrol requeue`) and, since Slurm holds a requeued job for 120 s (BeginTime), let
go at once (`scontrol update StartTime=now`): the seconds measured are distlaunch's and the
cluster's own start of a job, not that hold.

``redone``: the last step the first allocation reported less the step the second one resumed
from (0: the checkpoint at SIGTERM kept every step); ``back s``: from `scontrol requeue` to the
first step the second allocation reported, the hold let go; ``total s``: the run, 150 steps.

    python benchmarks/slurm_requeue.py --runs 3
"""

from __future__ import annotations

import argparse
import json
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from tests.profiles import build_profile, table  # noqa: E402
from tests.slurm import SlurmCluster, slurm_unavailable  # noqa: E402

SCRIPT = REPO / "tests" / "data" / "slurm" / "resumable_steps.py"
STEPS = 150


def _events(run_dir: Path) -> list[dict[str, Any]]:
    path = run_dir / "events.jsonl"
    out = []
    for line in path.read_text().splitlines() if path.exists() else []:
        try:
            out.append(json.loads(line))
        except ValueError:
            continue
    return out


def _steps(events: list[dict[str, Any]]) -> list[tuple[float, int]]:
    return [(e["ts"], e["step"]) for e in events if e["kind"] == "metric" and e.get("step") is not None]


def _wait(predicate: Any, timeout: float, what: str) -> Any:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(0.1)
    raise SystemExit(f"timed out waiting for {what}")


def one_run(cluster: SlurmCluster, at: int, n: int) -> dict[str, float]:
    with tempfile.TemporaryDirectory(prefix="dl-requeue-") as tmp:
        folder = Path(tmp)
        run_id, run_dir = f"bench-requeue-{n}-{os.getpid()}", folder / "run"
        profile = build_profile(folder / "job.toml", name="bench-requeue", orphan_grace=30, strategy="custom",
                                command=f"{{python}} {SCRIPT}", defaults={"python": sys.executable}, workdir=REPO,
                                grace=5, env={"CKPT": str(folder / "ckpt"), "STEPS": str(STEPS)}, hosts=(),
                                roles={"chief": {}}, extra=table("slurm", {}))
        started = time.monotonic()
        up = subprocess.Popen([sys.executable, "-m", "launcher.cli", "up", str(profile), "--no-tui", "--run-id", run_id,
                               "--run-dir", str(run_dir)], cwd=REPO, env=cluster.env, stdout=subprocess.DEVNULL,
                              stderr=subprocess.DEVNULL)
        try:
            _wait(lambda: any(s >= at for _, s in _steps(_events(run_dir))), 180, f"step {at}")
            job = json.loads((run_dir / "state.json").read_text())["slurm"]["job_id"]
            asked = time.time()
            subprocess.run(["scontrol", "requeue", job], check=True, env=cluster.env, capture_output=True)
            last = max(s for _, s in _steps(_events(run_dir)))

            def held() -> bool:
                said = subprocess.run(["squeue", "-h", "-j", job, "-o", "%T|%r"], capture_output=True, text=True,
                                      env=cluster.env).stdout.strip()
                return said == "PENDING|BeginTime"

            _wait(held, 120, "the requeued job's hold")
            subprocess.run(["scontrol", "update", f"JobId={job}", "StartTime=now"], check=True, env=cluster.env,
                           capture_output=True)
            if up.wait(timeout=300) != 0:
                raise SystemExit(f"run {n}: up exited {up.returncode}")
            total = time.monotonic() - started
        finally:
            if up.poll() is None:
                up.kill()
                up.wait()
        events = _events(run_dir)
        logs = "\n".join(e["line"] for e in events if e["kind"] == "log" and e["task"] == "chief:0")
        resumed = [int(m) for m in re.findall(r"resumed from step (\d+)", logs)]
        back = min(ts for ts, s in _steps(events) if ts > asked and s > resumed[-1]) - asked
        return {"redone": float(max(0, last - resumed[-1])), "back": back, "total": total,
                "requeues": float(sum(1 for e in events if e["kind"] == "requeued"))}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--at", type=int, default=30, help="the step at which the job is requeued")
    args = parser.parse_args()
    why = slurm_unavailable()
    if why is not None:
        print(f"slurm_requeue: {why}", file=sys.stderr)
        return 2
    cluster = SlurmCluster().start()
    results: list[dict[str, float]] = []
    try:
        for n in range(1, args.runs + 1):
            result = one_run(cluster, args.at, n)
            results.append(result)
            print(f"run {n}: redone {result['redone']:.0f} steps, back {result['back']:.1f} s after the requeue, "
                  f"total {result['total']:.1f} s, requeued events {result['requeues']:.0f}, "
                  f"load {os.getloadavg()[0]:.2f}", flush=True)
    finally:
        cluster.stop()
        cluster.cleanup()
    med = {key: statistics.median(r[key] for r in results) for key in ("redone", "back", "total")}
    print(f"median: redone {med['redone']:.0f} steps, back {med['back']:.1f} s, total {med['total']:.1f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
