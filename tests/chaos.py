"""A chaos run: a ParameterServer job over three namespace hosts while seeded faults hit it.

The job (examples/ps_mnist.py: ps:0 on ``a``, worker:0 on ``b``, worker:1 and chief:0 on ``c``,
checkpointing to its host run dir so a restarted chief resumes) trains until a wall-clock
``--stop-at``. Meanwhile a schedule drawn from ``random.Random(seed)`` injects, one after another:

* ``kill_task``: SIGKILL of a task's process (the python whose environment has
  ``DISTLAUNCH_TASK`` and this run's ``DISTLAUNCH_RUN_ID``);
* ``kill_agent``: SIGKILL of a host agent (``agent.pyz serve`` of this run);
* ``kill_launcher``: SIGKILL of the job's supervisor (the process ``up`` or the last ``attach``
  forked), then ``distlaunch attach RUN --no-tui``, which forks a new one that adopts the run
  (retried while a host is cut: attach needs every host);
* ``cut``: a host's link down for 5-60 s (one cut at a time; other faults go on during it).

Kinds come in shuffled rounds (each round holds every kind once), so even a short run meets
each. The kinds, their order and the pauses come from ``Random(seed)``; which process or host a
fault hits is drawn from a second generator of the same seed, as the candidates depend on what
runs at that moment: the same seed gives the same schedule, not the same run. Every wait is bounded.

At the end (before the lab is removed) it judges the invariants: the job ended by its policy
within a bound; every event any agent wrote (the host run dirs' ``tasks/*/events.jsonl``, which
the job's end leaves in place) is in the launcher's events.jsonl exactly once by (task, seq);
no process of the run is left; every restart in the timeline says why.
"""

from __future__ import annotations

import contextlib
import json
import os
import random
import signal
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from launcher import events as ev
from launcher.agent.hostagent import AGENT_PROCESS_NAME
from launcher.events import Event
from launcher.telemetry.timeline import Timeline
from tests.integration.jobtools import REPO, pids_with_run_id, read_events, start_cli
from tests.netns import NetnsLab
from tests.profiles import build_profile, netns_hosts

FAULT_KINDS = ("kill_task", "kill_agent", "kill_launcher", "cut")

#: longer than the longest cut (60 s) plus an attach retried through it: tasks outlive every fault
ORPHAN_GRACE_SECONDS = 120
#: the chief reports a step every 50 steps, i.e. every few seconds even on a loaded machine
STALL_SECONDS = 45


@dataclass
class ChaosConfig:
    minutes: float = 10.0
    seed: int = 1
    gap_seconds: tuple[float, float] = (10.0, 30.0)
    """Pause between two faults, drawn uniformly."""
    cut_seconds: tuple[float, float] = (5.0, 60.0)
    kinds: tuple[str, ...] = FAULT_KINDS
    start_timeout: float = 240.0
    """Bound on the job's start (every task running) before the first fault."""
    end_timeout: float = 300.0
    """Bound on the job's end after the fault window (restarts under way, teardown)."""


@dataclass
class Fault:
    at: float
    kind: str
    target: str  # task id, host name or launcher pid
    detail: str = ""
    skipped: bool = False
    recovered: bool | None = None  # None: not judged (skipped)
    until: float = 0.0  # cuts: when the link came back


@dataclass
class ChaosReport:
    seed: int
    run_id: str
    command_outcome: str  # the job's end state, or "hung"
    end_reason: str
    faults: list[Fault]
    written: int
    received: int
    duplicates: list[tuple[str, int]]
    missing: list[tuple[str, int]]
    unexpected: list[tuple[str, int]]
    leftovers: list[int]
    restarts: int
    restarts_without_reason: list[str]
    lost_events: dict[str, int]
    attach_attempts: int
    steps: int | None
    duration: float
    launcher_logs: list[Path]

    def by_kind(self) -> dict[str, tuple[int, int, int]]:
        """kind -> (injected, recovered, skipped)."""
        out = {}
        for kind in FAULT_KINDS:
            done = [f for f in self.faults if f.kind == kind and not f.skipped]
            out[kind] = (len(done), sum(1 for f in done if f.recovered),
                         sum(1 for f in self.faults if f.kind == kind and f.skipped))
        return out

    def problems(self) -> list[str]:
        """The invariants that do not hold, in words (empty: all hold)."""
        found = []
        if self.command_outcome not in ev.JOB_ENDS:
            found.append(f"the job did not end within the bound ({self.command_outcome})")
        if self.duplicates:
            found.append(f"{len(self.duplicates)} agent event(s) received more than once: {self.duplicates[:5]}")
        if self.missing:
            found.append(f"{len(self.missing)} agent event(s) never reached the launcher: {self.missing[:5]}")
        if self.unexpected:
            found.append(f"{len(self.unexpected)} event(s) received that no agent file holds: {self.unexpected[:5]}")
        if self.leftovers:
            found.append(f"processes of the run left: {self.leftovers}")
        if self.restarts_without_reason:
            found.append(f"restarts without a reason: {self.restarts_without_reason[:5]}")
        unrecovered = [f for f in self.faults if f.recovered is False]
        if unrecovered and self.command_outcome == ev.JOB_SUCCEEDED:
            found.append("faults not recovered from in a job that succeeded: "
                         + ", ".join(f"{f.kind} {f.target}" for f in unrecovered))
        return found

    def lines(self) -> list[str]:
        out = [f"seed {self.seed}, run {self.run_id}, {self.duration / 60:.1f} min",
               f"job: {self.command_outcome}" + (f" ({self.end_reason})" if self.end_reason else "")
               + (f", global step {self.steps}" if self.steps is not None else "")]
        for kind, (done, recovered, skipped) in self.by_kind().items():
            out.append(f"  {kind:<14} injected {done:>3}, recovered {recovered:>3}"
                       + (f", skipped {skipped} (no target, or a cut already on)" if skipped else ""))
        total = [f for f in self.faults if not f.skipped]
        out.append(f"  {'all':<14} injected {len(total):>3}, recovered {sum(1 for f in total if f.recovered):>3}")
        out.append(f"restarts in the timeline: {self.restarts}, without a reason: {len(self.restarts_without_reason)}")
        out.append(f"agent events written {self.written}, received {self.received}, "
                   f"duplicates {len(self.duplicates)}, missing {len(self.missing)}, "
                   f"unexpected {len(self.unexpected)}; gaps the launcher counted: {sum(self.lost_events.values())}")
        out.append(f"attach runs: {self.attach_attempts}; processes of the run left: {len(self.leftovers)}")
        return out


def chaos_profile(path: Path, lab: NetnsLab, stop_at: float) -> Path:
    """restart on-failure with budgets no chaos run spends; min_uptime 1 s: a chief that fails fast
    because its ps is cut off is a partition, not a crash loop (TF's import alone takes longer).
    The chief restarts on a stall: after a cut of its host, TF's ClusterCoordinator can wait in
    ``join()`` for ever (seen in a run: no step, 0% CPU, minutes after the link came back), and only
    the stall watchdog turns that into a restart from the checkpoint."""
    command = (f"{{python}} examples/ps_mnist.py --steps 100000000 --log-every 50 --checkpoint-every 200 "
               f"--stop-at {stop_at:.0f} --checkpoint-dir {{run_dir}}/ckpt")
    return build_profile(path, name="chaos", strategy="parameter_server", orphan_grace=ORPHAN_GRACE_SECONDS,
                         top="backoff_limit = 1000\nsample_interval = 2.0", command=command,
                         defaults={"python": sys.executable, "min_uptime": 1}, workdir=REPO,
                         env={"TF_CPP_MIN_LOG_LEVEL": "2"}, grace=5, restart="on-failure", max_restarts=500,
                         hosts=netns_hosts(lab),
                         roles={"chief": {"hosts": ["c"], "stall_seconds": STALL_SECONDS, "on_stall": "restart"},
                                "ps": {"hosts": ["a"]}, "worker": {"count": 2, "hosts": ["b", "c"]}})


def _environ(pid: int) -> dict[str, str]:
    try:
        raw = Path(f"/proc/{pid}/environ").read_bytes()
    except OSError:
        return {}
    return dict(item.split("=", 1) for item in raw.decode(errors="replace").split("\0") if "=" in item)


def _cmdline(pid: int) -> list[str]:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().decode(errors="replace").split("\0")
    except OSError:
        return []


def task_processes(run_id: str) -> dict[str, list[int]]:
    """task id -> the pids of its training process (the python running ps_mnist.py)."""
    out: dict[str, list[int]] = {}
    for pid in pids_with_run_id(run_id):
        task = _environ(pid).get("DISTLAUNCH_TASK")
        if task and any(arg.endswith("ps_mnist.py") for arg in _cmdline(pid)):
            out.setdefault(task, []).append(pid)
    return out


def host_agents(lab: NetnsLab, run_id: str) -> dict[str, int]:
    """host name -> pid of the run's host agent there."""
    out = {}
    for pid in pids_with_run_id(run_id):
        # by its process name: the agent forked by a `follow` or `start` verb keeps that verb's
        # command line (only a Slurm agent runs as `agent.pyz serve`)
        try:
            name = Path(f"/proc/{pid}/comm").read_text().strip()
        except OSError:
            continue
        if name == AGENT_PROCESS_NAME:
            host = lab.host_of_pid(pid)
            if host is not None:
                out[host] = pid
    return out


def _alive(pid: int) -> bool:
    """The process exists and is no zombie."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat[stat.rindex(")") + 2:].split()[0] != "Z"


def _kill(pid: int) -> bool:
    try:
        os.kill(pid, signal.SIGKILL)
    except ProcessLookupError:
        return False
    return True


class ChaosRun:
    """One chaos run over ``lab``; ``run()`` returns its report. ``log`` gets one line per fault."""

    def __init__(self, lab: NetnsLab, workdir: Path, config: ChaosConfig,
                 log: Callable[[str], None] = print) -> None:
        self.lab = lab
        self.workdir = workdir
        self.config = config
        self.log = log
        self.schedule = random.Random(config.seed)  # kinds, order, pauses, cut lengths
        self.rng = random.Random(config.seed + 1)  # targets
        self.run_id = f"chaos-{config.seed}-{lab.tag}"
        self.run_dir = workdir / "run"
        self.faults: list[Fault] = []
        self.launcher: subprocess.Popen[bytes] | None = None
        self.launcher_logs: list[Path] = []
        self.attach_attempts = 0
        self.cut: Fault | None = None
        self.started = time.time()

    # -- the launcher ------------------------------------------------------------------------------

    def _start_launcher(self, *args: str) -> None:
        log = self.workdir / f"launcher-{len(self.launcher_logs)}.log"
        self.launcher_logs.append(log)
        self.launcher = start_cli(*args, log=log)

    def _state(self) -> dict[str, Any]:
        with contextlib.suppress(OSError, ValueError):
            state: dict[str, Any] = json.loads((self.run_dir / "state.json").read_text())
            return state
        return {}

    def _job_ended(self) -> bool:
        return self._state().get("outcome") in ev.JOB_ENDS

    def _supervisor(self) -> int | None:
        pid = self._state().get("supervisor_pid")
        return pid if isinstance(pid, int) and _alive(pid) else None

    def _attach(self, deadline: float, gone: int | None = None) -> bool:
        """``distlaunch attach`` until a supervisor follows the run again: a live one, or the new
        one attach started (it refuses while a host is unreachable). ``gone``: the killed one."""
        while time.time() < deadline:
            self.attach_attempts += 1
            self._start_launcher("attach", str(self.run_dir), "--no-tui")
            assert self.launcher is not None
            while time.time() < deadline and self.launcher.poll() is None:
                if self._supervisor() not in (None, gone):
                    return True
                self._tick()
                time.sleep(0.5)
            if self.launcher.poll() is None:
                break
            if self._job_ended():
                return True
            said = self.launcher_logs[-1].read_text(errors="replace").strip().splitlines()
            self.log(f"    attach exited {self.launcher.returncode}: {said[-1][:160] if said else ''}")
            self._sleep(3.0)
        return False

    # -- faults ------------------------------------------------------------------------------------

    def _inject(self, kind: str) -> Fault:
        now = time.time()
        if kind == "kill_task":
            procs = task_processes(self.run_id)
            if not procs:
                return Fault(now, kind, "-", "no task process running", skipped=True)
            task = self.rng.choice(sorted(procs))
            killed = [pid for pid in procs[task] if _kill(pid)]
            return Fault(now, kind, task, f"pid {','.join(map(str, killed))}", skipped=not killed)
        if kind == "kill_agent":
            agents = host_agents(self.lab, self.run_id)
            if not agents:
                return Fault(now, kind, "-", "no host agent running", skipped=True)
            host = self.rng.choice(sorted(agents))
            return Fault(now, kind, host, f"pid {agents[host]}", skipped=not _kill(agents[host]))
        if kind == "kill_launcher":
            assert self.launcher is not None
            pid = self._supervisor()
            if pid is None:
                return Fault(now, kind, "-", "no supervisor running", skipped=True)
            _kill(pid)
            with contextlib.suppress(subprocess.TimeoutExpired):
                self.launcher.wait(timeout=10)  # its client ends with it
            fault = Fault(now, kind, str(pid), f"pid {pid}")
            fault.recovered = self._attach(time.time() + ORPHAN_GRACE_SECONDS - 10, gone=pid)
            if self.launcher is not None:
                fault.detail += f", attached as pid {self.launcher.pid}"
            return fault
        # a cut: one at a time
        host = self.rng.choice(sorted(self.lab.hosts))
        duration = self.schedule.uniform(*self.config.cut_seconds)
        if self.cut is not None:
            return Fault(now, kind, host, "a cut is already on", skipped=True)
        self.lab.cut(host)
        fault = Fault(now, kind, host, f"{duration:.0f} s", until=now + duration)
        self.cut = fault
        return fault

    def _tick(self) -> None:
        """Housekeeping between waits: restore a cut whose time is up."""
        if self.cut is not None and time.time() >= self.cut.until:
            self.lab.restore(self.cut.target)
            self.cut.until = time.time()
            self.cut = None

    def _sleep(self, seconds: float) -> None:
        end = time.time() + seconds
        while time.time() < end:
            self._tick()
            time.sleep(min(0.5, max(0.0, end - time.time())))

    def _launcher_ended(self) -> bool:
        """The followed client exited on its own: the job ended, or its supervisor died (then
        attach must be redone)."""
        return self.launcher is not None and self.launcher.poll() is not None

    # -- the run ------------------------------------------------------------------------------------

    def run(self) -> ChaosReport:
        cfg = self.config
        self.started = time.time()
        window_end = self.started + cfg.minutes * 60
        stop_at = window_end + 20  # the last fault has a moment to be recovered from before the end
        profile = chaos_profile(self.workdir / "chaos.toml", self.lab, stop_at)
        self._start_launcher("up", str(profile), "--no-tui", "--run-dir", str(self.run_dir),
                             "--run-id", self.run_id)
        hung = False
        try:
            self._wait_all_running(cfg.start_timeout)
            round_: list[str] = []
            while True:
                if not round_:
                    round_ = list(cfg.kinds)
                    self.schedule.shuffle(round_)
                kind = round_.pop()
                self._sleep(self.schedule.uniform(*cfg.gap_seconds))
                if time.time() >= window_end or self._job_ended():
                    break
                # the launcher exited by itself: the job ended, or an attach must be redone
                if self._launcher_ended() and (self._job_ended() or not self._attach(time.time() + 60)):
                    break
                fault = self._inject(kind)
                self.faults.append(fault)
                self.log(f"+{fault.at - self.started:6.1f}s {kind:<13} {fault.target:<9} {fault.detail}"
                         + (" (skipped)" if fault.skipped else ""))
        finally:
            if self.cut is not None:
                self.lab.restore(self.cut.target)
                self.cut.until = time.time()
                self.cut = None
        # the fault window is over: make sure a launcher follows, then let the job end
        if not self._job_ended() and self._launcher_ended():
            self._attach(time.time() + 90)
        assert self.launcher is not None
        try:
            self.launcher.wait(timeout=max(30.0, stop_at - time.time()) + cfg.end_timeout)
        except subprocess.TimeoutExpired:
            hung = True
            self.launcher.kill()
        return self._judge(hung)

    def _wait_all_running(self, timeout: float) -> None:
        deadline = time.time() + timeout
        while time.time() < deadline:
            running = {e["task"] for e in read_events(self.run_dir) if e["kind"] == "state" and e["state"] == "running"}
            if len(running) == 4:
                return
            if self._launcher_ended():
                raise RuntimeError("the launcher ended before the job ran: "
                                   + self.launcher_logs[-1].read_text(errors="replace")[-2000:])
            time.sleep(0.5)
        raise RuntimeError(f"not every task ran within {timeout:.0f}s")

    # -- the verdict ------------------------------------------------------------------------------------

    def agent_events(self) -> list[dict[str, Any]]:
        """Every event the agents wrote, from each host run dir's task files."""
        out = []
        for name in self.lab.hosts:
            for path in sorted((self.lab.run_dir(name, self.run_id) / "tasks").glob("*/events.jsonl")):
                for line in path.read_text(errors="replace").splitlines():
                    with contextlib.suppress(ValueError):
                        out.append(json.loads(line))
        return out

    def _judge(self, hung: bool) -> ChaosReport:
        events = read_events(self.run_dir)
        state = self._state()
        ends = [e for e in events if e["kind"] == "job" and e.get("state") in ev.JOB_ENDS]
        outcome = "hung" if hung else str(state.get("outcome") or (ends[-1]["state"] if ends else "no end"))
        written = Counter((e["task"], e["seq"]) for e in self.agent_events() if isinstance(e.get("seq"), int))
        received = Counter((e["task"], e["seq"]) for e in events
                           if e.get("task") and isinstance(e.get("seq"), int))
        leftovers = self._leftovers()
        timeline = Timeline(limit=None)
        for e in events:
            timeline.add(Event.from_json(json.dumps(e)))
        restarts = [e for e in timeline.entries if e.kind == ev.STATE and e.text.startswith(ev.RESTARTING)]
        restart_events = [e for e in events if e["kind"] == "state" and e["state"] == ev.RESTARTING]
        no_reason = [f"{e['task']} restart {e.get('restarts')}" for e in restart_events if not e.get("reason")]
        no_reason += [e.text for e in restarts if ": " not in e.text]
        no_reason += [f"job restarting at {e['ts']:.0f}" for e in events
                      if e["kind"] == "job" and e.get("state") == ev.JOB_RESTARTING and not e.get("reason")]
        self._judge_recovery(events)
        steps = [e["step"] for e in events if e["kind"] == "metric" and isinstance(e.get("step"), int)]
        return ChaosReport(
            seed=self.config.seed, run_id=self.run_id, command_outcome=outcome,
            end_reason=str(ends[-1].get("reason") or "") if ends else "", faults=self.faults,
            written=sum(written.values()), received=sum(received.values()),
            duplicates=sorted(k for k, n in received.items() if n > 1),
            missing=sorted(set(written) - set(received)), unexpected=sorted(set(received) - set(written)),
            leftovers=leftovers, restarts=len(restart_events), restarts_without_reason=no_reason,
            lost_events=dict(state.get("lost_events") or {}), attach_attempts=self.attach_attempts,
            steps=max(steps) if steps else None, duration=time.time() - self.started,
            launcher_logs=self.launcher_logs)

    def _leftovers(self) -> list[int]:
        """Processes of the run still here a little after the launcher ended (its sweep just ran)."""
        deadline = time.time() + 15
        left = pids_with_run_id(self.run_id)
        while left and time.time() < deadline:
            time.sleep(0.5)
            left = pids_with_run_id(self.run_id)
        return left

    def _judge_recovery(self, events: list[dict[str, Any]]) -> None:
        """kill_task: the task ran again with another pid (or the job ended first); kill_agent: an
        agent adopted that host's tasks (or started anew) after it; cut: events its tasks' agent
        wrote after the link came back were received (a launcher killed during the cut never says
        "up"; the one attached after it simply follows). kill_launcher was judged when attach took over."""
        end_ts = max((e["ts"] for e in events if e["kind"] == "job"
                      and e.get("state") in ev.JOB_ENDS), default=float("inf"))
        for fault in self.faults:
            if fault.skipped or fault.kind == "kill_launcher":
                continue
            if fault.kind == "kill_task":
                killed = {int(p) for p in fault.detail.removeprefix("pid ").split(",") if p}
                fault.recovered = end_ts < fault.at + 1 or any(
                    e["kind"] == "state" and e["task"] == fault.target and e["state"] == ev.RUNNING
                    and e.get("pid") not in killed and e["ts"] > fault.at for e in events)
            elif fault.kind == "kill_agent":
                host_tasks = {e["task"] for e in events if e["kind"] == "state" and e.get("host") == fault.target}
                fault.recovered = end_ts < fault.at + 1 or any(
                    e["ts"] > fault.at and e.get("task") in host_tasks and e.get("seq") is not None
                    and ((e["kind"] == "log" and "adopted this task" in str(e.get("line")))
                         or (e["kind"] == "state" and e["state"] in (ev.STARTING, ev.RUNNING))) for e in events)
            else:  # events its agent wrote after the link came back reached the launcher (samples: every 2 s)
                host_tasks = {e["task"] for e in events if e["kind"] == "state" and e.get("host") == fault.target}
                fault.recovered = end_ts < fault.until + 10 or any(
                    e.get("task") in host_tasks and e.get("seq") is not None and e["ts"] > fault.until
                    for e in events)
