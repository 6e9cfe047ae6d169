"""``distlaunch profile [RUN] [TASK...] [--seconds S] [--json]``: a TensorFlow profiler capture of
the chosen tasks (default: every running task) at the same moment, kept for TensorBoard, and what
TensorFlow's own analysis says of each: step time, input / compute / communication, the
bottleneck in its words, the top operations.

The capture is kept under ``{outputs}/profile/<run id>/<UTC time>/`` on this machine (the outputs
of the run's local host, else ``~/distlaunch/outputs/<name>``): ``tensorboard --logdir`` that
folder opens it in the Profile tab. The profiler servers are reached at the tasks' TF_CONFIG
addresses, on the ports the plan gave them (``profiler_port`` in ``status --json``); each writes
its file under that same path on its own host, and those of other hosts are copied here.
A task that a capture would crash (a MultiWorkerMirrored worker other than the collective leader,
launcher/tfprofiler/safety.py) is not captured: one line says why and what to do instead, and the
other tasks are captured. Exit 0 when every chosen task was captured (those the default choice
spared aside), 2 for a mistake (a task that does not exist, a run with no profiler ports, outputs
another user could steer), 1 when a task gave no capture or a task named was spared (one line
each, naming it and why).
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import shlex
import subprocess
import sys
import time
from pathlib import Path

from launcher.agent import netns
from launcher.autolog.steptime import PROFILER_WANTED
from launcher.commands.runhosts import open_sessions
from launcher.commands.stacks import split_targets
from launcher.errors import UserError
from launcher.runlookup import find_run
from launcher.runstate import RunState, load_run_state
from launcher.tfprofiler.analysis import TaskProfile, analyze, summary_lines
from launcher.tfprofiler.capture import (
    FILES_WAIT_S,
    SERVER_START_S,
    Outcome,
    Target,
    local_files,
    match,
    output_to_log,
    trace,
)
from launcher.tfprofiler.fetch import fetch_remote
from launcher.tfprofiler.place import make_capture_folder
from launcher.tfprofiler.safety import ended_since, events_size, refusals

DEFAULT_SECONDS = 2.0
MIN_SECONDS = 0.01
MAX_SECONDS = 60.0


def outputs_of(state: RunState) -> Path:
    """The outputs of the run's local host, if any, else ``~/distlaunch/outputs/<name>``."""
    local = [h for h in state.hosts.values() if (h.config or {}).get("transport") == "local" and h.outputs_dir]
    return Path(local[0].outputs_dir) if local else Path.home() / "distlaunch" / "outputs" / (state.name or "job")


def folder_names(state: RunState, when: float) -> list[str]:
    """The levels of a capture folder under the outputs: ``profile``, the run id, the UTC time."""
    return ["profile", state.run_id, time.strftime("%Y%m%dT%H%M%SZ", time.gmtime(when))]


def capture_folder(state: RunState, when: float) -> Path:
    """``{outputs}/profile/<run id>/<UTC>`` (``make_capture_folder`` makes it)."""
    return outputs_of(state).joinpath(*folder_names(state, when))


def targets_of(state: RunState, tasks: list[str]) -> list[Target]:
    run_id = state.run_id
    known = state.tasks
    unknown = [t for t in tasks if t not in known]
    if unknown:
        raise UserError(f"run {run_id} has no task {unknown[0]!r}; its tasks: " + ", ".join(known))
    chosen = tasks or [t for t, info in known.items() if info.state in ("running", "starting")]
    if not chosen:
        raise UserError(f"run {run_id} has no running task to profile; `distlaunch status {run_id}` shows its tasks")
    out = []
    for task in chosen:
        info = known[task]
        port = info.profiler_port
        if port is None:
            raise UserError(f"{task} of run {run_id} has no profiler port (a run started before `profile` "
                            "existed, or with autolog = false): start the job again to profile it")
        out.append(Target(task, info.host, info.address or "localhost", port))
    return out


def wait_for_files(targets: list[Target], folder: Path, within_s: float = FILES_WAIT_S) -> dict[str, Path]:
    """Each target's capture file, waiting a little for servers that write after answering."""
    deadline = time.monotonic() + within_s
    while True:
        files = match(targets, local_files(folder))
        if len(files) == len(targets) or time.monotonic() >= deadline:
            return files
        time.sleep(0.2)


def one_line(exc: BaseException) -> str:
    return " ".join(str(exc).split())[:300] or type(exc).__name__


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
    state = load_run_state(path)
    targets = targets_of(state, tasks)
    refused = refusals(state, path, [t.task for t in targets])  # a capture would crash them
    targets = [t for t in targets if t.task not in refused]
    if not targets:
        for why in refused.values():
            print(f"distlaunch: {why}", file=sys.stderr)
        return 1
    when = time.time()
    folder = make_capture_folder(outputs_of(state), folder_names(state, when))
    names = ", ".join(t.task for t in targets)
    print(f"... capturing {names} for {seconds:g} s", file=sys.stderr, flush=True)
    offset = events_size(path)
    files, reasons, problems, notes = capture(state, targets, folder, seconds)
    lost = [t.task for t in targets if t.task not in files]
    if lost:  # a task that ended meanwhile: said so, not what its port's silence looked like
        reasons.update(ended_since(path, offset, lost))
    profiles: list[TaskProfile] = []
    with output_to_log(folder):
        for target in targets:
            if target.task in files:
                try:
                    profiles.append(analyze(target.task, files[target.task], state.strategy or ""))
                except Exception as exc:  # a TensorFlow whose converter lacks a tool: the capture is kept
                    problems.append(f"{target.task}: TensorFlow could not analyse its capture ({one_line(exc)})")
    missing = [t for t in targets if t.task not in files]
    if args.json:
        print(json.dumps({"run": state.run_id, "logdir": str(folder), "seconds": seconds, "started": when,
                          "tasks": [p.as_json() for p in profiles], "missing": [t.task for t in missing],
                          "refused": refused, "problems": problems, "notes": notes}, indent=2))
    else:
        for profile in profiles:
            print("\n".join(summary_lines(profile)))
        if files:
            print(f"(kept in {folder}: `tensorboard --logdir {folder}`, Profile tab)")
    for line in notes:
        print(f"distlaunch: note: {line}", file=sys.stderr)
    for why in refused.values():
        print(f"distlaunch: {why}", file=sys.stderr)
    for line in problems:
        print(f"distlaunch: {line}", file=sys.stderr)
    for target in missing:
        why = reasons.get(target.task) or (f"its profiler server wrote no {target.file_name} under {folder} on "
                                           f"host {target.host}")
        print(f"distlaunch: no capture from {target.task} ({target.endpoint}): {why}", file=sys.stderr)
    return 1 if missing or problems or (refused and tasks) else 0


def capture(state: RunState, targets: list[Target], folder: Path, seconds: float
            ) -> tuple[dict[str, Path], dict[str, str], list[str], list[str]]:
    """The capture of ``targets`` into ``folder``: each one's file, why the others have none, the
    lines of hosts whose files could not be had, and notes."""
    asked, asked_problems = ask_servers(state, targets)
    inside = private_network_member(state, targets)
    try:
        outcome = trace(targets, folder, seconds, SERVER_START_S if asked else 0.0, inside)
    except (OSError, subprocess.SubprocessError) as exc:  # the agent ended as the capture joined its network
        if inside is None:
            raise
        raise UserError(f"cannot reach the tasks' private network (its host agent, pid {inside}): {exc}") from None
    files, problems = _collect(state, targets, outcome, folder)
    problems = asked_problems + problems
    reasons = dict(outcome.reasons)
    notes: list[str] = []
    late = [t for t in targets if t.task in outcome.asked and t.task not in files and t.task not in reasons]
    if outcome.answered and late and len(late) < len(targets):  # the joint capture missed a server: once more
        again = trace(late, folder, seconds, SERVER_START_S if asked else 0.0, inside)
        reasons.update(again.reasons)
        more, more_problems = _collect(state, late, again, folder)
        files.update(more)
        problems += more_problems
        notes = [f"{t.task} was captured {seconds:g} s after the others (the joint capture missed it)"
                 for t in late if t.task in more]
    return files, reasons, problems, notes


def private_network_member(state: RunState, targets: list[Target]) -> int | None:
    """The pid of the host agent whose private network the targets' tasks run in (a job on one
    local host, launcher/agent/netns.py), None where they share this machine's network. A private
    network with no live agent is one line, exit 2: its ports cannot be reached from here."""
    for target in targets:
        host = state.hosts.get(target.host)
        if host is None or (host.config or {}).get("transport") != "local" or not netns.wanted(host.base_dir):
            continue
        pid = netns.agent_member(host.base_dir)
        if pid is None:
            raise UserError(f"{target.task} runs in the private network of host {target.host}'s agent, which is not "
                            "running: nothing can reach its profiler port now")
        return pid
    return None


def ask_servers(state: RunState, targets: list[Target]) -> tuple[bool, list[str]]:
    """Ask each target's profiler server to start (autolog starts it only when asked: it answers
    anyone who reaches its port): ``PROFILER_WANTED`` made in each task's dir on its host. Whether
    any was asked, and one line per host that could not be."""
    paths: dict[str, list[str]] = {}
    for target in targets:
        info, host = state.tasks.get(target.task), state.hosts.get(target.host)
        if info is not None and host is not None and host.base_dir and info.slug:
            paths.setdefault(target.host, []).append(f"{host.base_dir}/tasks/{info.slug}/{PROFILER_WANTED}")
    if not paths:
        return False, []
    sessions, problems = open_sessions(dataclasses.replace(state, hosts={h: state.hosts[h] for h in paths}))
    lines = [f"host {h}: its profiler servers could not be asked to start ({why})" for h, why in problems.items()]
    try:
        for name, session in sessions.items():
            if name in problems:
                continue
            try:
                result = session.host.run("touch -- " + " ".join(shlex.quote(p) for p in paths[name]), timeout=30)
            except UserError as exc:
                result = None
                lines.append(f"host {name}: its profiler servers could not be asked to start ({one_line(exc)})")
            if result is not None and not result.ok:
                lines.append(f"host {name}: its profiler servers could not be asked to start "
                             f"({' '.join(result.stderr.split())[:200]})")
    finally:
        for session in sessions.values():
            session.host.close()
    return True, lines


def _collect(state: RunState, targets: list[Target], outcome: Outcome, folder: Path
             ) -> tuple[dict[str, Path], list[str]]:
    """The files of the ``targets`` the client asked, here and copied from their hosts."""
    asked = [t for t in targets if t.task in outcome.asked]
    if not asked or outcome.state not in ("done", "timeout"):
        return {}, []
    problems = fetch_remote(state, asked, folder, open_sessions)
    return wait_for_files(asked, folder, outcome.files_wait_s), problems
