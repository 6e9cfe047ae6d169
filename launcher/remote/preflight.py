"""Everything checked on the hosts before a task starts (DESIGN.md section 7).

Used by `check` (which only reports) and by `up` (which stops at the first problem, before
anything is started anywhere). Hosts are checked in parallel, one thread each.

Before anything starts (``check`` and ``up``), per host and in parallel: connect (a missing
``identity_file`` is named here), run each interpreter (``check`` imports TensorFlow unless the
strategy is custom; ``up`` reads its version from the package metadata, in the same exec as the
rest: ``launcher.remote.channel``), upload the agent, then ONE agent ``preflight`` call that checks the ports and the
paths ``launcher/remote/taskcheck.py`` derives from the plan: each role's ``workdir`` is a
directory; its command's script (the first non-option argument after ``{python}``, when it ends in
``.py``) exists in the workdir; ``-m module`` is importable by that interpreter from the workdir; a
command without ``{python}`` has its first word as a program (on the PATH as the task's shell sees
it, builtins included, or a path that is executable). Modules and programs are looked up in the
role's ``shell`` after its ``setup`` lines (exit 97 of the check script: the setup failed). This
runs after ``[sync]``, which creates workdirs. Commands that only a shell can judge (``exec $X``,
``cd a && b``, placeholders in the name) are left to the start. Each problem is one line naming
host, role(s), path and the profile key to fix; roles that share a mistake share its line.

Then the hosts together: with several hosts, every host reaches every other host's task ports
(``launcher.remote.channel``); a failing pair is "host a cannot reach worker:0 at
127.0.0.3:33751 (timed out: a firewall?)" or "(refused)". Last, ``launcher/remote/parity.py`` puts
the hosts side by side from their answers: Python, TensorFlow (with CUDA/cuDNN where ``check``
imported a GPU build), GPUs (read only where tasks are given GPUs, or by ``check``: importing pynvml
costs 0.2-0.4 s), free space at the outputs and the run dir, free memory and the clock offset (the
answer's ``time`` minus its arrival: a little low by the travel time). TensorFlow major.minor
differing is an error for a TensorFlow strategy unless ``allow_version_skew``; patch levels, Python
and CUDA builds differing, free space under ``min_free_disk``, a clock past 2 s and GPUs holding
other processes' memory are warnings (the last an error with ``gpu_busy = "refuse"``); a GPU index
the host does not have is an error. ``up`` tells the warnings once, ``check`` prints the table (a
differing column's header says "differs"), ``check --json`` prints it as JSON.
"""

from __future__ import annotations

import json
import shlex
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

from launcher.agent.netcheck import TF_DISTRIBUTIONS
from launcher.errors import HostError, UserError
from launcher.model import Plan, TaskSpec
from launcher.paths import private_state_dir
from launcher.placement import is_rehearsal, rehearsal
from launcher.plan import agent_python, task_container
from launcher.remote.agentpack import agent_digest
from launcher.remote.channel import AgentChannel
from launcher.remote.hostpool import each_host
from launcher.remote.imagecheck import add_images, container_checks, containerised_only, image_problems
from launcher.remote.launchclock import LaunchClock
from launcher.remote.parity import HostRow, judge, row_from_answer
from launcher.remote.parity import as_json as as_json_table
from launcher.remote.parity import table as parity_table
from launcher.remote.reach import check_reach, hosts_of, needs_reach, pair_count
from launcher.remote.session import HostSession, remote_base_dir, remote_outputs_dir
from launcher.remote.storage import probe_outputs
from launcher.remote.sync import sync_hosts
from launcher.remote.taskcheck import describe_all, host_checks
from launcher.telemetry.progressline import Progress, paused
from launcher.transport import Host, make_host

T = TypeVar("T")

#: the version line `check` reads; a GPU build adds "cuda X cudnn Y" (launcher/remote/parity.py reads it)
#: where the CUDA runtime it was built for can be loaded (the nvidia-* wheels' or a system libcudart of
#: that major version): a build made with CUDA runs nothing on a GPU without it, as on a CPU machine
TF_CHECK = """import ctypes.util, glob, importlib.util, os, platform
import tensorflow as tf
b = getattr(tf.sysconfig, 'get_build_info', dict)()
major = str(b.get('cuda_version') or '').split('.')[0]
wheels = importlib.util.find_spec('nvidia')
libs = [p for d in (wheels.submodule_search_locations or [] if wheels else [])
        for p in glob.glob(os.path.join(d, 'cuda_runtime', 'lib', 'libcudart.so*'))]
libs.append(ctypes.util.find_library('cudart') or '')
gpu = b.get('is_cuda_build') and major and any(os.path.basename(p).startswith('libcudart.so.' + major) for p in libs)
print(platform.python_version(), tf.__version__, '(imported)',
      'cuda %s cudnn %s' % (b.get('cuda_version'), b.get('cudnn_version')) if gpu else '')
"""
#: for `up`: TensorFlow's version from its installed package's metadata, which takes milliseconds
#: where an import takes seconds; without such metadata (a source tree on the path) it imports
TF_METADATA_CHECK = f"""import platform
try:
    from importlib import metadata
    for name in {TF_DISTRIBUTIONS!r}:
        try:
            print(platform.python_version(), metadata.version(name), "(package metadata)")
            break
        except metadata.PackageNotFoundError:
            continue
    else:
        raise ImportError("no TensorFlow distribution")
except ImportError:
    import tensorflow as tf
    print(platform.python_version(), tf.__version__, "(imported)")
"""
PY_CHECK = "import platform; print(platform.python_version())"


#: how _judge_host marks a task's profiler port among its task ports
PROFILER_KEY = "profiler:"


class PreflightError(UserError):
    """One or more problems on the hosts; the message has one line per problem."""

    def __init__(self, problems: list[str], rows: list[HostRow] | None = None,
                 warnings: list[str] | None = None) -> None:
        super().__init__("\n".join(problems))
        self.problems = problems
        self.rows = rows or []  # the hosts side by side, when the problems came from comparing them
        self.warnings = warnings or []  # what comparing them found short of a problem


@dataclass
class Preflight:
    """What a successful preflight found: connected hosts, their sessions and every task's port."""

    hosts: dict[str, Host]
    sessions: dict[str, HostSession] = field(default_factory=dict)
    ports: dict[str, int] = field(default_factory=dict)
    versions: dict[str, str] = field(default_factory=dict)
    #: each host's preflight answer and when it arrived (launcher clock): the rows of parity.py
    answers: dict[str, tuple[dict[str, Any], float]] = field(default_factory=dict)
    rows: list[HostRow] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)
    #: how many pairs of (host, other host's task port) were proven reachable
    pairs: int = 0
    #: each task's profiler server port (autolog starts it; `distlaunch profile` captures from it)
    profiler_ports: dict[str, int] = field(default_factory=dict)
    #: the launch's phase stamps (`up`), handed to each session
    clock: LaunchClock | None = None

    def take_ports(self, found: dict[str, int]) -> None:
        """A host's ports: its tasks' (``ports``) and their profiler servers' (``profiler_ports``)."""
        for key, port in found.items():
            if key.startswith(PROFILER_KEY):
                self.profiler_ports[key[len(PROFILER_KEY):]] = port
            else:
                self.ports[key] = port

    def close(self) -> None:
        """The launch stopped before a supervisor took the channels: every host's verb gets EOF and
        has ended (bounded, hosts in parallel) before the hosts are closed, so nothing carrying
        the run id outlives a refused `up`."""
        channels = [c for c in (s.take_channel() for s in self.sessions.values()) if c is not None]
        enders = [threading.Thread(target=c.end, name="end-channel", daemon=True) for c in channels]
        for ender in enders:
            ender.start()
        for ender in enders:
            ender.join(5.0)
        for host in self.hosts.values():
            host.close()


def _parallel(items: dict[str, T], fn: Callable[[str, T], list[str]], label: str) -> list[str]:
    """``fn`` for every host at once; a progress line (``label``, hosts done) while it takes long."""
    if not items:
        return []
    with Progress(label, total=len(items), unit="hosts") as progress:

        def one(item: tuple[str, T]) -> list[str]:
            try:
                return fn(*item)
            finally:
                progress.advance()

        results = each_host(one, items.items())
    return [problem for problems in results for problem in problems]


def connect_hosts(plan: Plan, on_notice: Callable[[str], None], run_id: str | None = None,
                  clock: LaunchClock | None = None) -> dict[str, Host]:
    """Connect to every host the plan uses; raise PreflightError naming each one that failed."""
    used = {t.host for t in plan.tasks}
    configs = {name: cfg for name, cfg in plan.profile.hosts.items() if name in used}
    hosts: dict[str, Host] = {}
    left = threading.Event()  # the connect was left (a stop): a host connected after it is closed at once

    def connect(name: str, cfg: object) -> list[str]:
        host = make_host(plan.profile.hosts[name], on_notice=on_notice, run_id=run_id)
        try:
            host.connect()
        except HostError as exc:
            return [str(exc)]
        if left.is_set():
            host.close()
            return []
        hosts[name] = host
        try:
            host.home()  # the run dir's round trip, while other hosts still connect (it is cached)
        except HostError as exc:
            return [str(exc)]
        if clock is not None:
            clock.stamp(name, "connected")
        return []

    try:
        problems = _parallel(configs, connect, "connecting")
    except BaseException:  # a stop: no connection (an SSH master, say) outlives the refused launch
        left.set()
        for host in list(hosts.values()):
            host.close()
        raise
    if problems:
        for host in hosts.values():
            host.close()
        raise PreflightError(problems)
    return hosts


def check_pythons(plan: Plan, hosts: dict[str, Host], import_tf: bool = True,
                  skip: frozenset[tuple[str, str]] = frozenset()) -> tuple[list[str], dict[str, str]]:
    """Each (host, python) pair (but ``skip``) runs and has TensorFlow unless the strategy is custom:
    imported (``import_tf``, for `check`), else read from its package metadata where it has some."""
    need_tf = plan.profile.strategy != "custom"
    tf_check = TF_CHECK if import_tf else TF_METADATA_CHECK
    # a containerised task's python is the image's (launcher/remote/imagecheck.py checks it there); a
    # host whose every task runs in a container needs only the host agent's, without TensorFlow
    bare = {(t.host, t.python) for t in plan.tasks if task_container(plan, t) is None}
    agents = {(h, agent_python(plan, h)) for h in {t.host for t in plan.tasks} if containerised_only(plan, h)}
    pairs = sorted((bare | agents) - skip)
    versions: dict[str, str] = {}

    def check(host_name: str, pythons: list[str]) -> list[str]:
        host = hosts[host_name]
        problems = []
        for python in pythons:
            code = tf_check if need_tf and (host_name, python) in bare else PY_CHECK
            result = host.run(f"{shlex.quote(python)} -c {shlex.quote(code)}", timeout=180)
            if result.exit_code == 127 or ("not found" in result.stderr and not result.stdout):
                problems.append(f"host {host_name}: python {python!r} not found; set `python` in "
                                "[defaults] (or the role) to an interpreter that exists there")
            elif result.exit_code != 0:
                last = (result.stderr.strip().splitlines() or ["unknown error"])[-1]
                problems.append(f"host {host_name}: `import tensorflow` fails with {python} ({last}); "
                                "install tensorflow there or point `python` at an interpreter that has it")
            else:
                versions[f"{host_name} {python}"] = result.stdout.strip()
        return problems

    by_host: dict[str, list[str]] = {}
    for host_name, python in pairs:
        by_host.setdefault(host_name, []).append(python)
    return _parallel(by_host, check, "checking python"), versions


def check_tasks(plan: Plan, pre: Preflight) -> list[str]:
    """One round trip per host: the tasks' workdirs, scripts, modules and programs exist there
    (launcher/remote/taskcheck.py), given ports are free, and tasks without one get a free port picked;
    with several hosts, each holds its ports meanwhile and every host then reaches the others'
    (launcher/remote/reach.py) before the channels close."""
    chosen: dict[str, dict[str, int]] = {}
    path_checks = host_checks(plan)
    reach = needs_reach(plan)
    channels: dict[str, AgentChannel] = {}

    def check(host_name: str, session: HostSession) -> list[str]:
        tasks = [t for t in plan.tasks if t.host == host_name]
        given = [t for t in tasks if t.port is not None]
        auto = [t for t in tasks if t.port is None]
        args = ("0.0.0.0", [t.port for t in given if t.port], len(auto) + len(tasks), path_checks.get(host_name, []))
        if reach:
            answer, channels[host_name] = session.open_preflight(*args, listen=host_name)
        else:
            answer = session.preflight(*args)
        pre.answers[host_name] = (answer, time.time())
        problems, chosen[host_name] = _judge_host(host_name, given, auto, answer)
        return problems

    try:
        problems = _parallel(pre.sessions, check, "checking workdirs and ports")
        for found in chosen.values():
            pre.take_ports(found)
        if reach and not problems:
            problems = check_reach(plan, pre.ports, channels)
            pre.pairs = pair_count(plan, pre.ports)
    finally:
        for channel in channels.values():
            channel.close()
    return problems


def _judge_host(host_name: str, given: list[TaskSpec], auto: list[TaskSpec],
                answer: dict[str, Any]) -> tuple[list[str], dict[str, int]]:
    """A host's preflight answer as problem lines and the port of each of its tasks (given ones,
    then those picked there for the tasks without one). A port the reach check could not hold
    is as busy as one found busy."""
    found = answer.get("ports") or {}
    busy = [int(p) for p in found.get("busy", [])] + [int(p) for p in answer.get("listen_failed") or {}]
    picked = [int(p) for p in found.get("picked", [])]
    failed = list(answer.get("failed") or [])
    problems = describe_all(host_name, failed)
    problems += [f"host {host_name}: port {t.port} for {t.task_id} is already in use; stop what "
                 f"listens there or give roles.{t.role}.port another value" for t in given if t.port in busy]
    problems += image_problems(host_name, answer)
    ports = {t.task_id: int(t.port) for t in given if t.port is not None}
    ports.update({t.task_id: p for t, p in zip(auto, picked, strict=False)})
    # the picks after the auto ports: each task's profiler port (Preflight.take_ports sorts them out)
    tasks = sorted([*given, *auto], key=lambda t: t.task_id)
    ports.update({PROFILER_KEY + t.task_id: p for t, p in zip(tasks, picked[len(auto):], strict=False)})
    return problems, ports


def _python_for(plan: Plan, host_name: str) -> str:
    return agent_python(plan, host_name)


def prepare_hosts(plan: Plan, run_id: str, local_root: Path | None,
                  on_notice: Callable[[str], None], progress: Callable[[str], None],
                  import_tf: bool = False, clock: LaunchClock | None = None,
                  connected: Callable[[], None] | None = None) -> Preflight:
    """Connect, check interpreters and ports, upload the agent: everything before the first task.
    ``import_tf``: `check`: import TensorFlow on every host instead of reading its version, and
    create no outputs there (only make sure they could be: `up` creates them).
    Spares are checked as hosts too, each with a task of every role rehearsed on it
    (``placement.rehearsal``); their sessions are kept, their rehearsed ports are not.
    ``connected``: called once every host is connected, before the hosts are checked (the
    supervisor imports its own modules from there on, while the hosts answer)."""
    plan = rehearsal(plan)
    n = len({t.host for t in plan.tasks})
    progress(f"connecting to {n} host{'s' if n != 1 else ''}")
    hosts = connect_hosts(plan, on_notice, run_id, clock)
    if connected is not None:
        connected()
    pre = Preflight(hosts)
    pre.clock = clock
    try:
        if not import_tf and plan.profile.sync is None:
            try:
                _fast_preflight(plan, run_id, local_root, pre, progress)
            except BaseException:
                pre.close()
                raise
        else:
            _stepwise_preflight(plan, run_id, local_root, pre, progress, on_notice, import_tf)
    except PreflightError as exc:
        for warning in exc.warnings:  # told beside the errors: the operator fixes both at once
            on_notice(f"warning: {warning}")
        raise
    for warning in pre.warnings:
        on_notice(f"warning: {warning}")
    pre.ports = {t: p for t, p in pre.ports.items() if not is_rehearsal(t)}
    pre.profiler_ports = {t: p for t, p in pre.profiler_ports.items() if not is_rehearsal(t)}
    return pre


def _stepwise_preflight(plan: Plan, run_id: str, local_root: Path | None, pre: Preflight,
                        progress: Callable[[str], None], on_notice: Callable[[str], None], import_tf: bool) -> None:
    """Interpreters, upload, [sync], then paths, ports and the reach check: one step at a time."""
    hosts = pre.hosts
    try:
        progress("checking python" + ("" if plan.profile.strategy == "custom" else " and TensorFlow")
                 + " on the hosts")
        problems, pre.versions = check_pythons(plan, hosts, import_tf)
        if problems:
            raise PreflightError(problems)
        _sessions(plan, run_id, local_root, pre, ask_gpus=import_tf, make_outputs=not import_tf)
        upload_problems = _parallel(pre.sessions, _upload, "uploading the agent")
        if upload_problems:
            raise PreflightError(upload_problems)
        try:
            sync_hosts(plan, pre.sessions, progress, on_notice)
        except HostError as exc:
            raise PreflightError([str(exc)]) from None
        progress("checking workdirs, scripts and ports" + (", and that the hosts reach each other"
                                                            if needs_reach(plan) else ""))
        problems = check_tasks(plan, pre)
        if problems:
            raise PreflightError(problems)
        judge_parity(plan, pre)
    except BaseException:
        pre.close()
        raise


def judge_parity(plan: Plan, pre: Preflight) -> None:
    """The hosts side by side (launcher/remote/parity.py): errors raise PreflightError, warnings are kept."""
    pre.rows = [row_from_answer(name, answer, received, pre.sessions[name].outputs_dir, pre.sessions[name].base_dir,
                                pre.versions.get(f"{name} {pre.sessions[name].python}"))
                for name, (answer, received) in pre.answers.items()]
    for row in pre.rows:
        add_images(row, pre.answers[row.host][0], containerised_only(plan, row.host))
    order = {name: i for i, name in enumerate(hosts_of(plan))}
    pre.rows.sort(key=lambda r: order.get(r.host, len(order)))
    pre.warnings, errors = judge(plan, pre.rows)
    if errors:
        raise PreflightError(errors, pre.rows, pre.warnings)


def _sessions(plan: Plan, run_id: str, local_root: Path | None, pre: Preflight, ask_gpus: bool = False,
              make_outputs: bool = True) -> None:
    """A HostSession per host; in parallel, as finding a host's home directory is a round trip.
    ``ask_gpus``: every host's preflight reads its GPUs (else only where tasks are given some) and
    imports TensorFlow in the tasks' images (else reads its package metadata there).
    ``make_outputs``: False for `check`, which creates no outputs (it checks that they could be)."""
    root = str(local_root) if local_root is not None else None
    images = container_checks(plan, "import" if ask_gpus else "metadata")

    def session(name: str, host: Host) -> HostSession:
        config = plan.profile.hosts[name]
        base = remote_base_dir(host, config, run_id, root)
        outputs = remote_outputs_dir(host, config, plan.profile.outputs, plan.profile.directory)
        session = HostSession(config, host, run_id, base, _python_for(plan, name), outputs)
        session.ask_gpus = ask_gpus or any(t.gpus for t in plan.tasks if t.host == name)
        session.make_outputs = make_outputs
        session.private_network = plan.private_network
        session.containers = images.get(name, [])
        session.clock = pre.clock
        return session

    made = each_host(lambda item: session(*item), pre.hosts.items())  # a host's HostError (no $HOME) is raised here
    pre.sessions.update(zip(pre.hosts, made, strict=True))


def _fast_preflight(plan: Plan, run_id: str, local_root: Path | None, pre: Preflight,
                    progress: Callable[[str], None]) -> None:
    """`up` without [sync]: per host ONE round trip uploads the agent and runs its preflight (the
    host's python and TensorFlow version from package metadata, paths, ports); a second python on
    a host is checked apart. Problems are worded as in the step-by-step path."""
    need_tf = plan.profile.strategy != "custom"
    progress("checking python" + (" and TensorFlow" if need_tf else "") + ", workdirs, scripts and ports")
    _sessions(plan, run_id, local_root, pre)
    path_checks = host_checks(plan)
    chosen: dict[str, dict[str, int]] = {}
    reach = needs_reach(plan)
    agent_digest()  # built and hashed once, before the hosts' threads (each would build it on a cold cache)

    def check(host_name: str, session: HostSession) -> list[str]:
        tasks = [t for t in plan.tasks if t.host == host_name]
        given = [t for t in tasks if t.port is not None]
        auto = [t for t in tasks if t.port is None]
        # where the host agent can be forked from a command (not a Slurm step), that command is
        # this one, and its channel stays open as the host's follow channel; a Slurm step's channel
        # stays open only for the reach check
        host_tf = need_tf and not containerised_only(plan, host_name)  # else TensorFlow is the image's
        # one more port per task: its profiler server (`distlaunch profile`), never one of TF_CONFIG's
        args = ("0.0.0.0", [t.port for t in given if t.port], len(auto) + len(tasks), path_checks.get(host_name, []),
                host_tf)
        listen = host_name if reach else None
        try:
            if session.host.detach_by_setsid or reach:
                answer = session.open_channel(*args, listen=listen, follow=session.host.detach_by_setsid)
            else:
                answer = session.prepare_and_preflight(*args)
        except HostError as exc:
            if getattr(exc, "python_missing", False):
                return [str(exc)]
            return [f"host {host_name}: cannot upload the agent to {session.base_dir}: {exc}"]
        pre.answers[host_name] = (answer, time.time())
        if host_tf:
            tf = answer.get("tensorflow") or {}
            if tf.get("error"):
                return [f"host {host_name}: `import tensorflow` fails with {session.python} ({tf['error']}); "
                        "install tensorflow there or point `python` at an interpreter that has it"]
            pre.versions[f"{host_name} {session.python}"] = (f"{answer.get('python')} {tf.get('version')} "
                                                              f"({tf.get('how')})")
        else:
            pre.versions[f"{host_name} {session.python}"] = str(answer.get("python"))
        problems, chosen[host_name] = _judge_host(host_name, given, auto, answer)
        return problems

    problems = _parallel(pre.sessions, check, "uploading the agent, checking")
    agent_pythons = frozenset((name, s.python) for name, s in pre.sessions.items())
    more, versions = check_pythons(plan, pre.hosts, import_tf=False, skip=agent_pythons)
    pre.versions.update(versions)
    if problems or more:
        raise PreflightError(problems + more)
    for found in chosen.values():
        pre.take_ports(found)
    if reach:
        progress("checking that every host reaches the other hosts' task ports")
        channels = {name: s.channel for name, s in pre.sessions.items() if s.channel is not None}
        problems = check_reach(plan, pre.ports, channels)
        for session in pre.sessions.values():
            if not session.host.detach_by_setsid:  # a Slurm step's channel: its host agent is a step apart
                channel = session.take_channel()
                if channel is not None:
                    channel.close()
        if problems:
            raise PreflightError(problems)
        pre.pairs = pair_count(plan, pre.ports)
    judge_parity(plan, pre)


def _upload(name: str, session: HostSession) -> list[str]:
    try:
        session.prepare()
        if session.clock is not None:
            session.clock.stamp(name, "agent")
            session.clock.agent_from[name] = "sent"
    except (HostError, OSError) as exc:
        return [f"host {name}: cannot upload the agent to {session.base_dir}: {exc}"]
    return []


def preflight_plan(plan: Plan, as_json: bool = False) -> list[str]:
    """For `check`: every problem on the hosts as one line each (empty when all is well); prints
    the hosts side by side (``as_json``: as one JSON object on stdout, launcher/remote/parity.py)."""

    def progress(msg: str) -> None:
        print(f"... {msg}", file=sys.stderr)

    def notice(msg: str) -> None:
        with paused():
            print(f"distlaunch: {msg}", file=sys.stderr, flush=True)

    try:
        pre = prepare_hosts(plan, "preflight", private_state_dir("preflight"), notice, progress, import_tf=True)
    except PreflightError as exc:
        if as_json:
            print(json.dumps(as_json_table(exc.rows, exc.warnings, exc.problems)))
        elif exc.rows:
            print(parity_table(exc.rows), end="")
        return exc.problems
    try:
        if as_json:
            print(json.dumps(dict(as_json_table(pre.rows, pre.warnings, []), reach_pairs=pre.pairs)))
            return []
        for where, version in sorted(pre.versions.items()):
            print(f"  {where}: {version}")
        print("\n" + parity_table(pre.rows), end="")
        print("preflight: all hosts reachable, interpreters work, workdirs and scripts found, ports free")
        if pre.pairs:
            print(f"preflight: every host reaches the other hosts' task ports ({pre.pairs} pairs, at the "
                  "addresses TF_CONFIG uses)")
        storage = probe_outputs(pre.sessions)
        if storage is not None:
            print(f"preflight: {storage.line()}")
    finally:
        pre.close()
    return []
