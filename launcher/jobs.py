"""The job verbs: up, down, status, logs, restart, attach, replay."""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import sys
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from launcher import controlsock
from launcher import events as ev
from launcher.agent import pid_alive
from launcher.checking import exposure_warnings
from launcher.errors import HostError, HostGone, UserError
from launcher.jobview import JobView
from launcher.model import Plan
from launcher.notify import Notifier, NotifyFollower
from launcher.paths import runs_root
from launcher.plan import build_plan
from launcher.preflight import Preflight, PreflightError, prepare_hosts
from launcher.printer import JsonPrinter, ProgressPrinter
from launcher.profile import load_profile
from launcher.profile_overrides import overrides_from
from launcher.progressline import mute, paused
from launcher.remote import HostSession
from launcher.rundir import (
    DOWN_MARKER,
    RunDir,
    find_run,
    host_from_json,
    new_run_id,
    outside_state_dir,
    read_events,
    read_state,
)
from launcher.runrecord import write_record
from launcher.stopsignals import JobSignals, StoppedBeforeStart, StopSignals
from launcher.supervisor import Supervisor
from launcher.transport import make_host

#: how long `down` waits for a live launcher to finish the teardown it asked for
LAUNCHER_TEARDOWN_SECONDS = 120.0


def notice(msg: str) -> None:
    with paused():  # not into a progress line a host step is drawing
        print(f"distlaunch: {msg}", file=sys.stderr, flush=True)


def _progress(quiet: bool) -> Callable[[str], None]:
    def show(msg: str) -> None:
        if not quiet:
            print(f"... {msg}", file=sys.stderr, flush=True)

    return show


# -- up ---------------------------------------------------------------------------------------------


def run_up(args: argparse.Namespace) -> int:
    if args.json:
        mute()  # stderr belongs to whatever reads the event stream
    profile = load_profile(Path(args.profile), overrides_from(args))
    plan = build_plan(profile)
    for warning in exposure_warnings(plan):
        notice(f"warning: {warning}")
    run_id = args.run_id or new_run_id(profile.name)
    target = Path(args.run_dir).expanduser() if args.run_dir else runs_root() / run_id
    if (target / "state.json").exists():
        raise UserError(f"{target} already holds run {run_id}; give another --run-id or --run-dir")
    rundir = RunDir.create(run_id, Path(args.run_dir) if args.run_dir else None)
    tui = not (args.no_tui or args.json or args.detach)
    if tui and not (sys.stdin.isatty() and sys.stdout.isatty()):
        notice("not a terminal: showing progress lines instead of the dashboard (--no-tui)")
        tui = False
    progress = _progress(quiet=False)
    signals = JobSignals(run_id)
    with signals:
        pre: Preflight | None = None
        try:
            progress(f"run {run_id} ({rundir.path})")
            pre = prepare_hosts(plan, run_id, rundir.path / "hosts", notice, progress)
            write_record(rundir.path, profile, pre.versions)
            sup = Supervisor(plan, rundir, pre.sessions, pre.ports, detached=args.detach, on_notice=notice)
            signals.bind(sup)
        except StoppedBeforeStart as stop:
            if pre is not None:
                pre.close()
            rundir.append(ev.job_event(run_id, ev.JOB_FAILED, f"{stop} before any task started"))
            rundir.close()
            notice(f"{stop} before any task started; nothing runs on any host")
            return signals.exit_code or 1
        outcome = _follow_job(args, plan, rundir, pre, sup, signals, tui, progress)
    return report_outcome(sup, outcome, signals.exit_code)


def _follow_job(args: argparse.Namespace, plan: Plan, rundir: RunDir, pre: Preflight, sup: Supervisor,
                signals: JobSignals, tui: bool, progress: Callable[[str], None]) -> str | None:
    """Launch the job and show it until it ends, or is detached (`--detach`, SIGHUP)."""
    run_id = sup.run_id
    feed = sup.subscribe()
    notifying = follow_notify(sup)
    server = start_control_server(run_id, sup)
    try:
        progress(f"starting {len(plan.tasks)} tasks on {len(pre.sessions)} host(s)")
        try:
            sup.launch()
        except (HostError, OSError) as exc:
            raise UserError(f"could not start the job: {exc}; every started task was stopped") from None
        if args.detach or signals.hung_up:  # a hang-up during the preflight: the job starts detached
            sup.detach(origin="SIGHUP" if signals.hung_up else "")
            feed.close()
            return sup.wait()
        if tui:
            run_dashboard_for(sup, feed, plan, live=True, signals=signals)
        else:
            follow_lines(JsonPrinter() if args.json else ProgressPrinter(), feed)
        return sup.wait()
    finally:
        if server is not None:
            server.close()
        if notifying is not None:
            notifying.finish()
        pre.close()
        rundir.close()


def follow_lines(printer: ProgressPrinter | JsonPrinter, feed: Any) -> None:
    """Print the job's events until it ends. A reader of stdout that went away (`| head`, a
    `timeout` that signalled the whole pipeline) does not end the job's supervision: the rest is
    followed without printing."""
    events = feed.events()
    try:
        printer.consume(events)
    except OSError:  # EPIPE, or EIO from a terminal that hung up
        with contextlib.suppress(OSError):
            null = os.open(os.devnull, os.O_WRONLY)
            os.dup2(null, sys.stdout.fileno())
            os.close(null)
        for _ in events:
            pass


def follow_notify(sup: Supervisor, history_until: float | None = None) -> NotifyFollower | None:
    """Run the profile's [notify] command for this job's task failures and its end (None: no command)."""
    config = sup.profile.notify
    if not config.command:
        return None
    notifier = Notifier(config, run_id=sup.run_id, run_dir=sup.rundir.path, profile_name=sup.profile.name,
                        cwd=sup.profile.directory, on_warning=notice, history_until=history_until)
    return NotifyFollower(notifier, sup.subscribe().events())


def start_control_server(run_id: str, sup: Supervisor) -> controlsock.ControlServer | None:
    try:
        return controlsock.ControlServer(run_id, sup)
    except OSError as exc:
        notice(f"control socket unavailable ({exc}); `restart` from another terminal will not work")
        return None


def report_outcome(sup: Supervisor, outcome: str | None, stopped_code: int | None) -> int:
    """The launcher's exit code; ``stopped_code``: the stop signal's code (130, 143) if one came."""
    for host, left in sup.leftovers.items():
        notice(f"host {host}: {len(left)} process(es) of the run survived teardown: "
             + ", ".join(str(p.get("pid")) for p in left))
    if outcome == "detached":
        print(f"{sup.run_id} detached; follow it with `distlaunch attach {sup.run_id}`, "
              f"stop it with `distlaunch down {sup.run_id}`")
        return 0
    if outcome == ev.JOB_SUCCEEDED:
        return 0
    if stopped_code is not None:
        return stopped_code
    return 1


def run_dashboard_for(sup: Supervisor, feed: Any, plan: Plan, live: bool, signals: StopSignals | None = None) -> None:
    from tui.app import run_dashboard

    try:
        result = run_dashboard(feed, sup, title=plan.profile.name, strategy=plan.profile.strategy,
                               hosts_total=len(sup.sessions), live=live, run_dir=sup.rundir.path,
                               bell_on_end=plan.profile.notify.bell, signals=signals)
    except Exception:
        # nothing may be left running because the screen broke: stop the job, then report the crash
        sup.teardown("the dashboard crashed")
        sup.wait(120)
        raise
    if result.action == "teardown" and not result.teardown_requested:
        sup.teardown("torn down from the dashboard")
    elif result.action == "detach":
        sup.detach()


# -- down / restart: act on a run, with or without its launcher ------------------------------------------


def open_sessions(state: dict[str, Any], gone: list[str] | None = None
                  ) -> tuple[dict[str, HostSession], dict[str, str]]:
    """A session for every host of a run from its state.json, each connected if it answers;
    also host name -> why it did not (those sessions are there, unconnected). With ``gone``, a
    host that no longer exists (a Slurm allocation that ended, every step with it) is left out
    and its reason listed there instead."""
    sessions: dict[str, HostSession] = {}
    problems: dict[str, str] = {}

    def connect(item: tuple[str, dict[str, Any]]) -> None:
        name, info = item
        config = host_from_json(info["config"])
        host = make_host(config, on_notice=notice, run_id=str(state["run_id"]))
        sessions[name] = HostSession(config, host, str(state["run_id"]), info["base_dir"], info["python"],
                                     str(info.get("outputs_dir") or ""))
        try:
            host.connect()
        except HostGone as exc:
            if gone is None:
                problems[name] = str(exc)
            else:
                gone.append(str(exc))
                del sessions[name]
        except HostError as exc:
            problems[name] = str(exc)

    hosts = list(state.get("hosts", {}).items())
    if hosts:
        with ThreadPoolExecutor(max_workers=min(32, len(hosts))) as pool:
            list(pool.map(connect, hosts))
    return {name: sessions[name] for name, _ in hosts if name in sessions}, problems


def connect_sessions(state: dict[str, Any], gone: list[str] | None = None) -> dict[str, HostSession]:
    """Reconnect to every host of a run from its state.json; any host that does not answer is an
    error, but one that no longer exists when ``gone`` is given (see ``open_sessions``)."""
    sessions, problems = open_sessions(state, gone)
    if problems:
        for s in sessions.values():
            s.host.close()
        raise PreflightError(list(problems.values()))
    return sessions


def run_down(args: argparse.Namespace) -> int:
    path = find_run(args.run)
    state = read_state(path)
    run_id = str(state["run_id"])
    (path / DOWN_MARKER).touch()
    if controlsock.send(run_id, "teardown", reason="stopped by `distlaunch down`") is not None:
        print(f"asked the launcher of {run_id} to tear down")
        # its own teardown stops and sweeps every host: wait for it, then check behind it (on Slurm
        # the allocation may end with the launcher, and a check's steps with it)
        deadline = time.monotonic() + LAUNCHER_TEARDOWN_SECONDS
        while launcher_alive(read_state(path)) and time.monotonic() < deadline:
            time.sleep(0.2)
    gone: list[str] = []
    sessions = connect_sessions(state, gone)
    for why in gone:
        notice(why)
    grace = 10.0
    leftovers: dict[str, list[dict[str, Any]]] = {}

    keep_files = bool(getattr(args, "keep_host_files", False))
    not_removed: list[str] = []
    # a run dir the user put outside the state dir is theirs, with the local hosts' dirs in it:
    # down leaves it whole (`prune RUN` removes it); other hosts' run dirs are distlaunch's own
    outside = outside_state_dir(path)
    removed: list[str] = []

    def down(session: HostSession) -> None:
        slugs = [t["slug"] for t in state.get("tasks", {}).values() if t["host"] == session.name]
        try:
            session.stop_agents(slugs, grace, exit_agent=True)
            left = session.sweep(kill=True)
        except HostGone as exc:  # it went away under us (an allocation ending): nothing is left there
            notice(str(exc))
            return
        if left:
            leftovers[session.name] = left
        elif not keep_files and not (outside and Path(session.base_dir).is_relative_to(path)):
            try:  # only once nothing of the run runs there; outputs are never touched
                session.remove_run_dir()
                removed.append(session.name)
            except HostError as exc:
                not_removed.append(str(exc))

    try:
        with ThreadPoolExecutor(max_workers=max(1, len(sessions))) as pool:
            list(pool.map(down, sessions.values()))
    finally:
        for s in sessions.values():
            s.host.end_run()
    if leftovers:
        for host, left in leftovers.items():
            notice(f"host {host}: still running after down: "
                 + ", ".join(f"{p.get('pid')} ({p.get('cmdline', '')[:60]})" for p in left))
        return 1
    for problem in not_removed:
        notice(problem)
    _record_stopped_by_down(path)
    kept = "; host run dirs kept" if keep_files else ("" if not_removed or not removed else "; host run dirs removed")
    if outside:
        kept += f"; {path} kept: outside the state dir (remove it yourself or `distlaunch prune {run_id}`)"
    print(f"{run_id}: stopped on {len(sessions)} host(s); no process of the run is left{kept}")
    return 0


def _record_stopped_by_down(path: Path) -> None:
    """A run no launcher follows (detached or lost) ends with its `down`: the job event and
    state.json say why, so that `runs` shows it ended and `prune` may take it."""
    state = read_state(path)
    if launcher_alive(state) or state.get("job_state") in (ev.JOB_SUCCEEDED, ev.JOB_FAILED):
        return  # a launcher recorded its own end
    reason = "stopped by `distlaunch down`"
    rundir = RunDir.open(path)
    try:
        rundir.append(ev.job_event(str(state["run_id"]), ev.JOB_FAILED, reason))
        rundir.write_state({**state, "job_state": ev.JOB_FAILED, "job_reason": reason, "detached": False})
    finally:
        rundir.close()


def _require_task(state: dict[str, Any], task: str) -> None:
    if task not in state.get("tasks", {}):
        raise UserError(f"run {state['run_id']} has no task {task!r}; its tasks: " + ", ".join(state.get("tasks", {})))


def run_restart(args: argparse.Namespace) -> int:
    path = find_run(args.run)
    state = read_state(path)
    _require_task(state, args.task)
    answer = controlsock.send(str(state["run_id"]), "restart", args.task)
    if answer is None:
        raise UserError(f"run {state['run_id']} has no live launcher; `distlaunch attach {state['run_id']}` "
                        "first, then restart from there")
    if not answer.get("ok"):
        raise UserError(f"restart refused: {answer.get('error')}")
    print(f"restart of {args.task} requested; watch it with `distlaunch status {state['run_id']}`")
    return 0


# -- status / logs ------------------------------------------------------------------------------------


def summarize(path: Path) -> dict[str, Any]:
    """A run's current picture: its events folded by the same JobView the dashboard uses,
    completed from state.json (addresses, ports, the last pid of a finished task).

    ``steps_per_s`` is each task's rate over the window ending now (this call's clock, which the
    launcher's event times share): a live launcher writes each metric to events.jsonl as it comes,
    so a task whose step stopped moving reads 0. Without a live launcher no one records the steps
    any more, and the rate is null, as for a task not running."""
    state = read_state(path)
    view = JobView()
    for event in read_events(path):
        view.apply(event)
    alive = launcher_alive(state)
    now = view.rate_clock(time.time())
    tasks: dict[str, dict[str, Any]] = {}
    for task_id, info in state.get("tasks", {}).items():
        seen = view.tasks.get(task_id)
        tasks[task_id] = {
            "host": info["host"], "address": info.get("address"), "port": info.get("port"),
            "state": seen.state if seen else info.get("state"),
            "pid": (seen.pid if seen else None) or info.get("pid"),
            "restarts": seen.restarts if seen else info.get("restarts", 0),
            "step": seen.step if seen else None, "loss": seen.loss if seen else None,
            "nonfinite_loss": seen.nonfinite_loss if seen else None,
            "steps_per_s": seen.steps_per_s(now) if seen and alive else None,
            "exit_code": seen.exit_code if seen else None, "reason": seen.reason if seen else "",
            "cause": seen.cause if seen else "",
            "conditions": dict(seen.conditions) if seen else {}}
    job = ({"state": view.state, "reason": view.reason, "root_cause": view.failure_cause} if view.events_applied
           else {"state": state.get("job_state"), "reason": state.get("job_reason", ""), "root_cause": ""})
    return {"run": state["run_id"], "dir": str(path), "profile": state.get("profile"),
            "name": state.get("name"), "strategy": state.get("strategy"), "job": job,
            "detached": state.get("detached", False), "launcher_pid": state.get("launcher_pid"),
            "launcher_alive": alive,
            "tasks": tasks, "lost_events": view.lost_events}


def launcher_alive(state: dict[str, Any]) -> bool:
    """Is the run's launcher still following it (its process exists and the run has not ended)?"""
    pid = state.get("launcher_pid")
    return isinstance(pid, int) and pid_alive(pid) and state.get("outcome") is None


def run_status(args: argparse.Namespace) -> int:
    summary = summarize(find_run(args.run))
    if args.json:
        print(json.dumps(summary, indent=2))
        return 0
    job = summary["job"]
    who = "launcher attached" if summary["launcher_alive"] else ("detached" if summary["detached"] else "no launcher")
    print(f"run {summary['run']}  ({summary['name']}, {summary['strategy']}, {who})")
    print(f"job {job['state']}" + (f": {job['reason']}" if job.get("reason") else ""))
    if job.get("root_cause"):
        print(f"root cause: {job['root_cause']}")
    if summary["detached"] and not summary["launcher_alive"]:
        print(f"(detached: task states as last seen by a launcher; `distlaunch attach {summary['run']}` for live)")
    rows = [("TASK", "HOST", "ADDRESS", "STATE", "PID", "RESTARTS", "STEP", "LOSS")]
    for task_id, t in summary["tasks"].items():
        loss = t.get("nonfinite_loss") or (f"{t['loss']:.4f}" if isinstance(t["loss"], float) else "-")
        rows.append((task_id, t["host"], f"{t['address']}:{t['port']}", str(t["state"]),
                     str(t["pid"] or "-"), str(t["restarts"]), str(t["step"] if t["step"] is not None else "-"),
                     loss))
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    for r in rows:
        print("  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)).rstrip())
    for task_id, t in summary["tasks"].items():
        if t.get("cause"):
            print(f"{task_id} {'failed' if t['state'] == 'failed' else 'last failed'}: {t['cause']}")
        for condition, reason in t.get("conditions", {}).items():
            print(f"{task_id} {condition}: {reason}")
    for task_id, n in summary["lost_events"].items():
        print(f"warning: {task_id}: {n} event(s) never reached the launcher (gaps in its sequence numbers)")
    return 0


def run_logs(args: argparse.Namespace) -> int:
    path = find_run(args.run)
    state = read_state(path)
    _require_task(state, args.task)
    log = path / "logs" / f"{args.task.replace(':', '-')}.log"
    offset = 0
    while True:
        if log.exists():
            with log.open("rb") as fh:
                fh.seek(offset)
                chunk = fh.read()
            if chunk:
                sys.stdout.write(chunk.decode("utf-8", errors="replace"))
                sys.stdout.flush()
                offset += len(chunk)
        if not args.follow:
            return 0
        current = read_state(path)
        if not launcher_alive(current):
            return 0
        time.sleep(0.25)


# -- replay -------------------------------------------------------------------------------------------


def run_replay(args: argparse.Namespace) -> int:
    from tui.app import run_dashboard
    from tui.replay import ReplaySource

    path = find_run(args.run)
    state = read_state(path)
    source = ReplaySource(path / "events.jsonl", speed=args.speed)
    run_dashboard(source, None, title=str(state.get("name")), strategy=str(state.get("strategy")),
                  hosts_total=len(state.get("hosts", {})), live=False, run_dir=path)
    return 0


def run_attach(args: argparse.Namespace) -> int:
    from launcher.attach import attach_run

    return attach_run(find_run(args.run), tui=not args.no_tui)

