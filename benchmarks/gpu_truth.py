"""GPU truth (issue 47): the dashboard's GPU numbers against nvidia-smi on a real NVIDIA GPU.

One script, five checks, on one machine with the GPU:
 1. `distlaunch up --json` of a local profile: two tasks on GPU 0 in a matrix-multiply loop (PyTorch or
    CuPy) at duty cycles of ~50 % (from the start) and ~100 % (from half-way: GPU 0 then runs at two
    levels), plus one task with no GPU, for --seconds; nvidia-smi (--query-gpu, --query-compute-apps)
    once a second beside it. Per task: distlaunch's GPU utilisation, device memory and the task's own
    memory (its `sample` events' `gpus`) against nvidia-smi's (mean absolute difference: targets 10
    points, 5 %; utilisation's median absolute difference: 5 points); the memory attributed to the
    task by pid through its process tree; none for the task without a GPU.
 2. `distlaunch check --json`: the GPU model, driver and CUDA version per host, as nvidia-smi shows them.
 3. `gpu_busy = "refuse"` refuses to start while another process holds GPU memory; "warn" warns.
 4. A task that runs out of GPU memory (torch.OutOfMemoryError) gets the cause "GPU out of memory";
    `distlaunch stacks --native` of a task in its CUDA loop shows its Python frame and a native frame.
 5. The sampler's own cost: CPU per sample pass and each NVML call's time (three runs), and the host
    agents' whole CPU per pass during the run.

`--rehearse` runs all of it on a machine without a GPU: a CPU loop stands in for the GPU loop, and
NVML and nvidia-smi are faked at the seams the tests fake them at (benchmarks/gpu_truth_fake.py),
TensorFlow is hidden as on the GPU machine. Every figure it prints or writes is labelled
REHEARSAL: it tests this script and distlaunch's plumbing, never a GPU.

Run: ``.venv/bin/python benchmarks/gpu_truth.py --rehearse --seconds 15`` here; on the GPU machine
``bash benchmarks/gpu_truth_device.sh`` (benchmarks/README.md, "GPU truth"). Files go to --out;
the JSON object is the last line on stdout. Exit code: 0 every target met, 1 some missed, 2 it could
not run.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
import time
import traceback
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

import gpu_truth_checks as gc
import gpu_truth_compare as cmp
import gpu_truth_fake

DUTY = {"worker:0": 1.0, "worker:1": 0.5}
MEM_MIB = {False: (4096, 2048), True: (256, 128)}  # worker:0, worker:1 (the stand-in holds host memory)
NO_GPU = "chief:0"
HOST_TASKS = {"g1": [NO_GPU, "worker:0"], "g2": ["worker:1"]}


def mib(n: float | None) -> str:
    return "-" if n is None else f"{n / 2**20:.1f} MiB"


def label(rehearse: bool) -> str:
    return "REHEARSAL" if rehearse else "GPU"


def main_profile(setup: gc.Setup, seconds: float, go: Path, stop: Path) -> Path:
    mem = ",".join(str(m) for m in MEM_MIB[setup.rehearse])
    common = ["--go", str(go), "--stop", str(stop), "--max-seconds", str(int(seconds) + 240)]
    loop = gc.task_command(setup, "loop", "--index", "{index}", "--duty", "1.0,0.5",
                           "--delay", f"{seconds / 2:.1f},0", "--mem-mib", mem, *common)
    idle = gc.task_command(setup, "idle", *common)
    body = gc.local_hosts(["g1", "g2"], setup.gpu) + (
        f'[roles.chief]\nhosts = ["g1"]\ngpus_per_task = 0\ncommand = {idle}\n'
        f'[roles.worker]\ncount = 2\nhosts = ["g1", "g2"]\ngpus_per_task = 1\ncommand = {loop}\n')
    return gc.write_profile(setup, "gpu-truth", body)


def _ready(events: list[dict[str, Any]]) -> bool:
    """Both loops have their memory and backend, and the task without a GPU runs."""
    loops = {e.get("task") for e in events if e.get("kind") == "log"
             and str(e.get("line", "")).startswith("gpu_truth: ready")}
    running = {e.get("task") for e in events if e.get("kind") == "state" and e.get("state") == "running"}
    return loops >= set(DUTY) and NO_GPU in running


def _failed(events: list[dict[str, Any]]) -> bool:
    return any(e.get("kind") == "state" and e.get("state") == "failed" for e in events)


def run_main(setup: gc.Setup, seconds: float, say: Any) -> dict[str, Any]:
    """Check 1 (and, while its tasks still run, the stacks of 4 and the sampler's cost of 5)."""
    go, stop = setup.out / "go", setup.out / "stop"
    profile = main_profile(setup, seconds, go, stop)
    table = setup.cli("check", "--json", str(profile), timeout=300)
    result: dict[str, Any] = {"check_exit_code": table.returncode}
    try:
        result["check_json"] = json.loads(table.stdout)
    except ValueError:
        result["check_json"] = {"error": table.stderr.strip()[-500:]}
    run = gc.UpRun(setup, profile, f"gpu-truth-main-{int(time.time())}")
    result["run_id"] = run.run_id
    poller: gc.SmiPoller | None = None
    try:
        run.wait_until(lambda evs: _ready(evs) or _failed(evs), timeout=240)
        if not _ready(run.snapshot()):
            failed = [f"{e['task']}: {e.get('cause') or e.get('reason')}" for e in run.snapshot()
                      if e.get("kind") == "state" and e.get("state") == "failed"]
            result["error"] = f"the tasks did not all start ({'; '.join(failed)}): " + run.stderr()[-800:]
            say(result["error"])
            return result
        roots = run.pids()
        say(f"tasks running: {', '.join(f'{t} pid {p}' for t, p in sorted(roots.items()))}")
        poller = gc.SmiPoller(setup, roots)
        poller.start()
        agents = gc.agent_pids(run.run_dir)
        agent_cpu0 = {h: gc.cpu_seconds(p) for h, p in agents.items()}
        start = time.time() + 1.0
        go.write_text(f"{start:.3f}\n")
        say(f"window: {seconds:.0f} s; worker:1 at 50 % from the start, worker:0 at 100 % from {seconds / 2:.0f} s")
        time.sleep(max(0.0, start + seconds - time.time()))
        end = time.time()
        agent_cpu1 = {h: gc.cpu_seconds(p) for h, p in agents.items()}
        poller.stop()
        gpus = {"worker:0": [setup.gpu], "worker:1": [setup.gpu], NO_GPU: []}
        for name, part in (("stacks", lambda: gc.stacks(setup, run.run_dir, "worker:0")),
                           ("sampler_cost", lambda: {"runs": gc.sampler_cost(
                               setup, {t: (roots[t], gpus[t]) for t in roots if t in gpus})})):
            try:  # while the tasks still run; a crash here costs this part only
                result[name] = part()
            except Exception as exc:
                result[name] = {"ok": False, "error": f"{type(exc).__name__}: {exc}"}
                say(f"{name}: crashed: {type(exc).__name__}: {exc}")
    finally:
        if poller is not None:
            poller.stop()
        stop.write_text("stop\n")
        result["up_exit_code"] = run.finish(timeout=90)
    events = run.snapshot()
    with (setup.out / "main.events.jsonl").open("w") as f:
        f.writelines(json.dumps(e) + "\n" for e in events)
    with (setup.out / "nvidia_smi.jsonl").open("w") as f:
        f.writelines(json.dumps({"label": label(setup.rehearse), **r}) + "\n" for r in poller.records)
    busy_from = {}
    for task, line in run.logs("gpu_truth: busy from").items():
        busy_from[task] = float(line.split()[3])
    tasks = {t: cmp.compare_gpu_task(events, poller.records, t, start, end, setup.gpu, d, busy_from.get(t),
                                     busy_from.get("worker:0")) for t, d in DUTY.items()}
    tasks[NO_GPU] = cmp.compare_no_gpu_task(events, poller.records, NO_GPU, start, end)
    shared = {p for t in DUTY for p in tasks[t]["attribution"]["pids_on_gpu"]}
    overlap = set.intersection(*(set(tasks[t]["attribution"]["pids_on_gpu"]) for t in DUTY))
    live_cost = {}
    for host, before in agent_cpu0.items():
        after = agent_cpu1.get(host)
        host_tasks = HOST_TASKS.get(host, [])
        passes = max((len(cmp.samples(events, t, start, end)) for t in host_tasks), default=0)
        if before is not None and after is not None and passes:
            live_cost[host] = {"agent_cpu_ms_per_pass": round(1000 * (after - before) / passes, 2),
                               "passes": passes, "tasks": len(host_tasks)}
    result.setdefault("sampler_cost", {})["live_agents"] = live_cost
    result.update({
        "window": {"start": start, "end": end, "seconds": round(end - start, 1), "busy_from": busy_from},
        "nvidia_smi_readings": len(poller.records), "nvidia_smi_errors": poller.errors[:5],
        "tasks": tasks, "unattributed_gpu_pids": cmp.unattributed(poller.records, start, end),
        "pids_in_two_tasks": sorted(overlap), "pids_attributed": sorted(shared),
    })
    return result


def print_figures(results: dict[str, Any], say: Any) -> None:
    main = results["truth"]
    for task, r in main.get("tasks", {}).items():
        if "util" not in r:
            say(f"{task} (no GPU): {r['samples']} samples, {r['samples_with_gpus']} with a GPU, "
                f"its pids on the GPU {r['pids_on_gpu'] or 'none'}: {'ok' if r['ok'] else 'FAILED'}")
            continue
        u, m, p, a = r["util"], r["mem_used"], r["proc_mem"], r["attribution"]
        say(f"{task}: {r['matched']}/{r['samples']} samples matched; util distlaunch {u['distlaunch_mean']} vs "
            f"nvidia-smi {u['nvidia_smi_mean']} %, mean abs diff {u['mad_points']} points (target <= 10), "
            f"median abs diff {u['median_ad_points']} (target <= 5): "
            f"{'ok' if u['ok'] else 'MISSED'}")
        for phase, v in u["by_phase"].items():
            say(f"{task}:   {phase} worker:0's loop began: util {v['distlaunch_mean']} vs {v['nvidia_smi_mean']} %, "
                f"MAD {v['mad_points']}")
        say(f"{task}: GPU memory used {mib(m['distlaunch_mean_bytes'])} vs {mib(m['nvidia_smi_mean_bytes'])}, "
            f"MAD {mib(m['mad_bytes'])} = {m['mad_share']} of nvidia-smi's (target <= 0.05): "
            f"{'ok' if m['ok'] else 'MISSED'}")
        say(f"{task}: its own memory {mib(p['distlaunch_mean_bytes'])} vs {mib(p['nvidia_smi_mean_bytes'])}, "
            f"MAD share {p['mad_share']}, exactly nvidia-smi's in {p['exact_samples']}/{p['samples']} samples: "
            f"{'ok' if p['ok'] else 'MISSED'}; its pids on the GPU {a['pids_on_gpu']}: "
            f"{'attributed' if a['ok'] else 'NOT attributed'}")
        o = r["own_util"]
        say(f"{task}: per-process SM util (NVML) {o['distlaunch_proc_util_mean']} % "
            f"at a duty of {o['duty_target_percent']} %")
    for name in ("truth", "parity", "gpu_busy", "oom"):
        if "error" in results.get(name, {}):
            say(f"{name}: no figures: {str(results[name]['error']).splitlines()[0]}")
    par = results.get("parity", {})
    if "model_ok" in par:
        say(f"check --json: model {'ok' if par['model_ok'] else 'DIFFERS'}, "
            f"driver {'ok' if par['driver_ok'] else 'DIFFERS'}, "
            f"CUDA {'ok' if par['cuda_ok'] else 'NOT SHOWN/DIFFERS'} (nvidia-smi: {par['nvidia_smi']}; "
            f"distlaunch: {par['distlaunch']})")
    for policy, r in results.get("gpu_busy", {}).items():
        if not isinstance(r, dict):
            continue
        say(f"gpu_busy = {policy}: exit {r['exit_code']}, tasks started {r['tasks_started']}: "
            f"{'ok' if r['ok'] else 'FAILED'}: {r['line']}")
    o = results.get("oom", {})
    if "cause" in o:
        say(f"out of GPU memory: cause {o['cause']!r}: {'ok' if o['ok'] else 'FAILED (expected GPU out of memory)'}")
    s = main.get("stacks", {})
    if s:
        say(f"stacks --native of worker:0: {s.get('python_frames')} Python frame(s) of the load script, "
            f"{s.get('native_frames')} native ({s.get('native_cuda_frames')} CUDA), e.g. {s.get('native_sample')}: "
            f"{'ok' if s.get('ok') else 'FAILED ' + str(s.get('note') or s.get('error'))}")
    for i, run in enumerate(main.get("sampler_cost", {}).get("runs", []), 1):
        calls = ", ".join(f"{k} {v['median_ms']} ms" for k, v in run["nvml_calls"].items())
        say(f"sampler run {i}: CPU {run['cpu_per_pass']['median_ms']} ms per pass of {run['tasks']} tasks "
            f"(wall {run['wall_per_pass']['median_ms']} ms); NVML init {run['nvml_init_ms']} ms"
            f"{' (with the import)' if i == 1 else ''}; per call: {calls}")
    for host, c in main.get("sampler_cost", {}).get("live_agents", {}).items():
        say(f"host agent {host}: {c['agent_cpu_ms_per_pass']} ms CPU per pass ({c['tasks']} tasks, whole agent)")


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--rehearse", action="store_true", help="no GPU: CPU stand-in load, faked NVML and nvidia-smi")
    p.add_argument("--seconds", type=float, default=60.0, help="the measured window of check 1 (60)")
    p.add_argument("--out", type=Path, default=None, help="where the files go (default /tmp/gpu-truth-<time>)")
    p.add_argument("--gpu", type=int, default=0, help="the GPU index to use (0)")
    p.add_argument("--backend", choices=["auto", "torch", "cupy"], default="auto", help="the GPU loop's library")
    args = p.parse_args(argv)
    out = (args.out or Path(f"/tmp/gpu-truth-{time.strftime('%Y%m%d-%H%M%S')}")).resolve()
    out.mkdir(parents=True, exist_ok=True)
    setup = gc.Setup(rehearse=args.rehearse, out=out, gpu=args.gpu, backend=args.backend)
    tag = label(args.rehearse)
    lines: list[str] = []

    def say(text: str) -> None:
        line = f"[{tag}] {text}"
        lines.append(line)
        print(line, flush=True)

    if args.rehearse:
        setup.fake_state = out / "fake" / "state"
        setup.extra_env = gpu_truth_fake.install(out / "fake", setup.fake_state)
        say("a CPU stand-in for the GPU loop, NVML and nvidia-smi faked: NOT GPU figures")
    else:
        missing = gc.which_missing(setup)
        if missing:
            print(f"gpu_truth: no GPU here ({'; '.join(missing)}): run on the GPU machine, or --rehearse",
                  file=sys.stderr)
            return 2
    tf = subprocess.run([sys.executable, "-c", "import tensorflow"], capture_output=True, text=True, timeout=300,
                        check=False, env=setup.env())
    ident = gc.smi_identity(setup)
    say(f"GPU {args.gpu}: {ident}; out: {out}")
    results: dict[str, Any] = {
        "label": tag, "rehearsal": args.rehearse,
        "note": ("REHEARSAL: CPU stand-in load, NVML and nvidia-smi faked (benchmarks/gpu_truth_fake.py): "
                 "not GPU figures") if args.rehearse else "measured on a GPU",
        "machine": {"python": platform.python_version(), "cpus": os.cpu_count(), "load": os.getloadavg(),
                    "tensorflow_importable": tf.returncode == 0, "gpu": ident},
        "seconds": args.seconds, "out": str(out)}
    errors: list[str] = []

    def stage(name: str, fn: Any) -> None:
        """One check; a crash in it is recorded, and the others still run."""
        try:
            results[name] = fn()
        except Exception as exc:
            errors.append(f"{name}: {type(exc).__name__}: {exc}\n{traceback.format_exc()[-1500:]}")
            say(f"{name}: crashed: {type(exc).__name__}: {exc}")
            results[name] = {"ok": False, "error": errors[-1]}

    try:
        stage("truth", lambda: run_main(setup, args.seconds, say))
        stage("parity", lambda: cmp.parity(results["truth"].get("check_json") or {}, ident, args.gpu))
        stage("gpu_busy", lambda: gc.gpu_busy(setup))
        stage("oom", lambda: gc.oom(setup))
    finally:  # every run dir under out is one of this script's runs
        runs = {d.name: d for d in out.iterdir() if (d / "state.json").exists()}
        results["left_behind"] = gc.leftovers(setup, runs)
        results["errors"] = errors
    print_figures(results, say)
    left = results["left_behind"]
    say(f"processes of these runs left behind: {left['after_runs'] or 'none'}"
        + (f"; after distlaunch down: {left['after_down'] or 'none'}" if "after_down" in left else ""))
    checks = {"truth": all(t["ok"] for t in results["truth"].get("tasks", {}).values())
              and bool(results["truth"].get("tasks")),
              "parity": results["parity"]["ok"],
              "gpu_busy": all(r.get("ok") for r in results["gpu_busy"].values() if isinstance(r, dict))
              and "error" not in results["gpu_busy"],
              "oom": results["oom"]["ok"], "stacks": bool(results["truth"].get("stacks", {}).get("ok")),
              "nothing_left": not results["left_behind"]["after_runs"]}
    say("checks: " + ", ".join(f"{k} {'ok' if v else 'FAILED'}" for k, v in checks.items()))
    results["checks"] = checks
    results["ok"] = all(checks.values()) and not errors
    for section in ("truth", "parity", "gpu_busy", "oom", "left_behind", "checks"):
        results[section]["label"] = tag  # each part says what it is, also where read alone
    (out / "results.json").write_text(json.dumps(results, indent=1) + "\n")
    (out / "summary.txt").write_text("\n".join(lines) + "\n")
    print(json.dumps(results))
    return 0 if results["ok"] else 1


if __name__ == "__main__":
    sys.exit(main())
