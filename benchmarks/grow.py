"""What a grow costs, per kind: seconds until the new task trains and the steps the others redo.

Three network-namespace hosts (tests/netns.py; root), real sshd and TensorFlow:

- ``pss-back``: ParameterServerStrategy, ps and chief on a, workers on b and c; c cut until it is
  lost (the job goes on with one worker), then its link restored: after ``readmit_after_seconds`` = 3
  and a fresh preflight it is re-admitted and worker:1 starts there again at its old address
  (``grow = "now"``). Seconds: from the link restored to worker:1 running; then the chief's steps/s
  over the 10 s after (a PSS worker reports no step of its own); redone: how far the chief's step
  ever went back (0: nothing restarted).
- ``mwms-resize``: MultiWorkerMirrored, workers on a and b, spare c, ``resize worker=3`` after the
  first epoch: the workers restart with the bigger TF_CONFIG from one checkpoint. Seconds: from the
  resize to worker:2's first step; redone: worker:0's last step before the resize less the step the
  restart resumed from (Keras resumes at the last finished epoch).
- ``mwms-resize-own``: the same, each host with a checkpoint folder of its own (``$CKPT_ROOT``, as
  separate machines have): the keeper copies worker:0's checkpoint into the folder worker:2 reads
  on c (``backup-worker-2``). Both MWMS kinds stop where the three workers did not run the same
  epochs after the grow (not one checkpoint).
- ``add-host``: a custom ticker on a, ``add-host RUN c`` (connect, agent upload, preflight), then
  ``resize worker=2``: seconds the add-host command took, and from the resize to worker:1's first
  tick; redone: worker:0's ticks lost (0: it never restarts).

One line per run with the load average, then the medians.

    python benchmarks/grow.py --runs 5
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from tests.integration.jobtools import PYTHON, REPO, kill_run_processes, read_events, start_cli, wait_for
from tests.netns import NetnsLab, netns_available
from tests.profiles import build_profile, netns_hosts

KINDS = ("pss-back", "mwms-resize", "mwms-resize-own", "add-host")
HOST_LOST = 20
MWMS_EPOCHS, MWMS_STEPS_PER_EPOCH = 60, 25  # many epochs: the first fit must not end before the grow
TICKER = "{python} -u -c 'import time\nfor i in range(%d):\n    print(\"tick\", i, flush=True); time.sleep(0.1)'"


def steps(events: list[dict[str, Any]], task: str) -> list[tuple[float, int]]:
    return [(e["ts"], e["step"]) for e in events
            if e["kind"] == "metric" and e["task"] == task and e.get("step") is not None]


def first(run_dir: Path, match: Any, timeout: float, what: str) -> dict[str, Any]:
    found: dict[str, Any] = wait_for(lambda: next((e for e in read_events(run_dir) if match(e)), None), timeout, what,
                                     interval=0.2)
    return found


def cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([PYTHON, "-m", "launcher.cli", *args], capture_output=True, text=True, timeout=300,
                          cwd=REPO)


def profile(tmp: Path, lab: NetnsLab, kind: str) -> Path:
    hosts = netns_hosts(lab, "ssh")
    ckpt = str(tmp / "ckpt")
    if kind == "mwms-resize-own":
        hosts = [dataclasses.replace(h, options={**h.options, "env": {"CKPT_ROOT": str(tmp / f"disk-{h.name}")}})
                 for h in hosts]
        ckpt = "$CKPT_ROOT/ckpt"
    common: dict[str, Any] = dict(orphan_grace=4, defaults={"python": sys.executable}, workdir=REPO,
                                  env={"TF_CPP_MIN_LOG_LEVEL": "2"}, grace=5, hosts=hosts)
    if kind == "pss-back":
        return build_profile(tmp / "p.toml", name="bench-grow-ps", strategy="parameter_server",
                             top=f'host_lost_seconds = {HOST_LOST}\nreadmit_after_seconds = 3\ngrow = "now"\n'
                                 "grow_every_seconds = 1\n",
                             command=f"{{python}} examples/ps_mnist.py --steps 3000 --log-every 20 "
                                     f"--checkpoint-dir {ckpt} --checkpoint-every 100",
                             roles={"ps": {"hosts": ["a"]}, "chief": {"hosts": ["a"]},
                                    "worker": {"count": 2, "hosts": ["b", "c"], "min_count": 1}}, **common)
    if kind.startswith("mwms-resize"):
        return build_profile(tmp / "p.toml", name="bench-grow-mwms", strategy="multi_worker_mirrored",
                             top=f'host_lost_seconds = {HOST_LOST}\nspares = ["c"]\ngrow = "now"\n',
                             command=f"{{python}} examples/mwms_keras.py --epochs {MWMS_EPOCHS} "
                                     f"--steps-per-epoch {MWMS_STEPS_PER_EPOCH} --checkpoint-dir {ckpt}",
                             roles={"worker": {"count": 2, "hosts": ["a", "b"], "max_count": 3}}, **common)
    return build_profile(tmp / "p.toml", name="bench-grow-add", strategy="custom",
                         roles={"worker": {"count": 1, "hosts": ["a"], "max_count": 2, "command": TICKER % 1200}},
                         metrics={"step": r"tick (\d+)"}, **{**common, "env": None})


def pss_back(run_dir: Path, lab: NetnsLab) -> dict[str, float]:
    wait_for(lambda: max((s for _, s in steps(read_events(run_dir), "chief:0")), default=-1) >= 100, 300,
             "the chief past step 100")
    lab.cut("c")
    first(run_dir, lambda e: e["kind"] == "host" and e.get("host") == "c" and e["state"] == "lost", 120, "c lost")
    lab.restore("c")
    back = time.time()
    running = first(run_dir, lambda e: e["kind"] == "state" and e["task"] == "worker:1" and e["state"] == "running"
                    and e["ts"] > back, 180, "worker:1 running again")
    # a PSS worker reports no step of its own (the chief's coordinator runs the loop): the chief's
    # steps/s over the 10 s before the cut and the 10 s after worker:1 is back say it works again
    time.sleep(12)  # the window measured, not a wait for an event
    seen = steps(read_events(run_dir), "chief:0")
    after = [(ts, s) for ts, s in seen if running["ts"] + 2 <= ts <= running["ts"] + 12]
    rate = (after[-1][1] - after[0][1]) / (after[-1][0] - after[0][0]) if len(after) > 1 else 0.0
    top, redone = -1, 0
    for _ts, s in steps(read_events(run_dir), "chief:0"):
        redone, top = max(redone, top - s), max(top, s)
    restarts = sum(1 for e in read_events(run_dir) if e["kind"] == "job" and e["state"] == "Restarting")
    return {"running_s": running["ts"] - back, "trains_s": rate, "redone": float(redone),
            "restarts": float(restarts)}


def mwms_resize(run_dir: Path, run_id: str, proc: Any) -> dict[str, float]:
    wait_for(lambda: max((s for _, s in steps(read_events(run_dir), "worker:0")), default=-1) >= 30, 300,
             "worker:0 past its first epoch")
    asked = time.time()
    done = cli("resize", run_id, "worker=3")
    assert done.returncode == 0, done.stderr
    running = first(run_dir, lambda e: e["kind"] == "state" and e["task"] == "worker:2" and e["state"] == "running",
                    180, "worker:2 running")
    stepped = wait_for(lambda: next((ts for ts, _ in steps(read_events(run_dir), "worker:2") if ts > running["ts"]),
                                    None), 240, "worker:2's first step", interval=0.2)
    code = proc.wait(timeout=600)
    assert code == 0, f"the job did not succeed (exit {code}):\n" + (run_dir.parent / "up.log").read_text()[-3000:]
    # Keras counts each fit()'s steps: the restarted fit runs what the checkpoint left, to the end
    seen = steps(read_events(run_dir), "worker:0")
    before = max(s for ts, s in seen if ts <= running["ts"])  # where the old workers were stopped
    after = [s for ts, s in seen if ts > running["ts"]]
    restored_at = MWMS_EPOCHS * MWMS_STEPS_PER_EPOCH - max(after)
    ran = {t: max((s for ts, s in steps(read_events(run_dir), t) if ts > running["ts"]), default=-1)
           for t in ("worker:0", "worker:1", "worker:2")}
    assert len(set(ran.values())) == 1, f"the workers did not resume from one checkpoint: {ran}"
    return {"running_s": running["ts"] - asked, "trains_s": stepped - asked,
            "redone": float(max(0, before - restored_at)), "restarts": 0.0}


def add_host(run_dir: Path, run_id: str) -> dict[str, float]:
    wait_for(lambda: steps(read_events(run_dir), "worker:0"), 120, "worker:0 ticking")
    started = time.time()
    done = cli("add-host", run_id, "c")
    assert done.returncode == 0, done.stderr
    added = time.time() - started
    asked = time.time()
    grown = cli("resize", run_id, "worker=2")
    assert grown.returncode == 0, grown.stderr
    stepped = wait_for(lambda: next((ts for ts, _ in steps(read_events(run_dir), "worker:1")), None), 120,
                       "worker:1's first tick", interval=0.2)
    ran = [e for e in read_events(run_dir) if e["kind"] == "state" and e["task"] == "worker:0"
           and e["state"] == "running"]
    return {"running_s": added, "trains_s": stepped - asked, "redone": float(len(ran) - 1), "restarts": 0.0}


def one_run(kind: str, n: int) -> dict[str, float]:
    with tempfile.TemporaryDirectory() as tmp_name, NetnsLab(3) as lab:
        tmp = Path(tmp_name)
        path = profile(tmp, lab, kind)
        run_id = f"bench-grow-{kind}-{n}-{lab.tag}"
        run_dir = tmp / "run"
        proc = start_cli("up", str(path), "--no-tui", "--run-dir", str(run_dir), "--run-id", run_id, log=tmp / "up.log")
        try:
            if kind == "pss-back":
                return pss_back(run_dir, lab)
            if kind.startswith("mwms-resize"):
                return mwms_resize(run_dir, run_id, proc)
            return add_host(run_dir, run_id)
        finally:
            cli("down", run_id)
            if proc.poll() is None:
                proc.kill()
            kill_run_processes(run_id)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--kind", choices=(*KINDS, "all"), default="all")
    args = parser.parse_args()
    ok, why = netns_available()
    if not ok:
        print(f"cannot run: {why}")
        return 2
    words = {"pss-back": ("link back -> worker:1 running", "then the chief's steps/s"),
             "mwms-resize": ("resize -> worker:2 running", "-> its first step"),
             "mwms-resize-own": ("resize -> worker:2 running", "-> its first step"),
             "add-host": ("add-host took", "resize -> worker:1's first tick")}
    for kind in (KINDS if args.kind == "all" else (args.kind,)):
        results = []
        for n in range(args.runs):
            load = os.getloadavg()[0]
            r = one_run(kind, n)
            results.append(r)
            first_words, second_words = words[kind]
            unit = "" if kind == "pss-back" else " s"
            print(f"{kind} run {n + 1}: {first_words} {r['running_s']:.1f} s, {second_words} "
                  f"{r['trains_s']:.1f}{unit}, steps redone {r['redone']:.0f}, restarts {r['restarts']:.0f}, "
                  f"load {load:.2f}", flush=True)
        first_words, second_words = words[kind]
        unit = "" if kind == "pss-back" else " s"
        print(f"{kind} median of {len(results)}: {first_words} {statistics.median(r['running_s'] for r in results):.1f}"
              f" s, {second_words} {statistics.median(r['trains_s'] for r in results):.1f}{unit}, steps redone "
              f"{statistics.median(r['redone'] for r in results):.0f}", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
