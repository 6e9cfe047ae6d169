"""Steps redone and seconds to resume after a kill, a loss and a drain, on shared and per-host disks.

Three network-namespace hosts (tests/netns.py; root), each with its own checkpoint folder (its
``CKPT_ROOT``) or all three with one (``--disks shared``): a MultiWorkerMirrored tf_keras ``fit``
(tests/data/autolog/keras_mwms_sigterm.py: BackupAndRestore every ``SAVE_EVERY`` batches) with
worker:0 on a, worker:1 on b, spare c, and at training step ``--at``:

- ``kill``: worker:1 killed with SIGKILL (the group restarts in place);
- ``loss``: b's link cut for good (worker:1 moves to c after ``host_lost_seconds``);
- ``drain``: ``distlaunch drain RUN b`` (the workers save at one step, worker:1 moves to c).

``redone``: worker:0's last trained step before the group's restart less the step it resumed
after (from its ``trained step N`` lines); ``resume s``: from the event to worker:0's first step
of its next incarnation. Goals (issue 54 §6): at most one checkpoint interval after a loss, 0
after a drain.

``--cost``: the same job with nothing broken, per-host disks (checkpoints copied to the launcher's
machine and the spare) against shared ones (no copies), alternating: steps/s of worker:0 and the
ratio per pair and over the medians; the goal is at most 2 % slower. ``--hidden N`` widens the
model so checkpoints weigh something (N units: about 24 N bytes with the optimizer's state);
``--epochs`` (10 steps each, default 40) sets how long each run trains. The per-host runs also
print how many of worker:0's checkpoints were copied off its host, their size (the checkpoint
events') and the seconds a copy took (the first copy's line and state.json's records).

Each run prints one line with the load average; then the medians per case.

    python benchmarks/checkpoint_recovery.py --runs 5
    python benchmarks/checkpoint_recovery.py --case drain --disks per-host --runs 1   # a smoke run
    python benchmarks/checkpoint_recovery.py --cost --runs 5 --hidden 200000 [--epochs 40]
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import re
import signal
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from tests.integration.jobtools import REPO, cli, kill_run_processes, read_events, start_cli, wait_for
from tests.netns import NetnsLab, netns_available
from tests.profiles import build_profile, netns_hosts

CASES = ("kill", "loss", "drain")
DISKS = ("shared", "per-host")
HOST_LOST = 8
SAVE_EVERY = 20
STEPS_PER_EPOCH = 10  # the script's


def profile(tmp: Path, lab: NetnsLab, disks: str, epochs: int, step_s: float, hidden: int) -> Path:
    roots = {name: tmp / ("disk" if disks == "shared" else f"disk-{name}") for name in lab.hosts}
    hosts = [dataclasses.replace(h, options={**h.options, "env": {"CKPT_ROOT": str(roots[h.name])}})
             for h in netns_hosts(lab, "ssh")]
    return build_profile(
        tmp / "p.toml", name="bench-ckpt", strategy="multi_worker_mirrored", orphan_grace=4,
        top=f'host_lost_seconds = {HOST_LOST}\nspares = ["c"]\n', defaults={"python": sys.executable},
        command="{python} -u tests/data/autolog/keras_mwms_sigterm.py '$CKPT_ROOT/backup'", workdir=REPO,
        env={"STEP_SECONDS": str(step_s), "SAVE_EVERY": str(SAVE_EVERY), "EPOCHS": str(epochs),
             "HIDDEN": str(hidden), "TF_USE_LEGACY_KERAS": "1", "TF_CPP_MIN_LOG_LEVEL": "2"},
        restart="on-failure", max_restarts=3, grace=20, hosts=hosts,
        roles={"worker": {"count": 2, "hosts": ["a", "b"]}})


def trained(events: list[dict[str, Any]], task: str = "worker:0") -> list[tuple[float, int]]:
    out = []
    for e in events:
        if e["kind"] == "log" and e["task"] == task:
            m = re.match(r"^trained step (\d+)$", e["line"])
            if m:
                out.append((e["ts"], int(m.group(1))))
    return out


def runs_of(events: list[dict[str, Any]], task: str = "worker:0") -> list[float]:
    return [e["ts"] for e in events if e["kind"] == "state" and e["task"] == task and e["state"] == "running"]


def break_it(case: str, lab: NetnsLab, run_id: str, events: list[dict[str, Any]]) -> None:
    if case == "kill":
        pid = next(e["pid"] for e in reversed(events) if e["kind"] == "state" and e["task"] == "worker:1"
                   and e["state"] == "running")
        os.kill(int(pid), signal.SIGKILL)  # namespace hosts share this machine's process ids
    elif case == "loss":
        lab.cut("b")
    else:
        done = cli("drain", run_id, "b", "--reason", "benchmark")
        assert done.returncode == 0, done.stdout + done.stderr


def one_recovery(case: str, disks: str, n: int, at: int) -> dict[str, float]:
    epochs = 20 if case == "loss" else 12
    with tempfile.TemporaryDirectory() as tmp_name, NetnsLab(3) as lab:
        tmp = Path(tmp_name)
        path = profile(tmp, lab, disks, epochs, 0.1, 0)
        run_id, run_dir = f"bench-ckpt-{case}-{n}-{lab.tag}", tmp / "run"
        proc = start_cli("up", str(path), "--no-tui", "--run-dir", str(run_dir), "--run-id", run_id, log=tmp / "up.log")
        try:
            wait_for(lambda: max((s for _, s in trained(read_events(run_dir))), default=-1) >= at, 300,
                     f"worker:0 past step {at}")
            break_it(case, lab, run_id, read_events(run_dir))
            broken_at = time.time()
            again = wait_for(lambda: next((ts for ts in runs_of(read_events(run_dir)) if ts > broken_at), None),
                             300, "worker:0's next incarnation")
            first = wait_for(lambda: next(((ts, s) for ts, s in trained(read_events(run_dir)) if ts > again), None),
                             300, "training resumed")
            code = proc.wait(timeout=600)
        finally:
            if proc.poll() is None:
                proc.kill()
            kill_run_processes(run_id)
        events = read_events(run_dir)
        before = [s for ts, s in trained(events) if ts < again][-1]
        return {"redone": float(before - (first[1] - 1)), "resume_s": first[0] - broken_at, "exit": float(code)}


def one_cost(disks: str, n: int, hidden: int, epochs: int) -> dict[str, float]:
    """worker:0's steps/s over the whole fit, nothing broken; with per-host disks, also worker:0's
    checkpoints saved and copied off its host, their bytes and the copies' seconds (medians)."""
    with tempfile.TemporaryDirectory() as tmp_name, NetnsLab(3) as lab:
        tmp = Path(tmp_name)
        path = profile(tmp, lab, disks, epochs, 0.0, hidden)
        run_id, run_dir = f"bench-ckpt-cost-{n}-{lab.tag}", tmp / "run"
        proc = start_cli("up", str(path), "--no-tui", "--run-dir", str(run_dir), "--run-id", run_id, log=tmp / "up.log")
        try:
            code = proc.wait(timeout=900)
        finally:
            if proc.poll() is None:
                proc.kill()
            kill_run_processes(run_id)
        assert code == 0, (tmp / "up.log").read_text()[-2000:]
        events = read_events(run_dir)
        seen = trained(events)
        (t0, s0), (t1, s1) = seen[0], seen[-1]
        saves = [e for e in events if e["kind"] == "checkpoint" and e["task"] == "worker:0"]
        copied = {e["step"] for e in saves if any(str(c).startswith("launcher:") for c in e.get("copies") or [])}
        state = json.loads((run_dir / "state.json").read_text())
        seconds = [float(c["copy_seconds"]) for c in state.get("checkpoints", {}).get("worker:0", [])
                   if c.get("copy_seconds") is not None]  # the records kept (the newest few)
        # the first copy's line: "... copied off host a to DIR (9.2 MiB in 0.25 s); ..."
        seconds += [float(m) for m in re.findall(r"of worker:0 copied off host \S+ to \S+ \([^)]* in ([0-9.]+) s\)",
                                                 (tmp / "up.log").read_text())]
        sizes = [float(e["bytes"]) for e in saves if e.get("bytes")]
        return {"rate": (s1 - s0) / (t1 - t0), "saves": float(len({e["step"] for e in saves})),
                "copied": float(len(copied)), "bytes": statistics.median(sizes) if sizes else 0.0,
                "copy_s": statistics.median(seconds) if seconds else 0.0}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--case", choices=(*CASES, "all"), default="all")
    parser.add_argument("--disks", choices=(*DISKS, "both"), default="both")
    parser.add_argument("--at", type=int, default=35, help="the step of worker:0 at which to break it")
    parser.add_argument("--cost", action="store_true", help="training cost of the copies instead")
    parser.add_argument("--hidden", type=int, default=0, help="--cost: hidden units (checkpoint weight)")
    parser.add_argument("--epochs", type=int, default=40, help="--cost: epochs of 10 steps each run trains")
    args = parser.parse_args()
    ok, why = netns_available()
    if not ok:
        print(f"cannot run: {why}")
        return 2
    if args.cost:
        runs: dict[str, list[dict[str, float]]] = {d: [] for d in DISKS}
        for n in range(args.runs):
            for disks in DISKS:  # alternating, so a change of load hits both
                load = os.getloadavg()[0]
                r = one_cost(disks, n, args.hidden, args.epochs)
                runs[disks].append(r)
                extra = "" if disks == "shared" else (
                    f", worker:0 saved {r['saves']:.0f} checkpoints, {r['copied']:.0f} copied off its host, "
                    f"{r['bytes'] / 2**20:.1f} MiB and {r['copy_s']:.2f} s per copy")
                print(f"cost run {n + 1} {disks}: {r['rate']:.2f} steps/s{extra}, load {load:.2f}", flush=True)
            ratio = 1 - runs["per-host"][-1]["rate"] / runs["shared"][-1]["rate"]
            print(f"cost run {n + 1}: per-host {100 * ratio:+.1f} % slower than shared", flush=True)
        shared = statistics.median(r["rate"] for r in runs["shared"])
        own = statistics.median(r["rate"] for r in runs["per-host"])
        paired = statistics.median(1 - o["rate"] / s["rate"] for o, s in zip(runs["per-host"], runs["shared"],
                                                                              strict=True))
        print(f"cost median of {args.runs}: per-host (copies) {own:.2f} steps/s, shared (none) {shared:.2f}: "
              f"{100 * (1 - own / shared):+.1f} % slower; median of the pairs {100 * paired:+.1f} % (goal <= 2 %)",
              flush=True)
        return 0
    for case in CASES if args.case == "all" else (args.case,):
        for disks in DISKS if args.disks == "both" else (args.disks,):
            results = []
            for n in range(args.runs):
                load = os.getloadavg()[0]
                r = one_recovery(case, disks, n, args.at)
                results.append(r)
                print(f"{case} {disks} run {n + 1}: steps redone {r['redone']:.0f}, resumed after "
                      f"{r['resume_s']:.1f} s, exit {r['exit']:.0f}, load {load:.2f}", flush=True)
            print(f"{case} {disks} median of {len(results)}: steps redone "
                  f"{statistics.median(r['redone'] for r in results):.0f}, resumed after "
                  f"{statistics.median(r['resume_s'] for r in results):.1f} s (checkpoint every {SAVE_EVERY} "
                  f"steps, host_lost_seconds = {HOST_LOST})", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
