"""``distlaunch profile [RUN] [TASK...] [--seconds S] [--json]``: a TensorFlow profiler capture of
the chosen tasks (default: every running task) at the same moment, kept for TensorBoard, and what
TensorFlow's own analysis says of each: step time, input / compute / communication, the
bottleneck in its words, the top operations.

The capture is kept under ``{outputs}/profile/<run id>/<UTC time>/`` on this machine (the outputs
of the run's local host, else ``~/distlaunch/outputs/<name>``): ``tensorboard --logdir`` that
folder opens it in the Profile tab. The profiler servers are reached at the tasks' TF_CONFIG
addresses, on the ports the plan gave them (``profiler_port`` in ``status --json``); each writes
its file under that same path on its own host, and those of other hosts are copied here.
Exit 0 when every chosen task was captured, 2 for a mistake (a task that does not exist, a run
with no profiler ports), 1 when a server did not answer.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path
from typing import Any

from launcher.commands.stacks import split_targets
from launcher.errors import UserError
from launcher.profiling.analysis import TaskProfile, analyze, summary_lines
from launcher.profiling.capture import NoAnswer, Target, fetch_remote, local_files, match, trace
from launcher.rundir import find_run, read_state

DEFAULT_SECONDS = 2.0
MIN_SECONDS = 0.01
#: how long files may take to appear after the capture returned
FILES_WAIT_S = 5.0
MAX_SECONDS = 60.0


def capture_folder(state: dict[str, Any], when: float) -> Path:
    """``{outputs}/profile/<run id>/<UTC>`` with the outputs of the run's local host, if any."""
    hosts = state.get("hosts") or {}
    local = [h for h in hosts.values() if isinstance(h, dict)
             and (h.get("config") or {}).get("transport") == "local" and h.get("outputs_dir")]
    outputs = Path(str(local[0]["outputs_dir"])) if local else \
        Path.home() / "distlaunch" / "outputs" / str(state.get("name") or "job")
    stamp = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime(when))
    return outputs / "profile" / str(state["run_id"]) / stamp


def targets_of(state: dict[str, Any], tasks: list[str]) -> list[Target]:
    run_id = state["run_id"]
    known: dict[str, Any] = state.get("tasks") or {}
    unknown = [t for t in tasks if t not in known]
    if unknown:
        raise UserError(f"run {run_id} has no task {unknown[0]!r}; its tasks: " + ", ".join(known))
    chosen = tasks or [t for t, info in known.items() if info.get("state") in ("running", "starting")]
    if not chosen:
        raise UserError(f"run {run_id} has no running task to profile; `distlaunch status {run_id}` shows its tasks")
    out = []
    for task in chosen:
        info = known[task]
        port = info.get("profiler_port")
        if not isinstance(port, int):
            raise UserError(f"{task} of run {run_id} has no profiler port (a run started before `profile` "
                            "existed, or with autolog = false): start the job again to profile it")
        out.append(Target(task, str(info.get("host") or ""), str(info.get("address") or "localhost"), port))
    return out


def wait_for_files(targets: list[Target], folder: Path, within_s: float = FILES_WAIT_S) -> dict[str, Path]:
    """Each target's capture file, waiting a little for servers that write after answering."""
    deadline = time.monotonic() + within_s
    while True:
        files = match(targets, local_files(folder))
        if len(files) == len(targets) or time.monotonic() >= deadline:
            return files
        time.sleep(0.2)


def parse_seconds(text: str) -> float:
    try:
        seconds = float(text)
    except ValueError:
        seconds = -1.0
    if not MIN_SECONDS <= seconds <= MAX_SECONDS:
        raise UserError(f"--seconds {text}: give a capture length from {MIN_SECONDS} to {MAX_SECONDS:.0f} seconds")
    return seconds


def run_profile(args: argparse.Namespace) -> int:
    run, tasks = split_targets(list(args.targets))
    seconds = parse_seconds(str(args.seconds))
    path = find_run(run)
    state = read_state(path)
    targets = targets_of(state, tasks)
    when = time.time()
    folder = capture_folder(state, when)
    names = ", ".join(t.task for t in targets)
    print(f"... capturing {names} for {seconds:g} s", file=sys.stderr, flush=True)
    try:
        trace(targets, folder, seconds)
    except NoAnswer as exc:
        print(f"distlaunch: {exc}", file=sys.stderr)
        return 1
    problems = fetch_remote(state, targets, folder)
    files = wait_for_files(targets, folder)
    late = [t for t in targets if t.task not in files]
    if late and len(late) < len(targets):  # the joint capture missed a server: once more, on its own
        try:
            trace(late, folder, seconds)
        except NoAnswer as exc:
            problems.append(str(exc))
        problems += fetch_remote(state, late, folder)
        files = wait_for_files(targets, folder)
        notes = [f"{t.task} was captured {seconds:g} s after the others (the joint capture missed it)"
                 for t in late if t.task in files]
    else:
        notes = []
    profiles: list[TaskProfile] = []
    for target in targets:
        if target.task in files:
            try:
                profiles.append(analyze(target.task, files[target.task], str(state.get("strategy") or "")))
            except Exception as exc:  # a TensorFlow whose converter lacks a tool: the capture is kept
                problems.append(f"{target.task}: TensorFlow could not analyse its capture ({exc})")
    missing = [t for t in targets if t.task not in files]
    if args.json:
        print(json.dumps({"run": state["run_id"], "logdir": str(folder), "seconds": seconds, "started": when,
                          "tasks": [p.as_json() for p in profiles], "missing": [t.task for t in missing],
                          "problems": problems, "notes": notes}, indent=2))
    else:
        for profile in profiles:
            print("\n".join(summary_lines(profile)))
        print(f"(kept in {folder}: `tensorboard --logdir {folder}`, Profile tab)")
    for line in notes:
        print(f"distlaunch: note: {line}", file=sys.stderr)
    for line in problems:
        print(f"distlaunch: {line}", file=sys.stderr)
    for target in missing:
        print(f"distlaunch: no capture from {target.task}: its profiler server wrote no {target.file_name} under "
              f"{folder} on host {target.host}", file=sys.stderr)
    return 1 if missing or problems else 0
