"""Time from a host's link cut for good to training resumed, and the steps redone, per strategy.

Three network-namespace hosts (tests/netns.py; root): MultiWorkerMirrored with workers on a and b
and spare c, b cut (the worker moves to c); ParameterServerStrategy with ps and chief on a,
workers on b and c, c cut (the job goes on with one worker, nothing restarts: issue 55; the chief's
coordinator gives the lost worker's closures to the other once gRPC keepalive fails its calls, and
training goes on before the host is even lost). ``host_lost_seconds`` = 20 and
``orphan_grace_seconds`` = 4 (a host is never lost before orphan_grace + its tasks' grace, 5 s, +
10 s), so most of the time is the loss rule's own wait: the figure to
compare is the time after it (``after lost``), the restart from the checkpoint. ``steps redone``:
the deciding task's last step before the cut less the step the restart resumed from (MWMS: Keras'
BackupAndRestore resumes at the last finished epoch; PSS: how far the chief's step ever went back,
and ``resumed`` is the end of its longest stretch without a new step after the cut).
Prints one line per run, then the medians, with the load average.

    python benchmarks/host_loss.py --runs 5
"""

from __future__ import annotations

import argparse
import itertools
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from tests.integration.jobtools import REPO, kill_run_processes, read_events, start_cli, wait_for
from tests.netns import NetnsLab, netns_available
from tests.profiles import build_profile, netns_hosts

HOST_LOST = 20
MWMS_EPOCHS, MWMS_STEPS_PER_EPOCH = 8, 25
MWMS_STEPS = MWMS_EPOCHS * MWMS_STEPS_PER_EPOCH


def profile(tmp: Path, lab: NetnsLab, strategy: str) -> tuple[Path, str, str]:
    """The profile, the host to cut, the task whose step is the job's."""
    ckpt = tmp / "ckpt"
    common: dict[str, Any] = dict(orphan_grace=4, defaults={"python": sys.executable}, workdir=REPO,
                                  env={"TF_CPP_MIN_LOG_LEVEL": "2"}, grace=5, hosts=netns_hosts(lab, "ssh"))
    if strategy == "mwms":
        return build_profile(tmp / "p.toml", name="bench-loss-mwms", strategy="multi_worker_mirrored",
                             top=f'host_lost_seconds = {HOST_LOST}\nspares = ["c"]\n',
                             command=f"{{python}} examples/mwms_keras.py --epochs {MWMS_EPOCHS} "
                                     f"--steps-per-epoch {MWMS_STEPS_PER_EPOCH} "
                                     f"--checkpoint-dir {ckpt}",
                             roles={"worker": {"count": 2, "hosts": ["a", "b"]}}, **common), "b", "worker:0"
    return build_profile(tmp / "p.toml", name="bench-loss-ps", strategy="parameter_server",
                         top=f"host_lost_seconds = {HOST_LOST}\n",
                         command=f"{{python}} examples/ps_mnist.py --steps 1500 --log-every 20 --checkpoint-dir {ckpt} "
                                 "--checkpoint-every 100",
                         roles={"ps": {"hosts": ["a"]}, "chief": {"hosts": ["a"]},
                                "worker": {"count": 2, "hosts": ["b", "c"]}}, **common), "c", "chief:0"


def steps(events: list[dict[str, Any]], task: str) -> list[tuple[float, int]]:
    return [(e["ts"], e["step"]) for e in events
            if e["kind"] == "metric" and e["task"] == task and e.get("step") is not None]


def pss_run(run_dir: Path, proc: Any, decider: str, cut_at: float) -> dict[str, float]:
    """The PSS job goes on without the worker: no restart. Resumed: the end of the chief's longest
    stretch without a new step from the cut on; redone: how far its step ever went back."""
    wait_for(lambda: next((e for e in read_events(run_dir) if e["kind"] == "host" and e["state"] == "lost"), None),
             120, "the host lost")
    code = proc.wait(timeout=300)
    events = read_events(run_dir)
    lost = next(e for e in events if e["kind"] == "host" and e["state"] == "lost")
    assert not any(e["kind"] == "job" and e["state"] == "Restarting" for e in events), "a restart"
    seen = steps(events, decider)
    after = [(ts, s) for ts, s in seen if ts > cut_at]
    marks = [cut_at] + [ts for ts, _ in after]
    gaps = [(b - a, b) for a, b in itertools.pairwise(marks)]
    _gap, resumed_ts = max(gaps) if gaps else (0.0, cut_at)
    top, redone = -1, 0
    for _ts, s in seen:
        redone, top = max(redone, top - s), max(top, s)
    return {"resumed_s": resumed_ts - cut_at, "after_lost_s": resumed_ts - lost["ts"], "redone": float(redone),
            "exit": float(code)}


def one_run(strategy: str, n: int) -> dict[str, float]:
    with tempfile.TemporaryDirectory() as tmp_name, NetnsLab(3) as lab:
        tmp = Path(tmp_name)
        path, cut_host, decider = profile(tmp, lab, strategy)
        run_id = f"bench-loss-{strategy}-{n}-{lab.tag}"
        run_dir = tmp / "run"
        proc = start_cli("up", str(path), "--no-tui", "--run-dir", str(run_dir), "--run-id", run_id, log=tmp / "up.log")
        try:
            wait_for(lambda: max((s for _, s in steps(read_events(run_dir), decider)), default=-1) >= 60, 300,
                     "training past step 60")
            before = steps(read_events(run_dir), decider)[-1][1]
            lab.cut(cut_host)
            cut_at = time.time()
            if strategy == "pss":
                return pss_run(run_dir, proc, decider, cut_at)
            restarted = wait_for(lambda: next((e for e in read_events(run_dir) if e["kind"] == "job"
                                               and e["state"] == "Restarting" and e["ts"] > cut_at), None),
                                 120, "the re-plan")
            # the decider's new incarnation (its first running after the re-plan), then its first step
            running = wait_for(lambda: next((e for e in read_events(run_dir) if e["kind"] == "state"
                                             and e["task"] == decider and e["state"] == "running"
                                             and e["ts"] > restarted["ts"]), None), 240, "the restart")
            resumed = wait_for(lambda: next(((ts, s) for ts, s in steps(read_events(run_dir), decider)
                                             if ts > running["ts"]), None), 240, "training resumed")
            lost = next(e for e in read_events(run_dir) if e["kind"] == "host" and e["state"] == "lost")
            code = proc.wait(timeout=300)
            after = [s for ts, s in steps(read_events(run_dir), decider) if ts > running["ts"]]
        finally:
            if proc.poll() is None:
                proc.kill()
            kill_run_processes(run_id)
        # MWMS: Keras counts each fit()'s steps, so the epochs restored are those not run again;
        # PSS: the chief's step is the global step, restored from the checkpoint
        restored_at = MWMS_STEPS - max(after) if strategy == "mwms" else resumed[1]
        return {"resumed_s": resumed[0] - cut_at, "after_lost_s": resumed[0] - lost["ts"],
                "redone": float(max(0, before - restored_at)), "exit": float(code)}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--strategy", choices=("mwms", "pss", "both"), default="both")
    args = parser.parse_args()
    ok, why = netns_available()
    if not ok:
        print(f"cannot run: {why}")
        return 2
    for strategy in (("mwms", "pss") if args.strategy == "both" else (args.strategy,)):
        results = []
        for n in range(args.runs):
            load = os.getloadavg()[0]
            r = one_run(strategy, n)
            results.append(r)
            print(f"{strategy} run {n + 1}: cut -> resumed {r['resumed_s']:.1f} s "
                  f"(after lost {r['after_lost_s']:.1f} s), steps redone {r['redone']:.0f}, "
                  f"exit {r['exit']:.0f}, load {load:.2f}", flush=True)
        print(f"{strategy} median of {len(results)}: cut -> resumed "
              f"{statistics.median(r['resumed_s'] for r in results):.1f} s, after lost "
              f"{statistics.median(r['after_lost_s'] for r in results):.1f} s, steps redone "
              f"{statistics.median(r['redone'] for r in results):.0f} (host_lost_seconds = {HOST_LOST})", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
