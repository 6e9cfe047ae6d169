"""`distlaunch status`, `logs`, `runs` and `events`: what a run does or did, read from its run dir.

`distlaunch runs`: every run under the state root, newest first, without reading whole event files.

A run's line comes from its state.json (job state, hosts, tasks, restarts, launcher pid) and the
first and last lines of its events.jsonl (when it started and, once ended, when it ended), so
listing hundreds of long runs stays quick.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import sys
import time
from dataclasses import asdict
from pathlib import Path
from typing import Any

from launcher import events as ev
from launcher.agent.leaving import shown
from launcher.commands.slurmrecord import PENDING, pending_words, refresh, slurm_json
from launcher.errors import UserError
from launcher.paths import runs_root
from launcher.rundir import EVENTS_FILE
from launcher.runlookup import EventLines, RunSummary, find_run, human_duration, list_runs, skipped_note
from launcher.runstate import HostStateRecord, RunState, load_run_state
from launcher.telemetry.columns import status_rows
from launcher.telemetry.jobview import JobView, TaskView, role_sizes_text
from launcher.telemetry.timeline import Timeline, TimelineEntry, clock_text


def require_task(state: RunState, task: str) -> None:
    if task not in state.tasks:
        raise UserError(f"run {state.run_id} has no task {task!r}; its tasks: " + ", ".join(state.tasks))


def summarize(path: Path) -> dict[str, Any]:
    """A run's current picture: its events folded by the same JobView the dashboard uses,
    completed from state.json (addresses, ports, the last pid of a finished task).

    ``steps_per_s`` is each task's rate over the window ending now (this call's clock, which the
    launcher's event times share): a live launcher writes each metric to events.jsonl as it comes,
    so a task whose step stopped moving reads 0. Without a live launcher no one records the steps
    any more, and the rate is null, as for a task not running."""
    state = load_run_state(path)
    slurm_now = None
    if state.awaiting_slurm:  # submitted, no supervisor yet: Slurm says where it stands
        slurm_now = refresh(path, state)
        state = load_run_state(path)
    view = JobView()
    lines = EventLines(path)
    for event in lines:
        view.apply(event)
    alive = state.supervisor_alive()
    now = view.rate_clock(time.time())
    tasks: dict[str, dict[str, Any]] = {}
    cpu = {t: v.cpu_percent for t, v in view.tasks.items()}
    for task_id, info in state.tasks.items():
        seen = view.tasks.get(task_id)
        closures = view.step_times.closures.get(task_id)
        tasks[task_id] = {
            "host": info.host or None, "address": info.address or None, "port": info.port,
            "profiler_port": info.profiler_port,
            "state": seen.state if seen else info.state or None,
            "pid": (seen.pid if seen else None) or info.pid,
            # the program below the wrapper shell, as the pid column shows it: py-spy, gdb, kill -STOP
            "main_pid": seen.main_pid if seen else None,
            "restarts": seen.restarts if seen else info.restarts,
            "step": seen.step if seen else None, "loss": seen.loss if seen else None,
            "step_is_calls": bool(seen and seen.step_is_calls),  # the step counts train calls
            "nonfinite_loss": seen.nonfinite_loss if seen else None,
            "steps_per_s": seen.steps_per_s(now) if seen and alive else None,
            "exit_code": seen.exit_code if seen else None, "reason": seen.reason if seen else "",
            "cause": seen.cause if seen else "",
            "conditions": dict(seen.conditions) if seen else {},
            # issue 37: where the step time goes, and a coordinator's view of each PSS worker
            "step_time": view.step_times.as_json(task_id, now=now if alive else None, cpu=cpu),
            "step_time_missing": view.step_times.missing(task_id),  # why it is null, where known
            "closures_per_s": closures.per_s if closures else None,
            "closure_latency_s": closures.latency_s if closures else None,
            "moved_from": seen.moved_from if seen else None,
            # issue 54: the last checkpoint (null: none yet) and the steps a loss now would redo
            "checkpoint": _checkpoint_json(seen, wall_clock()) if seen else None,
            "steps_at_risk": seen.steps_at_risk if seen else None}
    job = ({"state": view.state, "reason": view.reason, "root_cause": view.failure_cause} if view.events_applied
           else {"state": state.job_state, "reason": state.job_reason, "root_cause": ""})
    if state.awaiting_slurm:
        job = {"state": PENDING, "reason": pending_words(state, slurm_now), "root_cause": ""}
    return {"run": state.run_id, "dir": str(path), "profile": state.profile,
            "name": state.name, "strategy": state.strategy, "job": job,
            "supervision": state.supervision() if job["state"] not in ev.JOB_ENDS else None,
            "supervisor_pid": state.supervisor_pid,
            "launcher_pid": state.supervisor_pid,
            "supervisor_alive": alive, "launcher_alive": alive,
            "tasks": tasks, "roles": state.roles, "resizes": state.resizes,
            "hosts": _hosts(state, view.machines, view.host_gpus),
            "lost_events": view.lost_events,
            "slurm": slurm_json(path, state, slurm_now),
            "skipped_lines": lines.skipped}


def wall_clock() -> float:
    """Now, for a checkpoint's age (a test sets it)."""
    return time.time()


def _checkpoint_json(seen: TaskView, now: float) -> dict[str, Any] | None:
    """A task's last checkpoint as ``status --json`` gives it: the event's fields, its age, its copies."""
    point = seen.checkpoint
    if point is None:
        return None
    return {"step": point.step, "epoch": point.epoch, "host": point.host, "directory": point.directory,
            "files": list(point.files), "bytes": point.bytes, "seconds": point.seconds, "api": point.api,
            "ts": point.ts, "age_s": max(0.0, now - point.ts), "copies": list(seen.checkpoint_copies)}


#: what ``status --json`` gives of each GPU of a host (a sample's per-task shares are left out)
GPU_JSON_KEYS = ("index", "util_percent", "mem_used_bytes", "mem_total_bytes", "temp_c", "power_w",
                 "power_limit_w", "sm_clock_mhz", "sm_clock_max_mhz", "throttle", "ecc_corrected",
                 "ecc_uncorrected", "xid_count", "xid")


def _hosts(state: RunState, machines: dict[str, dict[str, Any]] | None = None,
           gpus: dict[str, dict[int, dict[str, Any]]] | None = None) -> dict[str, dict[str, Any]]:
    """Each host's state (up / unreachable / lost / drained / spare), reason and since when (unix time),
    ``machine``: its agent's last whole-host reading (CPU, memory, network and disk rates, free
    space at outputs and the run dir), null before the first, and ``gpus``: the last reading of
    each GPU its tasks hold, by index (use, temperature, power and its limit, SM clock, throttle
    reasons, ECC counts, Xids; null where NVML gives it not)."""
    none = HostStateRecord()
    machines = machines or {}
    gpus = gpus or {}
    return {name: {"state": state.host_states.get(name, none).state or "up",
                   "reason": state.host_states.get(name, none).reason,
                   "since": state.host_states.get(name, none).since,
                   "machine": machines.get(name),
                   "gpus": [{key: gpu.get(key) for key in GPU_JSON_KEYS}
                            for _, gpu in sorted(gpus.get(name, {}).items())]}
            for name in state.hosts}


def hosts_text(hosts: dict[str, dict[str, Any]], now: float) -> list[str]:
    """A line for each host that is not simply up: ``host b: lost for 40 s (no contact for 120 s)``."""
    out = []
    for name, info in hosts.items():
        if info["state"] == "up":
            continue
        since = info.get("since")
        ago = f" for {max(0.0, now - since):.0f} s" if isinstance(since, (int, float)) else ""
        out.append(f"host {name}: {info['state']}{ago}" + (f" ({shown(info['reason'])})" if info.get("reason") else ""))
    return out




def _warn(note: str | None) -> None:
    if note is not None:
        print(note, file=sys.stderr)


def run_status(args: argparse.Namespace) -> int:
    path = find_run(args.run)
    summary = summarize(path)
    _warn(skipped_note(summary["skipped_lines"], path / EVENTS_FILE))
    if args.json:
        print(json.dumps(summary, indent=2))
        return 0
    job = summary["job"]
    # the words `runs` and the docs use, then what they mean
    who = {"live": "live: a client follows", "supervised": "supervised: no client",
           "lost": "lost: no supervisor",
           "pending": "pending: its Slurm job has not started it"}.get(summary["supervision"] or "", "ended")
    if summary["supervisor_alive"]:
        who += f", supervisor pid {summary['supervisor_pid']}"
    print(f"run {summary['run']}  ({summary['name']}, {summary['strategy']}, {who})")
    print(f"job {job['state']}" + (f": {shown(job['reason'])}" if job.get("reason") else ""))
    if job.get("root_cause"):
        print(f"root cause: {shown(job['root_cause'])}")
    if summary["supervision"] == "lost":
        print(f"(lost: task states as last seen by its supervisor; `distlaunch attach {summary['run']}` within the "
              "orphan grace takes the job over, `distlaunch down` cleans up)")
    rows = status_rows(summary["tasks"])  # the dashboard's column declaration
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    for r in rows:
        print("  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)).rstrip())
    for line in hosts_text(summary["hosts"], time.time()):
        print(line)
    sizes = role_sizes_text(summary["roles"])
    if sizes:
        print(f"size: {sizes}")
    for change in summary.get("resizes", [])[-5:]:  # the last few; all of them in --json and state.json
        when = time.strftime("%H:%M:%S", time.localtime(change["ts"]))
        print(f"resized {when}: {change['role']} {change['before']} -> {change['after']}: {shown(change['why'])}")
    for task_id, t in summary["tasks"].items():
        if t.get("moved_from"):
            print(f"{task_id} moved from {t['moved_from']} to {t['host']}")
        if t.get("state") == ev.LOST:
            print(f"{task_id} lost on {t['host']}" + (f": {shown(t['reason'])}" if t.get("reason") else ""))
        if t.get("cause"):
            print(f"{task_id} {'failed' if t['state'] == 'failed' else 'last failed'}: {shown(t['cause'])}")
        for condition, reason in t.get("conditions", {}).items():
            print(f"{task_id} {condition}: {shown(reason)}")
    for task_id, n in summary["lost_events"].items():
        print(f"warning: {task_id}: {n} event(s) never reached the launcher (gaps in its sequence numbers)")
    return 0


def _with_slurm(run: RunSummary) -> RunSummary:
    """A submitted run whose job has not started its supervisor: pending, with Slurm's reason (asked now)."""
    if run.live != "pending":
        return run
    try:
        path = Path(run.dir)
        state = load_run_state(path)
        if not state.awaiting_slurm:
            return run
        info = refresh(path, state)
        state = load_run_state(path)
    except UserError:
        return run
    if state.outcome is not None:
        return dataclasses.replace(run, job_state=state.outcome, job_reason=state.job_reason, live=None)
    return dataclasses.replace(run, job_state=PENDING, job_reason=pending_words(state, info))


def run_runs(args: argparse.Namespace) -> int:
    refused: list[str] = []
    runs = [_with_slurm(r) for r in list_runs(refused=refused)]
    for why in refused:
        print(f"distlaunch: warning: run not listed: {why}", file=sys.stderr)
    skipped = [r for r in runs if r.skipped_lines]
    if skipped:
        count = sum(r.skipped_lines for r in skipped)
        print(f"distlaunch: warning: skipped {count} bad line{'s' if count > 1 else ''} in the events of "
              f"{', '.join(r.run for r in skipped)} (not UTF-8, not an event, or a field of the wrong type)",
              file=sys.stderr)
    if args.json:
        print(json.dumps([asdict(r) for r in runs], indent=2))
        return 0
    if not runs:
        print(f"no runs yet under {runs_root()}; start one with `distlaunch up PROFILE`")
        return 0
    rows = [("RUN", "PROFILE", "STATE", "STARTED", "DURATION", "HOSTS", "TASKS", "RESTARTS", "STEP", "")]
    for r in runs:
        started = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(r.started)) if r.started else "-"
        rows.append((r.run, r.profile, r.job_state, started, human_duration(r.duration_s),
                     ",".join(r.hosts) or "-", str(r.tasks), str(r.restarts),
                     "-" if r.step is None else str(r.step),
                     f"pending: {r.job_reason}" if r.live == "pending" else r.live or ""))
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    for row in rows:
        print("  ".join(c.ljust(w) for c, w in zip(row, widths, strict=True)).rstrip())
    return 0


def run_events(args: argparse.Namespace) -> int:
    path = find_run(args.run)
    tasks = load_run_state(path).tasks
    if args.task and args.task not in tasks:
        known = ", ".join(sorted(tasks)) or "none"
        raise UserError(f"run {path.name} has no task {args.task!r} (its tasks: {known})")
    timeline = Timeline(limit=None)
    start: float | None = None
    lines = EventLines(path)
    for event in lines:
        if start is None:
            start = event.ts
        timeline.add(event)
    _warn(lines.note())
    entries = timeline.newest_first(kind=args.kind, task=args.task)
    if args.json:
        for entry in entries:
            print(json.dumps(entry.to_dict()))
        return 0
    if not entries:
        what = " matching the filter" if args.kind or args.task else ""
        print(f"no timeline entries{what} in {path}")
        return 0
    width = max(len(e.task or "job") for e in entries)
    for entry in entries:
        print(entry_line(entry, start, width))
    return 0


def entry_line(entry: TimelineEntry, start: float | None, task_width: int) -> str:
    return f"{clock_text(entry.ts, start)}  {(entry.task or 'job').ljust(task_width)}  " \
           f"{entry.kind.ljust(9)}  {entry.text}"
