"""How long does ``distlaunch up`` take until every task runs, for 4, 16 and 64 tasks over SSH?

Hosts are private sshds on loopback ports (default 4), tasks (``sleep 30``, strategy custom,
ports picked at launch) are spread over them in order. For each size, alternating, best of
``--repeats`` after one warm-up:

* ``up total``: from starting ``distlaunch up --no-tui`` until events.jsonl holds a ``running``
  state for every task. It includes preflight: connect, python check, agent upload, port pick;
* ``up launch``: the part from the supervisor's first event (job Created, emitted when it
  starts tasks, i.e. after preflight) until all run;
* ``pdsh/host``: ``pdsh -R ssh`` over the hosts, each starting its share of ``sleep 30``
  detached (``setsid``) and printing the pids: the tool a user would otherwise reach for;
* ``pdsh/task``: ``pdsh`` with one ssh alias per task (one connection per task, fan-out N);
* ``ssh serial``: the sum of one ``ssh host true`` per task, one after another;
* with ``--transport openssh``: ``openssh total`` and ``openssh launch``, the same ``up`` with
  ``[ssh] client = "openssh"`` (the system ssh client over one master per host), beside the
  built-in client's and pdsh's;
* with ``--container [IMAGE]``: ``container total`` and ``container launch``, the same ``up`` with
  every task in a docker container of IMAGE (default the test image, ``distlaunch-test:tf2.21``,
  tests/containerimage.py), beside the bare figures: what a container costs (the image check in
  preflight, ``docker run`` per task until the agent reports it running, which is when the
  ``docker run`` client started); and ``first line``, bare and in containers: until every task's
  command printed its first line, i.e. its process runs inside its started container.

With ``--grid HOSTS --per-host TASKS`` (e.g. ``--grid 1,4,16,32 --per-host 1,16,64``) it runs
instead one ``up`` per (hosts, tasks per host) pair, with ``pdsh/host`` beside each, prints the
phase split each ``up`` recorded in its state.json (``launch``, launcher/remote/launchclock.py:
the median host's seconds from the process start to imports, fork, connect, agent (sent or
cached), preflight, every host checked (the reach check included), supervisor made, start sent,
spawned, first running) and fits ``total = fixed + per_host *
hosts + per_task * tasks`` by least squares over all pairs: the cost of one more host and of one
more task (issue 60).

Targets (issue 11): 64 tasks ``up total`` <= 2x ``pdsh/host`` and the launch part <= 1.3x; 64 vs 4
tasks <= 1.5x.

Run: ``.venv/bin/python benchmarks/launch_fanout.py [--sizes 4,16,64] [--hosts 4] [--repeats 3]
[--transport openssh] [--container [IMAGE]]`` or ``... --grid 1,4,16,32 --per-host 1,16,64
[--repeats 3] [--json]`` (``--container`` needs a docker daemon and the image)
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from common import (
    BenchHost,
    EventsTail,
    machine,
    ssh_config,
    ssh_profile,
    sshd_hosts,
    start_up,
    stop_up,
    wait_for,
)

#: the image ``--container`` runs the tasks in when none is named
TEST_IMAGE = "distlaunch-test:tf2.21"


def time_up(hosts: list[BenchHost], tasks: int, work: Path, tag: str, client: str = "builtin",
            image: str | None = None, output: bool = False, phases: list[dict] | None = None) -> tuple[float, float]:
    """(total, launch part) seconds for one ``up`` of ``tasks`` tasks (in containers of ``image``
    when given); tears it down after. ``output``: until every task printed its first line (its
    process runs, inside its container if any) instead of until the agents report ``running``.
    ``phases``: the run's ``launch`` record (state.json) is appended there."""
    command = "echo started; exec sleep 30" if output else "sleep 30"
    profile = ssh_profile(work / f"{tag}.toml", f"fanout-{tasks}", hosts, {"worker": {"count": tasks}},
                          client=client, container=image, command=command)
    run_dir = work / tag
    t0 = time.time()
    proc = start_up(profile, run_dir, tag)
    tail = EventsTail(run_dir / "events.jsonl")
    running: dict[str, float] = {}
    first_ts: list[float] = []

    def all_running() -> bool:
        for e in tail.read():
            if not first_ts:
                first_ts.append(float(e["ts"]))
            if (e["kind"] == "log") if output else (e["kind"] == "state" and e.get("state") == "running"):
                running.setdefault(e["task"], float(e["ts"]))
            if e["kind"] == "job" and e.get("state") == "Failed":
                raise RuntimeError(f"{tag}: job failed: {e.get('reason')}")
        return len(running) == tasks

    try:
        if not wait_for(all_running, timeout=180, interval=0.005):
            raise RuntimeError(f"{tag}: only {len(running)}/{tasks} tasks running after 180 s")
        t_seen = time.time()
    finally:
        stop_up(proc, run_dir)
    if phases is not None:
        with contextlib.suppress(OSError, ValueError):
            phases.append(json.loads((run_dir / "state.json").read_text()).get("launch") or {})
    # the agents stamp `running` when their task started; the watcher saw it a few ms later
    t_all = max(running.values())
    return max(t_all, t_seen - 0.05) - t0, t_all - first_ts[0]


def pdsh(targets: list[str], command: str, cfg: Path, fanout: int) -> list[str]:
    env = dict(os.environ, PDSH_SSH_ARGS_APPEND=f"-F {cfg}")
    result = subprocess.run(["pdsh", "-R", "ssh", "-f", str(fanout), "-w", ",".join(targets), command],
                            capture_output=True, text=True, timeout=120, env=env, stdin=subprocess.DEVNULL)
    if result.returncode != 0:
        raise RuntimeError(f"pdsh failed ({result.returncode}): {result.stderr.strip()[-300:]}")
    return result.stdout.splitlines()


def kill_pids(lines: list[str]) -> None:
    """pdsh answered ``host: pid`` lines; end exactly those processes."""
    for line in lines:
        for word in line.split(":", 1)[-1].split():
            if word.isdigit():
                with contextlib.suppress(ProcessLookupError):
                    os.kill(int(word), signal.SIGTERM)


START_ONE = "setsid sleep 30 </dev/null >/dev/null 2>&1 & echo $!"


def time_pdsh_per_host(hosts: list[BenchHost], tasks: int, cfg: Path) -> float:
    per_host = {h.name: 0 for h in hosts}
    for i in range(tasks):
        per_host[hosts[i % len(hosts)].name] += 1
    count = max(per_host.values())  # sizes here divide evenly over the hosts
    command = f"for i in $(seq {count}); do {START_ONE}; done"
    t0 = time.time()
    out = pdsh([h.name for h in hosts], command, cfg, fanout=len(hosts))
    elapsed = time.time() - t0
    kill_pids(out)
    return elapsed


def time_pdsh_per_task(hosts: list[BenchHost], tasks: int, work: Path) -> float:
    aliases = work / f"ssh_config_tasks{tasks}"
    base = (work / "ssh_config").read_text()
    extra = [f"Host t{i}\n  HostName 127.0.0.1\n  Port {hosts[i % len(hosts)].sshd.port}\n"
             f"  User {hosts[i % len(hosts)].sshd.user}\n  IdentityFile {hosts[i % len(hosts)].sshd.identity_file}\n"
             f"  IdentitiesOnly yes\n  UserKnownHostsFile {hosts[i % len(hosts)].sshd.known_hosts}\n"
             f"  HostKeyAlias [127.0.0.1]:{hosts[i % len(hosts)].sshd.port}\n"
             "  StrictHostKeyChecking yes\n  BatchMode yes\n  LogLevel ERROR\n" for i in range(tasks)]
    aliases.write_text(base + "\n" + "\n".join(extra))
    t0 = time.time()
    out = pdsh([f"t{i}" for i in range(tasks)], START_ONE, aliases, fanout=tasks)
    elapsed = time.time() - t0
    kill_pids(out)
    return elapsed


def time_ssh_serial(hosts: list[BenchHost], tasks: int, cfg: Path) -> float:
    t0 = time.time()
    for i in range(tasks):
        subprocess.run(["ssh", "-F", str(cfg), hosts[i % len(hosts)].name, "true"], check=True,
                       timeout=60, stdin=subprocess.DEVNULL, capture_output=True)
    return time.time() - t0


FABRIC_FLOOR = """\
import sys, threading
import fabric
def one(port, user, key, known):
    c = fabric.Connection("127.0.0.1", user=user, port=int(port),
                          connect_kwargs={"key_filename": key, "look_for_keys": False, "allow_agent": False})
    c.client.load_host_keys(known)
    with c:
        c.run("true", hide=True, in_stream=False)
threads = [threading.Thread(target=one, args=a.split(",")) for a in sys.argv[1:]]
for t in threads: t.start()
for t in threads: t.join()
"""


def time_fabric_floor(hosts: list[BenchHost]) -> float:
    """The least a Fabric launcher does before it can start anything: boot Python, import Fabric,
    connect to every host in parallel and run one command on each (``true``)."""
    args = [f"{h.sshd.port},{h.sshd.user},{h.sshd.identity_file},{h.sshd.known_hosts}" for h in hosts]
    t0 = time.time()
    subprocess.run([sys.executable, "-c", FABRIC_FLOOR, *args], check=True, timeout=60,
                   stdin=subprocess.DEVNULL, capture_output=True)
    return time.time() - t0


#: the phase split's columns in launch order: the per-host phases (launchclock.HOST_PHASES) and,
#: between them, the process-wide marks (``MARKS``)
SPLIT = ("imports", "forked", "connected", "agent", "preflight", "checked", "supervisor", "start_sent", "spawned",
         "first_running")
MARKS = ("imports", "forked", "checked", "supervisor")


def phase_split(launch: dict) -> dict[str, float]:
    """One run's launch record as seconds from the process start per phase: the median host's."""
    split = {k: float(launch[k]) for k in MARKS if k in launch}
    hosts = list((launch.get("hosts") or {}).values())
    for phase in SPLIT:
        values = [float(h[phase]) for h in hosts if phase in h]
        if values and phase not in MARKS:
            split[phase] = statistics.median(values)
    return split


def fit_costs(points: list[tuple[int, int, float]]) -> tuple[float, float, float] | None:
    """Least squares of ``seconds = fixed + per_host * hosts + per_task * tasks`` over (hosts,
    tasks, seconds); None where the points do not tell the three apart."""
    rows = [(1.0, float(h), float(t)) for h, t, _ in points]
    ys = [y for _, _, y in points]
    ata = [[sum(r[i] * r[j] for r in rows) for j in range(3)] for i in range(3)]
    aty = [sum(r[i] * y for r, y in zip(rows, ys, strict=True)) for i in range(3)]

    def det(m: list[list[float]]) -> float:
        return (m[0][0] * (m[1][1] * m[2][2] - m[1][2] * m[2][1]) - m[0][1] * (m[1][0] * m[2][2] - m[1][2] * m[2][0])
                + m[0][2] * (m[1][0] * m[2][1] - m[1][1] * m[2][0]))

    d = det(ata)
    if abs(d) < 1e-9:
        return None
    solved = []
    for col in range(3):
        m = [[aty[i] if j == col else ata[i][j] for j in range(3)] for i in range(3)]
        solved.append(det(m) / d)
    return solved[0], solved[1], solved[2]


def run_grid(host_counts: list[int], per_host: list[int], repeats: int, as_json: bool) -> None:
    """One ``up`` per (hosts, tasks per host) pair, best of ``repeats``, beside pdsh per host; the
    phase split of each and the fitted cost per host and per task."""
    work = Path(tempfile.mkdtemp(prefix="distlaunch-bench-grid-"))
    rows: list[dict] = []
    try:
        with sshd_hosts(max(host_counts)) as all_hosts:
            cfg = ssh_config(work / "ssh_config", all_hosts)
            time_up(all_hosts[:1], 1, work, "warmup")  # the zipapp build, page cache
            for n_hosts in host_counts:
                hosts = all_hosts[:n_hosts]
                for m in per_host:
                    tasks = n_hosts * m
                    best: dict | None = None
                    for rep in range(repeats):
                        phases: list[dict] = []
                        total, launch = time_up(hosts, tasks, work, f"grid{n_hosts}x{m}-{rep}", phases=phases)
                        pdsh_s = time_pdsh_per_host(hosts, tasks, cfg)
                        row = {"hosts": n_hosts, "per_host": m, "tasks": tasks, "total": total, "launch": launch,
                               "pdsh_host": pdsh_s, "split": phase_split(phases[0]) if phases else {},
                               "agent_from": sorted(set((phases[0] if phases else {}).get("agent_from", {}).values()))}
                        if best is None or total < best["total"]:
                            best = row
                    assert best is not None
                    rows.append(best)
                    print(f"  {n_hosts} x {m}: up {best['total']:.2f}s, pdsh/host {best['pdsh_host']:.2f}s "
                          f"({best['total'] / best['pdsh_host']:.2f}x)", flush=True)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    print(f"\nlaunch grid over sshd hosts ({machine()}); best of {repeats}, seconds from `up`'s process start")
    print(f"{'hosts':>5} {'x':>3} {'total':>6} {'pdsh/h':>6} {'ratio':>6}  "
          + " ".join(f"{p[:9]:>9}" for p in SPLIT) + "  agent")
    for r in rows:
        sp = r["split"]
        print(f"{r['hosts']:>5} {r['per_host']:>3} {r['total']:>6.2f} {r['pdsh_host']:>6.2f} "
              f"{r['total'] / r['pdsh_host']:>5.2f}x  " + " ".join(
                  f"{sp[p]:>9.3f}" if p in sp else f"{'-':>9}" for p in SPLIT) + "  " + ",".join(r["agent_from"]))
    fits = {"total": fit_costs([(r["hosts"], r["tasks"], r["total"]) for r in rows]),
            "pdsh_host": fit_costs([(r["hosts"], r["tasks"], r["pdsh_host"]) for r in rows])}
    for name, fit in fits.items():
        if fit is None:
            print(f"{name}: too few distinct sizes to fit a cost per host and per task")
        else:
            print(f"{name}: {fit[0] * 1000:.0f} ms fixed + {fit[1] * 1000:.1f} ms per host + "
                  f"{fit[2] * 1000:.2f} ms per task")
    if as_json:
        keys = ("fixed", "per_host", "per_task")
        named = {k: None if v is None else dict(zip(keys, v, strict=True)) for k, v in fits.items()}
        print(json.dumps({"rows": rows, "fit": named}))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--sizes", default="4,16,64")
    parser.add_argument("--hosts", type=int, default=4)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--transport", choices=("ssh", "openssh"), default="ssh",
                        help="openssh: also time `up` over the system ssh client, beside the built-in one")
    parser.add_argument("--container", nargs="?", const=TEST_IMAGE, default=None, metavar="IMAGE",
                        help=f"also time `up` with every task in a docker container of IMAGE (default {TEST_IMAGE})")
    parser.add_argument("--grid", default=None, metavar="HOSTS",
                        help="host counts (e.g. 1,4,16,32): one `up` per count and --per-host size, the phase split "
                             "and the fitted cost per host and per task")
    parser.add_argument("--per-host", default="1,16,64", metavar="TASKS", help="tasks per host with --grid")
    parser.add_argument("--json", action="store_true", help="with --grid: one JSON object last")
    args = parser.parse_args()
    if args.grid:
        subprocess.run([sys.executable, "-m", "compileall", "-q",
                        str(Path(__file__).resolve().parent.parent / "launcher")], check=True, timeout=300)
        run_grid([int(h) for h in args.grid.split(",")], [int(m) for m in args.per_host.split(",")],
                 args.repeats, args.json)
        return
    openssh = args.transport == "openssh"
    sizes = [int(s) for s in args.sizes.split(",")]
    # the launcher's bytecode, as `make` (and any wheel install) leaves it: where
    # PYTHONDONTWRITEBYTECODE is set, an edited checkout would otherwise compile launcher/ per `up`
    subprocess.run([sys.executable, "-m", "compileall", "-q", str(Path(__file__).resolve().parent.parent / "launcher")],
                   check=True, timeout=300)
    work = Path(tempfile.mkdtemp(prefix="distlaunch-bench-fanout-"))
    results: dict[int, dict[str, list[float]]] = {
        n: {"up total": [], "up launch": [], "pdsh/host": [], "pdsh/task": [], "ssh serial": [],
            "fabric floor": [], "openssh total": [], "openssh launch": [], "container total": [],
            "container launch": [], "bare first line": [], "container first line": []} for n in sizes}
    try:
        with sshd_hosts(args.hosts) as hosts:
            cfg = ssh_config(work / "ssh_config", hosts)
            time_up(hosts, 4, work, "warmup")  # first zipapp build, page cache
            if args.container:
                time_up(hosts, 4, work, "warmup-container", image=args.container)  # the image's pages
            for rep in range(args.repeats):
                for n in sizes:
                    total, launch = time_up(hosts, n, work, f"up{n}-{rep}")
                    r = results[n]
                    r["up total"].append(total)
                    r["up launch"].append(launch)
                    r["pdsh/host"].append(time_pdsh_per_host(hosts, n, cfg))
                    r["pdsh/task"].append(time_pdsh_per_task(hosts, n, work))
                    if rep == 0:
                        r["ssh serial"].append(time_ssh_serial(hosts, n, cfg))
                    r["fabric floor"].append(time_fabric_floor(hosts))
                    if openssh:
                        total, launch = time_up(hosts, n, work, f"openssh{n}-{rep}", client="openssh")
                        r["openssh total"].append(total)
                        r["openssh launch"].append(launch)
                    if args.container:
                        total, launch = time_up(hosts, n, work, f"container{n}-{rep}", image=args.container)
                        r["container total"].append(total)
                        r["container launch"].append(launch)
                        total, _ = time_up(hosts, n, work, f"bare-out{n}-{rep}", output=True)
                        r["bare first line"].append(total)
                        total, _ = time_up(hosts, n, work, f"container-out{n}-{rep}", image=args.container,
                                           output=True)
                        r["container first line"].append(total)
                    print(f"  rep {rep} n={n}: " + ", ".join(f"{k} {v[-1]:.2f}s" for k, v in r.items() if v),
                          flush=True)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    print(f"\nlaunch fan-out over {args.hosts} sshd hosts ({machine()}); best of {args.repeats}, seconds")
    print(f"{'tasks':>5} {'up total':>9} {'up launch':>9} {'pdsh/host':>9} {'pdsh/task':>9} {'ssh serial':>10}"
          f" {'up/pdsh-host':>12} {'launch/pdsh-host':>16} {'up/pdsh-task':>12}")
    best = {n: {k: min(v) for k, v in r.items() if v} for n, r in results.items()}
    for n in sizes:
        b = best[n]
        print(f"{n:>5} {b['up total']:>9.2f} {b['up launch']:>9.2f} {b['pdsh/host']:>9.2f} {b['pdsh/task']:>9.2f}"
              f" {b['ssh serial']:>10.2f} {b['up total'] / b['pdsh/host']:>11.2f}x"
              f" {b['up launch'] / b['pdsh/host']:>15.2f}x {b['up total'] / b['pdsh/task']:>11.2f}x")
    if openssh:
        print(f"\n{'tasks':>5} {'openssh total':>13} {'openssh launch':>14} {'/up total':>9} {'/pdsh-host':>10}")
        for n in sizes:
            b = best[n]
            print(f"{n:>5} {b['openssh total']:>13.2f} {b['openssh launch']:>14.2f}"
                  f" {b['openssh total'] / b['up total']:>8.2f}x {b['openssh total'] / b['pdsh/host']:>9.2f}x")
    if args.container:
        print(f"\nin containers of {args.container} (docker):")
        print(f"{'tasks':>5} {'up total':>9} {'container total':>15} {'/up':>6} {'up launch':>9}"
              f" {'container launch':>16} {'/up':>6}")
        for n in sizes:
            b = best[n]
            print(f"{n:>5} {b['up total']:>9.2f} {b['container total']:>15.2f}"
                  f" {b['container total'] / b['up total']:>5.2f}x {b['up launch']:>9.2f}"
                  f" {b['container launch']:>16.2f} {b['container launch'] / b['up launch']:>5.2f}x")
        print("until every task printed its first line (its process runs, in its container if any):")
        print(f"{'tasks':>5} {'bare':>9} {'container':>10} {'/bare':>6}")
        for n in sizes:
            b = best[n]
            print(f"{n:>5} {b['bare first line']:>9.2f} {b['container first line']:>10.2f}"
                  f" {b['container first line'] / b['bare first line']:>5.2f}x")
    if 64 in best:
        b = best[64]
        print(f"64 tasks: up total {b['up total'] / b['pdsh/host']:.2f}x pdsh/host (target <= 2x), launch part "
              f"{b['up launch'] / b['pdsh/host']:.2f}x (target <= 1.3x)")
        print(f"fabric floor (python + import fabric + connect + one `true` per host, in parallel): "
              f"{b['fabric floor']:.2f} s = {b['fabric floor'] / b['pdsh/host']:.2f}x pdsh/host")
    if 4 in best and 64 in best:
        print(f"64 vs 4 tasks: up total {best[64]['up total'] / best[4]['up total']:.2f}x, "
              f"up launch {best[64]['up launch'] / best[4]['up launch']:.2f}x (target <= 1.5x)")


if __name__ == "__main__":
    main()
