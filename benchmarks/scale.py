"""Where does one launcher stop? ``distlaunch up``/``down`` over N sshd hosts x M light tasks.

Hosts are private sshds on loopback ports, each with its own ``$HOME`` (``common.sshd_hosts``).
Each task is a Python printing a step and loss line (``@distlaunch`` metric, ``t_emit`` in its
values) ``--rate`` times a second, no TensorFlow. One run, after a warm-up ``up`` of one task per
host (the agent zipapp's first upload, the page cache), measures with the real CLI:

* ``launch_s``: from starting ``distlaunch up --json`` until its stream has shown every task
  ``running`` (an agent stamps it when it spawned the task: the command may still be booting);
  ``pdsh_per_host_s``: ``pdsh -R ssh`` over all hosts at once (one connection per host, fan-out
  N), each host starting its M tasks (the same command) detached and printing their pids, the
  median of ``--pdsh-repeats`` in the same run; ``launch_vs_pdsh`` their ratio. ``launch_s``
  includes what pdsh has no part of: the launcher's start, the preflight, the agent's upload;
* once every task runs and a settle time has passed, every task prints ``--seconds`` x ``--rate``
  lines, all from one common start: ``event_p50/p99/max_ms`` from a line's ``t_emit`` to its
  arrival on ``up``'s stdout here (one clock, one machine); ``events_lost``: the (task, step)
  pairs (the step is each emitter's sequence number) that had not arrived 30 s after the last
  was due;
* ``launcher_cpu_percent`` (the ``up`` process and its children, the supervisor among them, over
  the emission window, % of one core), ``launcher_rss_mib`` (the peak RSS, VmHWM, of ``up`` and of
  the supervisor it forked, added; ``client_rss_mib`` ``up``'s alone) and their open file
  descriptors and threads; the latency above includes the supervisor-to-client hop;
* what carries to real hosts, over the same window: ``launcher_cpu_ms_per_event`` (that CPU over
  the events that arrived in it), ``agent_cpu_percent`` (one host agent, the processes named
  ``distlaunch-host``, their mean, % of one core), ``agent_cpu_ms_per_event`` (all agents' CPU
  over those events: each event passes one agent) and ``agent_cpu_percent_per_task``; both
  per-event figures include the fixed costs of the window (1 Hz samples, heartbeats, pings);
  ``event_bytes_mean`` is a metric event's JSON line. The latency is this machine's: at 32 hosts
  its 2 cores also run every task, agent and sshd;
* ``teardown_s``: from starting ``distlaunch down RUN_DIR`` until it returned (its own start,
  the launcher's teardown, then its check behind it: a sweep per host); within it
  ``nothing_left_s`` (no process of the run on any host) and ``up_exited_s``;
  ``left_processes``: processes of the run still alive when ``down`` returned.

``--json`` prints, as the last line, one JSON object with these figures (and the load average
before the run). Issue 32's targets: 4x16 launch <= 1.3x pdsh per host; 32x8 <= 1.5x, p99 <
100 ms, 0 lost, teardown < 5 s, nothing left.

Run: ``.venv/bin/python benchmarks/scale.py --hosts 32 --tasks-per-host 8 [--rate 10]
[--seconds 20] [--json]``
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

from common import (
    EMITTER_START,
    PYTHON,
    REPO,
    BenchHost,
    machine,
    percentile,
    ssh_config,
    ssh_profile,
    sshd_hosts,
    wait_for,
)
from launch_fanout import kill_pids, pdsh

EMITTER = EMITTER_START + '''\
for i in range(1, count + 1):
    delay = start + i * period - time.time()
    if delay > 0:
        time.sleep(delay)
    line = {"kind": "metric", "step": i, "loss": 1.0 / i, "values": {"t_emit": time.time()}}
    out.write("@distlaunch " + json.dumps(line) + "\\n")
    out.flush()
time.sleep(3600)
'''

SETTLE_SECONDS = 3.0


def proc_cpu_seconds(pid: int) -> float:
    """CPU of ``pid`` and of its children that ended and were waited for (utime..cstime)."""
    raw = Path(f"/proc/{pid}/stat").read_text()
    fields = raw[raw.rfind(")") + 2:].split()
    return sum(int(f) for f in fields[11:15]) / os.sysconf("SC_CLK_TCK")


def launcher_pids(up_pid: int, run_dir: Path) -> list[int]:
    """`up` and, where it is another process, the run's supervisor (state.json's supervisor_pid)."""
    pids = [up_pid]
    try:
        state = json.loads((run_dir / "state.json").read_text())
    except (OSError, ValueError):
        return pids
    supervisor = state.get("supervisor_pid")
    if isinstance(supervisor, int) and supervisor != up_pid and Path(f"/proc/{supervisor}").exists():
        pids.append(supervisor)
    return pids


def children_cpu_seconds(pid: int) -> float:
    """CPU of the live descendants of ``pid`` (ssh clients of the openssh transport, verbs)."""
    total = 0.0
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit() or int(entry.name) == pid:
            continue
        try:
            raw = (entry / "stat").read_text()
        except OSError:
            continue
        fields = raw[raw.rfind(")") + 2:].split()
        if int(fields[1]) == pid:
            total += proc_cpu_seconds(int(entry.name)) + children_cpu_seconds(int(entry.name))
    return total


def busy_cpu_seconds() -> float:
    """CPU seconds this machine spent not idle, all cores (/proc/stat)."""
    fields = [int(x) for x in Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:]]
    return (sum(fields) - fields[3] - fields[4]) / os.sysconf("SC_CLK_TCK")


def agent_pids(run_id: str) -> list[int]:
    """The run's host agents: its processes named ``distlaunch-host`` (hostagent.AGENT_PROCESS_NAME)."""
    found = []
    for pid in pids_of_run(run_id):
        try:
            if Path(f"/proc/{pid}/comm").read_text().strip() == "distlaunch-host":
                found.append(pid)
        except OSError:
            continue
    return found


def cpu_seconds_of(pids: list[int]) -> float:
    """CPU of ``pids`` (each with its waited-for children), those still there."""
    total = 0.0
    for pid in pids:
        try:
            total += proc_cpu_seconds(pid)
        except (OSError, IndexError):
            continue
    return total


def status_field(pid: int, name: str) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith(name + ":"):
            return int(line.split()[1])
    return 0


def pids_of_run(run_id: str) -> list[int]:
    needle = f"DISTLAUNCH_RUN_ID={run_id}".encode()
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                if needle in (entry / "environ").read_bytes().split(b"\0"):
                    found.append(int(entry.name))
            except OSError:
                continue
    return found


class Stream:
    """``up --json``'s stdout, read on a thread: when each task ran, every metric's arrival."""

    def __init__(self, proc: subprocess.Popen[bytes], tasks: int) -> None:
        self.tasks = tasks
        self.running: dict[str, float] = {}
        self.all_running = threading.Event()
        self.failed = ""
        self.metrics: dict[tuple[str, int], float] = {}  # (task, step) -> latency s
        self.duplicates = 0
        self.metric_bytes = 0  # of the metric events' JSON lines (what one event costs on a link)
        self.stamped_starting: dict[str, float] = {}  # the agents' own ts of each task's states
        self.stamped_running: dict[str, float] = {}
        self.ended_at = 0.0  # arrival of the job's end event
        self.first_event = 0.0  # arrival of the stream's first event (job Created: preflight done)
        self._thread = threading.Thread(target=self._read, args=(proc,), daemon=True)
        self._thread.start()

    def _read(self, proc: subprocess.Popen[bytes]) -> None:
        assert proc.stdout is not None
        for raw in proc.stdout:
            now = time.time()
            try:
                event = json.loads(raw)
            except ValueError:
                continue
            kind = event.get("kind")
            self.first_event = self.first_event or now
            if kind == "metric":
                t_emit = (event.get("values") or {}).get("t_emit")
                self.metric_bytes += len(raw)
                if t_emit is not None and event.get("step") is not None:
                    key = (str(event["task"]), int(event["step"]))
                    if key in self.metrics:
                        self.duplicates += 1
                    self.metrics[key] = now - float(t_emit)
            elif kind == "state" and event.get("state") == "starting":
                self.stamped_starting.setdefault(str(event["task"]), float(event["ts"]))
            elif kind == "state" and event.get("state") == "running":
                self.stamped_running.setdefault(str(event["task"]), float(event["ts"]))
                self.running.setdefault(str(event["task"]), now)
                if len(self.running) == self.tasks:
                    self.all_running.set()
            elif kind == "job" and event.get("state") in ("Failed", "Succeeded"):
                self.ended_at = now
                if not self.all_running.is_set():
                    self.failed = str(event.get("reason"))
                    self.all_running.set()

    def join(self, timeout: float) -> None:
        self._thread.join(timeout)


def time_pdsh_per_host(hosts: list[BenchHost], per_host: int, cfg: Path, task: str) -> float:
    """``pdsh -R ssh`` over the hosts, each starting its ``per_host`` tasks (the same command as
    distlaunch's tasks, waiting for a go file that never comes) detached and printing their pids."""
    one = f"setsid {task} </dev/null >/dev/null 2>&1 & echo $!"
    t0 = time.time()
    out = pdsh([h.name for h in hosts], f"for i in $(seq {per_host}); do {one}; done", cfg, fanout=len(hosts))
    elapsed = time.time() - t0
    kill_pids(out)
    return elapsed


def watch_teardown(proc: subprocess.Popen[bytes], run_id: str, t0: float, marks: dict[str, float]) -> None:
    """When ``up`` exited and when no process of the run was left anywhere, seconds after ``t0``.
    The run's processes are found once (a scan of every environment costs CPU the teardown
    needs), then only those are watched; a full scan confirms the end (a process the teardown
    itself started, a sweep, is waited for too)."""
    deadline = time.monotonic() + 120
    watched = set(pids_of_run(run_id))
    while time.monotonic() < deadline and len(marks) < 2:
        if "up_exited" not in marks and proc.poll() is not None:
            marks["up_exited"] = time.time() - t0
        if "nothing_left" not in marks:
            watched = {pid for pid in watched if Path(f"/proc/{pid}").exists() and not zombie(pid)}
            if not watched:
                watched = set(pids_of_run(run_id))
                if not watched:
                    marks["nothing_left"] = time.time() - t0
        time.sleep(0.02)


def zombie(pid: int) -> bool:
    try:
        raw = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return True
    return raw[raw.rfind(")") + 2] == "Z"


def start_up(profile: Path, run_dir: Path, run_id: str) -> subprocess.Popen[bytes]:
    cmd = [PYTHON, "-m", "launcher.cli", "up", str(profile), "--json", "--run-dir", str(run_dir),
           "--run-id", run_id]
    return subprocess.Popen(cmd, cwd=REPO, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                            stderr=subprocess.DEVNULL)


def down(run_dir: Path) -> None:
    subprocess.run([PYTHON, "-m", "launcher.cli", "down", str(run_dir)], cwd=REPO, timeout=300,
                   stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


def warm_up(hosts: list[BenchHost], work: Path) -> None:
    """One task per host: the zipapp's first build and upload, sshd and page caches."""
    profile = ssh_profile(work / "warm.toml", "scale-warm", hosts, {"worker": {"count": len(hosts)}})
    run_dir, run_id = work / "warm", f"scale-warm-{os.getpid()}"
    proc = start_up(profile, run_dir, run_id)
    stream = Stream(proc, len(hosts))
    try:
        if not stream.all_running.wait(300) or stream.failed:
            raise RuntimeError(f"warm-up: {len(stream.running)}/{len(hosts)} running {stream.failed}")
    finally:
        down(run_dir)
        proc.wait(60)


def emitter_args(work: Path, count: int, rate: float, go: Path) -> str:
    emitter = work / "emit.py"
    emitter.write_text(EMITTER)
    return f"{emitter} {count} {1.0 / rate} {go}"


def measure(hosts: list[BenchHost], per_host: int, rate: float, seconds: float, work: Path) -> dict[str, Any]:
    tasks = len(hosts) * per_host
    count = int(rate * seconds)
    profile = ssh_profile(work / "scale.toml", "scale", hosts, {"worker": {"count": tasks}},
                          command="{python} " + emitter_args(work, count, rate, work / "go"))
    go = work / "go"
    run_dir, run_id = work / "run", f"scale-{os.getpid()}"
    load = os.getloadavg()[0]
    t0 = time.time()
    proc = start_up(profile, run_dir, run_id)
    stream = Stream(proc, tasks)
    figures: dict[str, Any] = {"hosts": len(hosts), "tasks": tasks, "tasks_per_host": per_host,
                               "rate_per_task": rate, "seconds": seconds, "load_avg_1m": round(load, 2)}
    try:
        if not stream.all_running.wait(600) or stream.failed:
            raise RuntimeError(f"only {len(stream.running)}/{tasks} tasks running {stream.failed}")
        figures["launch_s"] = max(stream.running.values()) - t0
        figures["preflight_s"] = stream.first_event - t0  # start, connect, checks, until job Created
        figures["first_running_s"] = min(stream.running.values()) - t0
        # by the agents' stamps: the first `starting` to the last `running`, all hosts
        figures["agents_start_span_s"] = max(stream.stamped_running.values()) - min(stream.stamped_starting.values())
        figures["last_running_stamp_s"] = max(stream.stamped_running.values()) - t0
        start_at = time.time() + SETTLE_SECONDS
        (work / "go.tmp").write_text(f"{start_at:.6f}")
        (work / "go.tmp").rename(go)
        agents = agent_pids(run_id)  # found before the window: a scan of every environment costs CPU
        time.sleep(max(0.0, start_at - time.time()))
        cpu0, wall0 = proc_cpu_seconds(proc.pid) + children_cpu_seconds(proc.pid), time.time()
        agents_cpu0, events0 = cpu_seconds_of(agents), len(stream.metrics)
        expected = tasks * count
        wait_for(lambda: len(stream.metrics) >= expected, timeout=seconds + 30, interval=0.2)
        cpu1, wall1 = proc_cpu_seconds(proc.pid) + children_cpu_seconds(proc.pid), time.time()
        agents_cpu, events = cpu_seconds_of(agents) - agents_cpu0, max(1, len(stream.metrics) - events0)
        # the launcher: `up` (a client of the supervisor it forked, since issue 35) and the supervisor
        pids = launcher_pids(proc.pid, run_dir)
        figures["launcher_processes"] = len(pids)
        figures["launcher_rss_mib"] = sum(status_field(pid, "VmHWM") for pid in pids) / 1024
        figures["launcher_fds"] = sum(len(os.listdir(f"/proc/{pid}/fd")) for pid in pids)
        figures["launcher_threads"] = sum(status_field(pid, "Threads") for pid in pids)
        figures["client_rss_mib"] = status_field(proc.pid, "VmHWM") / 1024
        figures["launcher_cpu_percent"] = 100 * (cpu1 - cpu0) / (wall1 - wall0)
        figures["launcher_cpu_ms_per_event"] = 1000 * (cpu1 - cpu0) / events
        figures["agents"] = len(agents)
        figures["agent_cpu_percent"] = 100 * agents_cpu / max(1, len(agents)) / (wall1 - wall0)
        figures["agent_cpu_ms_per_event"] = 1000 * agents_cpu / events
        figures["agent_cpu_percent_per_task"] = figures["agent_cpu_percent"] / per_host
    finally:
        t_down, busy0 = time.time(), busy_cpu_seconds()
        marks: dict[str, float] = {}
        watcher = threading.Thread(target=watch_teardown, args=(proc, run_id, t_down, marks), daemon=True)
        watcher.start()
        down(run_dir)
        figures["teardown_s"] = time.time() - t_down
        figures["left_processes"] = len(pids_of_run(run_id))
        watcher.join(120)
        if proc.poll() is None:
            proc.kill()
        figures["up_exited_s"] = marks.get("up_exited", float("nan"))
        figures["nothing_left_s"] = marks.get("nothing_left", float("nan"))
        figures["teardown_machine_cpu_s"] = busy_cpu_seconds() - busy0
        figures["job_end_event_s"] = stream.ended_at - t_down if stream.ended_at else float("nan")
        stream.join(10)
    ms = [v * 1000 for v in stream.metrics.values()]
    figures.update({
        "events_expected": expected, "events_received": len(ms), "events_lost": expected - len(ms),
        "events_duplicated": stream.duplicates, "event_p50_ms": percentile(ms, 50),
        "event_p99_ms": percentile(ms, 99), "event_max_ms": max(ms or [float("nan")]),
        "events_per_s": tasks * rate, "event_bytes_mean": stream.metric_bytes / max(1, len(ms))})
    return figures


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--hosts", type=int, default=4)
    parser.add_argument("--tasks-per-host", type=int, default=16)
    parser.add_argument("--rate", type=float, default=10.0, help="metric lines per second per task")
    parser.add_argument("--seconds", type=float, default=20.0, help="how long every task prints")
    parser.add_argument("--pdsh-repeats", type=int, default=3, help="pdsh baseline: median of this many")
    parser.add_argument("--json", action="store_true", help="one JSON object with every figure, last")
    args = parser.parse_args()
    # the launcher's bytecode, as an install leaves it (see launch_fanout.py)
    subprocess.run([sys.executable, "-m", "compileall", "-q", str(REPO / "launcher")], check=True, timeout=300)
    work = Path(tempfile.mkdtemp(prefix="distlaunch-bench-scale-"))
    try:
        with sshd_hosts(args.hosts) as hosts:
            cfg = ssh_config(work / "ssh_config", hosts)
            warm_up(hosts, work)
            task = f"{PYTHON} {emitter_args(work, 1, args.rate, work / 'no-go')}"
            pdsh = statistics.median(time_pdsh_per_host(hosts, args.tasks_per_host, cfg, task)
                                     for _ in range(args.pdsh_repeats))
            figures = measure(hosts, args.tasks_per_host, args.rate, args.seconds, work)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    figures["pdsh_per_host_s"] = pdsh
    figures["launch_vs_pdsh"] = figures["launch_s"] / pdsh
    f = figures
    print(f"scale: {f['hosts']} sshd hosts x {f['tasks_per_host']} tasks = {f['tasks']} tasks, "
          f"{f['events_per_s']:g} events/s for {args.seconds:g} s ({machine()}; load {f['load_avg_1m']})")
    print(f"  launch {f['launch_s']:.2f} s (first event {f['preflight_s']:.2f} s, first task running "
          f"{f['first_running_s']:.2f} s, agents' first starting to last running {f['agents_start_span_s']:.2f} s, "
          f"last running stamped at {f['last_running_stamp_s']:.2f} s), pdsh per host {pdsh:.2f} s: "
          f"{f['launch_vs_pdsh']:.2f}x")
    print(f"  events {f['events_received']}/{f['events_expected']} (lost {f['events_lost']}, "
          f"duplicated {f['events_duplicated']}); latency p50 {f['event_p50_ms']:.1f} ms, "
          f"p99 {f['event_p99_ms']:.1f} ms, max {f['event_max_ms']:.1f} ms; {f['event_bytes_mean']:.0f} bytes each")
    print(f"  launcher ({f['launcher_processes']} process(es)) {f['launcher_cpu_percent']:.1f}% of one core, "
          f"peak RSS {f['launcher_rss_mib']:.0f} MiB (client {f['client_rss_mib']:.0f} MiB), "
          f"{f['launcher_fds']} fds, {f['launcher_threads']} threads")
    print(f"  per event (what carries to real hosts): launcher {f['launcher_cpu_ms_per_event']:.3f} ms CPU, "
          f"host agent {f['agent_cpu_ms_per_event']:.3f} ms CPU, {f['event_bytes_mean']:.0f} bytes; one host agent "
          f"({f['agents']} found) {f['agent_cpu_percent']:.1f}% of one core, {f['agent_cpu_percent_per_task']:.2f}% "
          f"per task at {f['rate_per_task']:g} lines/s")
    print(f"  teardown (`down` until it returned) {f['teardown_s']:.2f} s: the job's end event at "
          f"{f['job_end_event_s']:.2f} s, no process of the run left at {f['nothing_left_s']:.2f} s, `up` exited at "
          f"{f['up_exited_s']:.2f} s; {f['teardown_machine_cpu_s']:.1f} CPU s on this machine; "
          f"processes left when down returned: {f['left_processes']}")
    if args.json:
        print(json.dumps({k: (round(v, 4) if isinstance(v, float) else v) for k, v in figures.items()}))


if __name__ == "__main__":
    os.chdir(REPO)
    main()
