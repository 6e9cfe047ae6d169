"""The agent's command line: ``python agent.pyz VERB ...``.

Every verb except ``serve``, ``run`` and ``follow`` prints one JSON object.

The verbs:

* ``serve --run-dir R``: be the host agent of ``R`` (foreground; exits at once if one already holds
  the lock)
* ``start --run-dir R [--run-id ID] [--no-spawn]``: stdin ``{"specs": {slug: spec}, "tasks": [slug],
  "secrets": {slug: env}}``: write the specs (0600) and have the host agent start the tasks in that
  order; answers ``{"pids": {slug: pid}, "errors": {...}}``; secrets stay in the agent's memory
* ``follow --run-dir R [--offset SLUG=BYTES ...] [--pinged] [--run-id ID] [--no-spawn]``: relay the
  host agent's stream (catch-up from the offsets, then pushed lines and ``#hb``) to stdout and
  stdin's pings to it; with ``--pinged``, exit after 30 s without a ping; exit when the agent goes
  away or on stdin EOF
* ``stop (--run-dir R --tasks a,b | --task-dir D) [--grace S] [--exit]``: stop those tasks (SIGTERM
  group, grace, SIGKILL group) and answer once each wrote its final event; ``--exit``: then end the
  host agent. With no agent serving: kill each task's group (or its ``run`` agent) and write
  ``stopped`` where the last state was not final
* ``run --task-dir D``: one task in the foreground with the same runner, sampler and lease rule,
  without a host agent (tests, tools)
* ``ports --bind ADDR [--check P,P] [--pick N]``: ``{"busy": [...], "picked": [...]}``: which given
  ports cannot be bound, and N free ones
* ``sweep --run-id ID [--run-dir R] [--kill] [--grace S]``: ``{"left": [{"pid", "cmdline"}]}``:
  processes whose environment has ``DISTLAUNCH_RUN_ID=ID`` (the host agent and the tasks); with
  ``--run-dir`` also those in each task's session or own cgroup as ``task.json`` recorded them
  (``taskcgroup.py``: ``env -i``, ``setpgid``, ``setsid``; never its own ancestors, nor a process
  naming another run); with ``--kill`` they are terminated first and the emptied task cgroups
  removed; with ``--run-dir`` also the containers labelled with the run (docker, podman:
  ``{"container", "cmdline"}`` entries), removed first with ``--kill``
* ``stacks --run-dir R [--tasks a,b] [--native] [--timeout S]``: ``{"stacks": [TaskStacks JSON]}``:
  every (or these; task ids or slugs) task's stacks and process state, read as the ``stacks``
  request reads them (``launcher.agent.stackreader``); ``distlaunch stacks`` runs it, one exec per
  host, when no launcher follows the run
* ``preflight [--cwd DIR] [--checks JSON] [--bind ADDR --check P,P --pick N] [--tensorflow] [--facts
  JSON] [--listen TOKEN] [--then-follow --run-dir R]``: ``{"python": "3.11.7", "psutil": bool,
  "pynvml": bool}``; with ``--checks`` also ``"failed": [...]``, with ``--bind`` also ``"ports"``,
  with ``--tensorflow`` also ``"tensorflow"``, with ``--facts {"paths": [...], "gpus": bool}`` also
  ``"facts"`` (``disk`` per path, ``mem_available_bytes``, ``gpus`` when asked, ``time``), with
  ``--listen`` also ``"listening"`` and ``"listen_failed"`` (then ``#reach`` lines on stdin are
  answered until another line or EOF), with ``--containers JSON`` also ``"containers"`` (each image:
  ``present``, ``pulled``, ``digest``, ``tensorflow`` or ``tf_error``, ``error``;
  ``agent/containercheck.py``): preflight's one round trip per host. ``--then-follow``: afterwards
  wait for a first line on stdin and then start the host agent of R and follow it (pinged), passing
  that line on; EOF first: exit 0, no agent started (a launch's one exec: ``launcher.remote.channel``)

``follow`` and ``start`` pass ``--run-id`` so the host agent they may start has
``DISTLAUNCH_RUN_ID`` in its environment (``sweep`` finds it); the verbs themselves do not carry it.

Stdlib-only, Python >= 3.9 (runs on hosts from the agent zipapp).
"""

from __future__ import annotations

import argparse
import json
import os
import sys

from launcher.agent.agentlog import warn

# Only what the command line needs is imported here; each verb imports its own modules. A
# `preflight` (the first thing a launch runs on every host) then does not pay for the daemon's,
# nor for `typing` (~10 ms of CPU there): annotations are strings here, never evaluated.
TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any, Dict, List, Optional


LEASE_CHECK_SECONDS = 0.5
VERBS = ("serve", "run", "follow", "start", "stop", "readmit", "ports", "sweep", "preflight", "stacks")


# -- run: one task in the foreground, without a host agent ------------------------------------------


def cmd_run(task_dir: str) -> int:
    """Supervise the single task of ``task_dir`` until it ends: the host agent's runner, sampling
    loop and orphan rule for one task, in this process (tests and tools; ``up`` uses the host agent)."""
    import signal
    import threading

    from launcher.agent.orphanrule import OrphanRule
    from launcher.agent.output import EventWriter
    from launcher.agent.procs import _become_subreaper, _write_atomic, hush, spawnable_signals
    from launcher.agent.runner import TaskRunner
    from launcher.agent.sampleloop import sample_tasks
    from launcher.agent.spec import AgentSpec

    try:
        spec = AgentSpec.load(os.path.join(task_dir, "spec.json"))
    except (OSError, ValueError, TypeError) as exc:
        warn("agent: cannot read %s/spec.json: %s" % (task_dir, exc))
        return 2
    run_dir = os.path.dirname(os.path.dirname(os.path.abspath(task_dir)))
    runner = TaskRunner(task_dir, spec, EventWriter(os.path.join(task_dir, "events.jsonl")), set())
    stop_reason: List[str] = []

    def on_signal(signum: int, frame: Any) -> None:
        stop_reason.append("stopped on request")

    # handlers first, pid file second: a `stop` that reads the pid always finds them installed
    spawnable_signals()  # the task inherits default dispositions, with no preexec_fn
    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    signal.signal(signal.SIGHUP, hush)
    _write_atomic(os.path.join(task_dir, "agent.pid"), "%d\n" % os.getpid())
    _become_subreaper()
    if runner.start() is None:
        return 0
    waiter = threading.Thread(target=runner.wait, name="wait", daemon=True)
    waiter.start()
    threading.Thread(target=sample_tasks, args=(lambda: [] if runner.done.is_set() else [runner], runner.done),
                     name="sampler", daemon=True).start()
    orphans = OrphanRule(run_dir, spec.orphan_grace_seconds)
    while not runner.done.wait(LEASE_CHECK_SECONDS if not stop_reason else 0.05):
        if stop_reason:
            runner.request_stop(stop_reason[0])
        elif orphans.lost():
            runner.request_stop("launcher lost for %g s" % spec.orphan_grace_seconds)
    return 0


# -- sweep ------------------------------------------------------------------------------------------


def _run_processes(run_id: str, run_dir: Optional[str] = None) -> List[int]:
    """Processes of the run, except the launcher's [notify] commands (they run after the job, by design);
    with ``run_dir`` (the host run dir) also those in its tasks' sessions and cgroups (taskcgroup.py)."""
    from launcher.agent.procs import _all_pids, _environ_has, pid_alive
    from launcher.agent.taskcgroup import escaped, other_run

    skip = {os.getpid(), os.getppid()}
    found = [pid for pid in _all_pids()
             if pid not in skip and _environ_has(pid, "DISTLAUNCH_RUN_ID", run_id) and pid_alive(pid)
             and not _environ_has(pid, "DISTLAUNCH_NOTIFY", "1")]
    if run_dir is not None:
        found += [pid for pid in escaped(run_dir) if pid not in found and pid not in skip and pid_alive(pid)
                  and not other_run(pid, run_id) and not _environ_has(pid, "DISTLAUNCH_NOTIFY", "1")]
    return found


def cmd_sweep(run_id: str, kill: bool, grace: float, run_dir: Optional[str] = None) -> Dict[str, Any]:
    import signal

    from launcher.agent.procs import KILL_CONFIRM_SECONDS, _cmdline, _signal_pid, _wait_until, pid_alive

    # the run's containers first (by label, even with no agent left): their clients then end by themselves
    containers: List[Dict[str, Any]] = []
    if run_dir is not None:
        from launcher.agent.taskcontainer import sweep as sweep_containers

        containers = sweep_containers(run_dir, run_id, kill)
    pids = _run_processes(run_id, run_dir)
    if kill and pids:
        for pid in pids:
            _signal_pid(pid, signal.SIGTERM)
        _wait_until(lambda: not any(pid_alive(p) for p in pids), grace)
        for pid in pids:
            if pid_alive(pid):
                _signal_pid(pid, signal.SIGKILL)
        _wait_until(lambda: not any(pid_alive(p) for p in pids), KILL_CONFIRM_SECONDS)
        pids = _run_processes(run_id, run_dir)
    if kill and run_dir is not None:
        from launcher.agent.taskcgroup import remove_all

        remove_all(run_dir)
    return {"left": [{"pid": pid, "cmdline": " ".join(_cmdline(pid))} for pid in pids] + containers}


# -- entry point ------------------------------------------------------------------------------------


def _port_list(text: str) -> List[int]:
    return [int(p) for p in text.split(",") if p.strip()]


def _slug_list(text: str) -> List[str]:
    return [s for s in text.split(",") if s]


def build_parser(only: Optional[str] = None) -> argparse.ArgumentParser:
    """The command line; with ``only`` (a verb) just that verb's arguments: building all eight
    subparsers was a quarter of a `preflight`'s own CPU on every host of a launch."""
    parser = argparse.ArgumentParser(prog="agent.pyz", description="distlaunch host agent")
    verbs = parser.add_subparsers(dest="verb", required=True)
    if only in (None, "serve"):
        serve = verbs.add_parser("serve", help="be the host agent of the run dir (foreground)")
        serve.add_argument("--run-dir", required=True)
    if only in (None, "run"):
        run = verbs.add_parser("run", help="supervise only the task of D/spec.json, in the foreground")
        run.add_argument("--task-dir", required=True)
    if only in (None, "follow"):
        follow = verbs.add_parser("follow", help="stream every task's events from the host agent")
        follow.add_argument("--run-dir", required=True)
        follow.add_argument("--offset", action="append", default=[], metavar="SLUG=BYTES")
        follow.add_argument("--pinged", action="store_true",
                            help="the launcher pings every second; without pings the lease goes stale")
        follow.add_argument("--no-spawn", action="store_true", help="wait for a host agent, never start one")
    if only in (None, "start"):
        start = verbs.add_parser("start", help="write specs (JSON on stdin) and start tasks")
        start.add_argument("--run-dir", required=True)
        start.add_argument("--no-spawn", action="store_true")
    if only in (None, "stop"):
        stop = verbs.add_parser("stop", help="stop tasks (and with --exit the host agent)")
        stop.add_argument("--run-dir", default=None)
        stop.add_argument("--tasks", type=_slug_list, default=[])
        stop.add_argument("--task-dir", default=None, help="one task (its run dir is two levels up)")
        stop.add_argument("--grace", type=float, default=None)
        stop.add_argument("--exit", action="store_true", help="then stop everything and end the host agent")
        stop.add_argument("--retire", default=None, metavar="REASON",
                          help="the run left this host: mark it so that nothing of the run starts here again")
    if only in (None, "readmit"):
        again = verbs.add_parser("readmit", help="the supervisor re-admits this host: lift its retired mark")
        again.add_argument("--run-dir", required=True)
        again.add_argument("--token", required=True, help="the new incarnation's token (each works once)")
    if only in (None, "ports"):
        ports = verbs.add_parser("ports", help="check and pick TCP ports")
        ports.add_argument("--bind", required=True)
        ports.add_argument("--check", type=_port_list, default=[])
        ports.add_argument("--pick", type=int, default=0)
        ports.add_argument("--run-dir", help="the host run dir: a private network's ports are judged inside it")
    if only in (None, "sweep"):
        sweep = verbs.add_parser("sweep", help="find (and kill) every process of a run")
        sweep.add_argument("--run-id", required=True)
        sweep.add_argument("--run-dir", help="the host run dir: its tasks' sessions and cgroups count too")
        sweep.add_argument("--kill", action="store_true")
        sweep.add_argument("--grace", type=float, default=5.0)
    if only in (None, "stacks"):
        stacks = verbs.add_parser("stacks", help="every task's stacks and process state (JSON)")
        stacks.add_argument("--run-dir", required=True)
        stacks.add_argument("--tasks", type=_slug_list, default=[], help="task ids or slugs (default: all)")
        stacks.add_argument("--native", action="store_true", help="with py-spy: native frames too")
        stacks.add_argument("--timeout", type=float, default=None)
    if only in (None, "preflight"):
        preflight = verbs.add_parser("preflight", help="what this host's Python offers; path and port checks")
        preflight.add_argument("--checks", default=None, help="JSON list of path checks (launcher/agent/hostcheck.py)")
        preflight.add_argument("--cwd", default=None, help="the directory relative paths are taken from")
        preflight.add_argument("--bind", default=None)
        preflight.add_argument("--check", type=_port_list, default=[])
        preflight.add_argument("--pick", type=int, default=0)
        preflight.add_argument("--tensorflow", action="store_true", help="also TensorFlow's version (metadata first)")
        preflight.add_argument("--then-follow", action="store_true",
                               help="after the answer, wait for a first line on stdin, then start the host agent of "
                                    "--run-dir and follow it (pinged) as `follow` does; EOF first: end")
        preflight.add_argument("--run-dir", default=None)
        preflight.add_argument("--listen", default=None, metavar="TOKEN",
                               help="hold the checked and picked ports open, greeting with TOKEN, and answer "
                                    "reach requests on stdin until another line or EOF (launcher/agent/reachcheck.py)")
        preflight.add_argument("--facts", default=None, metavar="JSON",
                               help='JSON {"paths": [...], "gpus": bool}: also free space at the paths, free memory, '
                                    "the clock and (if asked) the GPUs (launcher/agent/hostfacts.py)")
        preflight.add_argument("--containers", default=None, metavar="JSON",
                               help="JSON list of the tasks' images: the runtime answers, each image is present "
                                    "(or pulled per its pull policy), its digest and TensorFlow version "
                                    "(launcher/agent/containercheck.py)")
    return parser


def _print_json(obj: Dict[str, Any]) -> None:
    sys.stdout.write(json.dumps(obj) + "\n")
    sys.stdout.flush()


def main(argv: Optional[List[str]] = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    parser = build_parser(argv[0] if argv and argv[0] in VERBS else None)
    args = parser.parse_args(argv)
    if args.verb == "preflight" and args.then_follow and not args.run_dir:
        parser.error("preflight --then-follow needs --run-dir (the host agent's run dir)")
    if args.verb == "serve":
        from launcher.agent.hostagent import HostAgent

        return HostAgent(args.run_dir).serve()
    if args.verb == "run":
        return cmd_run(args.task_dir)
    if args.verb == "follow":
        from launcher.agent import clients
        from launcher.agent.stream import parse_offsets

        try:
            offsets = parse_offsets(args.offset)
        except ValueError as exc:
            warn("agent: %s" % exc)
            return 2
        return clients.cmd_follow(os.path.abspath(args.run_dir), offsets, pinged=args.pinged,
                                  spawn=not args.no_spawn)
    try:
        return _one_answer(args)
    except (OSError, ValueError) as exc:
        warn("agent %s: %s" % (args.verb, exc))
        _print_json({"error": str(exc)})
        return 1


def _one_answer(args: argparse.Namespace) -> int:
    if args.verb == "preflight":
        from launcher.agent.netcheck import cmd_preflight

        ports = (args.bind, args.check, args.pick) if args.bind is not None else None
        picked: List[Any] = []
        answer = cmd_preflight(args.checks, args.cwd, ports, args.tensorflow,
                               keep=picked if args.listen is not None else None)
        if args.containers is not None:  # before the facts: their clock is read as late as can be
            from launcher.agent.containercheck import check_images

            answer["containers"] = check_images(json.loads(args.containers))
        if args.facts is not None:
            from launcher.agent.hostfacts import host_facts

            answer["facts"] = host_facts(json.loads(args.facts))
        hold = None
        if args.listen is not None and ports is not None:
            from launcher.agent.reachcheck import PortHold

            busy = set(answer["ports"]["busy"])
            hold = PortHold(args.bind, [p for p in args.check if p not in busy], args.listen, bound=picked)
            answer["listening"], answer["listen_failed"] = hold.ports, hold.failed
        _print_json(answer)
        if args.then_follow:  # the host agent's modules load while the launcher judges the answers
            from launcher.agent.clients import follow_when_asked
        first = None
        if hold is not None:
            from launcher.agent.reachcheck import hold_until_released

            first = hold_until_released(hold)
        if args.then_follow:
            return follow_when_asked(os.path.abspath(args.run_dir), first)
    elif args.verb == "ports":
        from launcher.agent.netcheck import cmd_ports

        if args.run_dir:
            from launcher.agent.netns import join_run

            join_run(os.path.abspath(args.run_dir))  # still one thread: a user namespace takes no more
        _print_json(cmd_ports(args.bind, args.check, args.pick))
    elif args.verb == "start":
        from launcher.agent.clients import cmd_start
        from launcher.protocol.agentlines import StartRequest, decode_request

        request = decode_request(sys.stdin.buffer.read().strip() or b"{}", op=StartRequest.OP)
        if not isinstance(request, StartRequest):
            raise ValueError("not a start request on stdin: %s" % getattr(request, "why", request))
        answer = cmd_start(os.path.abspath(args.run_dir), request, spawn=not args.no_spawn)
        _print_json(answer)
        return 1 if answer.get("error") else 0
    elif args.verb == "stop":
        from launcher.agent.clients import cmd_stop

        if args.task_dir:
            task_dir = os.path.abspath(args.task_dir)
            run_dir, slugs = os.path.dirname(os.path.dirname(task_dir)), [os.path.basename(task_dir)]
        else:
            run_dir, slugs = os.path.abspath(args.run_dir or "."), args.tasks
        if args.retire is not None:  # first: no start may slip in while the tasks are stopped
            from launcher.agent.leaving import retire

            retire(run_dir, args.retire)
        answer = cmd_stop(run_dir, slugs, args.grace, args.exit)
        if args.task_dir and "without_agent" in answer:  # one task of a `run` agent: its own answer
            answer = answer["without_agent"][slugs[0]]
        _print_json(answer)
    elif args.verb == "readmit":
        from launcher.agent.leaving import readmit

        answer = readmit(os.path.abspath(args.run_dir), args.token)
        _print_json(answer)
        return 1 if answer.get("error") else 0
    elif args.verb == "sweep":
        _print_json(cmd_sweep(args.run_id, args.kill, args.grace,
                              os.path.abspath(args.run_dir) if args.run_dir else None))
    elif args.verb == "stacks":
        from launcher.agent import stackreader

        _print_json(stackreader.answer(os.path.abspath(args.run_dir), args.tasks, args.native, args.timeout))
    return 0
