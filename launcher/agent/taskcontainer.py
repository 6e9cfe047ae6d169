"""A task in a container, as the agent runs it: the runtime's command line, the host pid, the stop
through the runtime, and the sweep of a run's containers by label.

The task still runs under the wrapper shell in its own process group (launcher/agent/spec.py); only
its command is the runtime's ``run`` (its adapter's ``run_argv``) instead of the task's shell. Where a
daemon owns the container (docker, podman), killing that client leaves the container running:
stops go through the runtime (``stop`` with the task's grace, then ``kill``), every incarnation's
container is force-removed when it ends, and ``sweep`` removes whatever carries the run's label.
The agent learns the container's main process as the host sees it (``host_pid_argv``) and samples,
reads stacks of and judges OOM kills by that process tree.

A role with ``container`` (DESIGN.md section 4) reaches the agent as ``spec.json``'s ``container``
(the ``containerrt.ContainerSpec`` JSON) and ``outputs``. The task still runs under the wrapper in
its own session and group; only its command becomes the runtime's ``run`` (the adapter's run
command, built in ``agent/taskcontainer.py``): host network (and IPC), ``--init``, the name
``dl-<run>-<task>-<incarnation>`` (a new one per incarnation) and the labels ``distlaunch.run`` /
``distlaunch.task``, ``--user`` the agent's uid:gid, the host run dir (agent.pyz with autolog and
report.py, the task dir and its stacks file, ``{run_dir}``), the agent's code where it lies
elsewhere, the workdir and the outputs mounted at the same paths (plus the spec's ``mounts``), the
plan's GPUs as the runtime's flags (the adapter's environment numbers them from 0 inside docker),
and the task's shell with its setup lines and its command, ``exec``'d where it is one simple command
(``spec.exec_last``), so a stop signal reaches the program. Where it is not (``a && b``, a pipe),
the init signals the command's whole process group: docker's init is tini, given
``TINI_KILL_PROCESS_GROUP=1``; podman's (catatonit) reads no variable, so the command runs under a
second ``/run/podman-init -g --`` (catatonit >= 0.1.4 and tini both take ``-g``; built and
unit-tested, not run here). HOME inside is ``<task dir>/home`` (made 0700 by the agent, mounted with
the run dir): the agent's uid has no passwd entry in the image, where HOME would be ``/``; it goes
by value (``-e HOME=PATH``), as the client's own HOME must stay (docker's config, podman's storage
live there), and a HOME in the task's env wins. The task's variables (``spec.task_variables``: the
spec's env, its secrets, TF_CONFIG, DISTLAUNCH_*, PYTHONPATH) go in by name only (``-e NAME``):
their values are in the client's environment, never on a command line; the agent's own environment
stays outside. The profile refuses a container ``options`` or ``mounts`` value that holds a value
from the launcher's environment (``${env:...}``), and an option giving a secret-looking variable its
value (``-e API_TOKEN=...``): both would be in spec.json and on the command line, unmasked.
``{python}`` is ``python3`` (the image's) unless the profile names one; the host agent itself runs
on the host's interpreter (``plan.agent_python``). ``pull = "always"`` pulls in the preflight; a
task's own start (a restart too) then runs what the host has, so no restart runs a newer image than
its peers.

Where a daemon owns the container (docker, podman) the client in the task's group is not the task:
the runner polls the adapter's host pid after the start (and after an adoption), for as long as the
task runs (0.2 s, doubling to 5 s between looks), for the container's main process as the host sees
it (docker-init; the task's Python is its descendant), keeps it in ``task.json`` (``container``,
``host_pid``), and samples that process tree (CPU, RSS, the OOM watch's cgroup counters); ``stacks``
reads the Python under it (py-spy from the host; autolog's faulthandler writes the pid its namespace
gives it, which ``stacks.ns_pid`` maps). A stop is the runtime's ``stop -t <grace>`` (then ``kill``,
then the client's group), never a signal to the client alone; every incarnation's container is
force-removed when it ends, and confirmed gone (10 s at most) before the task's final event, which
may restart the task: the next incarnation must not meet the last one still holding its host-network
ports. Tasks stopped with no agent to run them (``stop`` verb, ``_stop_unsupervised``) get the
runtime's ``stop -t <grace>`` for the containers ``task.json`` names (all of a runtime in one call,
so the graces run side by side), then their removal, and only then the client's group its SIGKILL.
``sweep`` removes every container labelled with the run, asking the daemon runtimes the run's specs
name and docker and podman wherever they are on the PATH (the task dirs may be gone; one of those
that does not answer is no leftover); the sweep verb's timeout covers the processes' grace and, per
runtime, a list, the removal and a list again. So ``docker ps -a --filter label=distlaunch.run=RUN``
is empty after success, failure, ``down`` and the orphan rule. ``docker run`` exiting 125 with the
client's own error line (or 126/127 with the daemon's words; a program in the container may exit 125
itself) is a permanent failure whose reason is "container did not start: <the daemon's words>"
(``taskcontainer.start_failure``; the cause keeps it, and the signature ``container_start`` reads
the same from the output). apptainer, enroot and pyxis run the container as the client's own child:
the group's signals and sampling work as for a bare task.

Stdlib-only, Python >= 3.9 (runs on hosts from the agent zipapp).
"""

from __future__ import annotations

import dataclasses
import json
import os
import re
import shutil
import subprocess
import time
from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple

from launcher.agent import containerrt as rt
from launcher.agent.containeradapters import ADAPTERS, DAEMON_RUNTIMES, DEFAULT_RUNTIME, adapter_for
from launcher.agent.procs import pause
from launcher.agent.spec import AgentSpec, agent_pythonpath_entry, task_argv

#: how long one call of the runtime's client may take (a stop waits the grace on top)
RUNTIME_SECONDS = 30.0
#: the first and the longest wait between two looks for a started container's host pid: it is looked
#: for as long as the task runs (the container may be created late: the wrapper waits for its batch)
HOST_PID_FIRST_WAIT = 0.2
HOST_PID_MAX_WAIT = 5.0
#: how long a task's end waits for its removed container to be gone (the next incarnation may
#: need its host-network ports)
GONE_SECONDS = 10.0
#: a runtime found only on the PATH (no task of the run named it) answers the sweep within this
#: (a docker client without a daemon must not hold up every bare run's teardown)
PATH_RUNTIME_SECONDS = 10.0
#: the longest a ``sweep`` of the containers may take: list, remove, list again, per daemon runtime
SWEEP_SECONDS = 3 * RUNTIME_SECONDS * len(DAEMON_RUNTIMES)
#: what ``docker run`` (and podman's) exit with when the runtime itself failed, before the command ran
RUNTIME_FAILED = 125
#: how any runtime's client starts its own errors ("Error response from daemon" follows "docker: ")
_ANY_PREFIX = tuple(dict.fromkeys(p for adapter in ADAPTERS.values() for p in adapter.client_errors))
#: HOME inside a docker/podman container: a directory of the task dir (mounted with the run dir)
HOME_DIR = "home"


def container_of(spec: AgentSpec) -> Optional[rt.ContainerSpec]:
    return rt.ContainerSpec.from_json(spec.container) if spec.container else None


def daemon_owned(container: rt.ContainerSpec) -> bool:
    """A daemon (or conmon) owns the container: signals to the client do not stop it."""
    return container.adapter.daemon


def name_of(spec: AgentSpec) -> str:
    return rt.container_name(spec.run, spec.task, spec.incarnation)


def mounts(spec: AgentSpec, task_dir: str) -> List[str]:
    """Host paths the task sees at the same path: the host run dir (the zipapp with autolog and
    report.py, the task dir and its stacks file, ``{run_dir}``), the agent's code where it lies
    elsewhere, the workdir and the outputs; a path inside another one is not mounted twice."""
    run_dir = os.path.dirname(os.path.dirname(os.path.abspath(task_dir)))
    wanted = [run_dir, agent_pythonpath_entry(), os.path.expanduser(spec.workdir)]
    if spec.outputs:
        wanted.append(os.path.expanduser(spec.outputs))
    found: List[str] = []
    for path in sorted({os.path.normpath(os.path.abspath(p)) for p in wanted if p}, key=len):
        if not any(path == m or path.startswith(m.rstrip("/") + "/") for m in found):
            found.append(path)
    return found


def client_environment(spec: AgentSpec, container: rt.ContainerSpec, env: Dict[str, str],
                       names: Sequence[str]) -> Dict[str, str]:
    """The environment of the runtime's client: the task's, from which the container takes the
    variables ``names`` by name, as the runtime needs them (GPUs numbered from 0 inside docker)."""
    return container.adapter.environ(env, env_names=list(names), gpus=list(spec.gpus) or None)


def run_command(spec: AgentSpec, container: rt.ContainerSpec, task_dir: str, names: Sequence[str]) -> List[str]:
    """The runtime's command line that runs the task's shell and script in its container, passing
    the variables ``names`` by name only (values never on a command line: ps shows those).
    docker/podman: HOME inside is ``<task dir>/home`` (made here, private), as the agent's uid has
    no passwd entry in the image (HOME=/ there: ~/.keras and the like would fail).
    ValueError for a path the runtime cannot mount (':' or ',' in it)."""
    if container.pull == "always":  # the preflight pulled it for the job: a restart must not run a newer image
        container = dataclasses.replace(container, pull="missing")
    home = None
    if daemon_owned(container):
        home = os.path.join(os.path.abspath(task_dir), HOME_DIR)
        try:
            os.makedirs(home, mode=0o700, exist_ok=True)
        except OSError as exc:
            raise ValueError("cannot make the container's home %s: %s" % (home, exc.strerror or exc)) from None
    return container.adapter.run_argv(
        container, name=name_of(spec), labels=rt.task_labels(spec.run, spec.task), env_names=sorted(set(names)),
        mounts=mounts(spec, task_dir), workdir=os.path.abspath(os.path.expanduser(spec.workdir)),
        gpus=list(spec.gpus) or None, user="%d:%d" % (os.getuid(), os.getgid()), command=task_argv(spec),
        node=os.environ.get("SLURMD_NODENAME"), container_home=home)


def _call(argv: Sequence[str], timeout: float = RUNTIME_SECONDS) -> Tuple[int, str, str]:
    """(exit code, stdout, stderr) of a runtime command; 127 when the runtime is not installed, 124
    when it did not answer in time."""
    try:
        done = subprocess.run(list(argv), stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                              timeout=timeout, check=False)
    except subprocess.TimeoutExpired:
        return 124, "", "%s did not answer within %g s" % (argv[0], timeout)
    except OSError as exc:
        return 127, "", "%s: %s" % (argv[0], exc.strerror or exc)
    return done.returncode, done.stdout.decode("utf-8", "replace"), done.stderr.decode("utf-8", "replace")


def host_pid(container: rt.ContainerSpec, name: str) -> Optional[int]:
    """The container's main process as the host sees it; None while it has none (not started yet,
    or ended) or where the runtime does not say (then the task's own child is it)."""
    argv = container.adapter.host_pid_argv(name)
    if argv is None:
        return None
    code, out, _ = _call(argv, 10.0)
    words = out.split()
    if code != 0 or not words or not words[0].isdigit():
        return None
    pid = int(words[0])
    return pid if pid > 0 else None


def learn_host_pid(container: rt.ContainerSpec, name: str, running: Callable[[], bool]) -> Optional[int]:
    """Poll for the host pid for as long as the task runs: soon at first (the container starts in
    ~0.5 s), then less and less often (a task whose wrapper waits for its batch may start late)."""
    wait = HOST_PID_FIRST_WAIT
    while running():
        pid = host_pid(container, name)
        if pid is not None:
            return pid
        pause(wait)
        wait = min(HOST_PID_MAX_WAIT, wait * 2)
    return None


def stop(container: rt.ContainerSpec, name: str, grace: float) -> bool:
    """Stop the container through its runtime: SIGTERM, ``grace`` seconds, SIGKILL (``docker stop -t``);
    False where the runtime has no stop (the task's own signals do it) or it failed."""
    argv = container.adapter.stop_argv([name], grace)
    if argv is None:
        return False
    return _call(argv, grace + RUNTIME_SECONDS)[0] == 0


def kill(container: rt.ContainerSpec, name: str) -> bool:
    argv = container.adapter.kill_argv(name)
    return argv is not None and _call(argv)[0] == 0


def remove(runtime: str, names: Sequence[str]) -> None:
    """Force-remove these containers (killed if running); one that is gone already is no error."""
    argv = adapter_for(runtime).remove_argv(list(names))
    if argv is not None:
        _call(argv)


def exists(runtime: str, name: str) -> bool:
    """Whether the runtime still has a container of that name (False where it cannot say)."""
    argv = adapter_for(runtime).exists_argv(name)
    return argv is not None and _call(argv, 10.0)[0] == 0


def remove_until_gone(runtime: str, name: str, timeout: float = GONE_SECONDS) -> bool:
    """Force-remove the container and confirm it is gone, trying again (a removal the daemon's own
    ``--rm`` has in progress refuses a second one) for at most ``timeout`` s; whether it is gone."""
    deadline = time.monotonic() + timeout
    while True:
        remove(runtime, [name])
        if not exists(runtime, name):
            return True
        if time.monotonic() >= deadline:
            return False
        pause(0.2)


def stop_task_containers(task_dirs: Sequence[str], grace: Optional[float]) -> None:
    """Tasks stopped with no agent to run them: their last containers (``task.json`` names them)
    through the runtime, as a supervised stop would: SIGTERM, the grace (``grace``, else each
    spec's), SIGKILL (``docker stop``, all of a runtime at once), then removed."""
    by_runtime: Dict[str, List[str]] = {}
    longest = 0.0
    for task_dir in task_dirs:
        try:
            spec: Optional[AgentSpec] = AgentSpec.load(os.path.join(task_dir, "spec.json"))
        except (OSError, ValueError, TypeError, KeyError):
            spec = None
        try:
            container = container_of(spec) if spec is not None else None
        except ValueError:
            container = None
        name = _recorded_name(task_dir)
        if spec is None or container is None or not daemon_owned(container) or name is None:
            continue
        by_runtime.setdefault(container.runtime, []).append(name)
        longest = max(longest, spec.grace_seconds if grace is None else grace)
    for runtime, names in by_runtime.items():
        argv = adapter_for(runtime).stop_argv(names, longest)
        if argv is not None:
            _call(argv, longest + RUNTIME_SECONDS)
        remove(runtime, names)


def _recorded_name(task_dir: str) -> Optional[str]:
    try:
        with open(os.path.join(task_dir, "task.json"), encoding="utf-8") as f:
            name = json.load(f).get("container")
    except (OSError, ValueError, AttributeError):
        return None
    return name if isinstance(name, str) and name else None


def listed(runtime: str, run_id: str, timeout: float = RUNTIME_SECONDS) -> Tuple[List[str], str]:
    """(names, "") of every container, running or not, labelled with the run; ([], why) where the
    runtime did not answer."""
    argv = adapter_for(runtime).list_argv({rt.RUN_LABEL: run_id})
    if argv is None:
        return [], ""
    code, out, err = _call(argv, timeout)
    if code != 0:
        return [], (err.strip().splitlines() or ["exit code %d" % code])[-1]
    return [line.strip() for line in out.splitlines() if line.strip()], ""


def run_runtimes(run_dir: str) -> List[str]:
    """The daemon runtimes the run's tasks on this host use (from their spec.json files)."""
    found: List[str] = []
    tasks = os.path.join(run_dir, "tasks")
    try:
        slugs = sorted(os.listdir(tasks))
    except OSError:
        return []
    for slug in slugs:
        try:
            with open(os.path.join(tasks, slug, "spec.json"), encoding="utf-8") as f:
                container = json.load(f).get("container")
        except (OSError, ValueError, AttributeError):
            continue
        runtime = container.get("runtime", DEFAULT_RUNTIME) if isinstance(container, dict) else None
        if runtime in DAEMON_RUNTIMES and runtime not in found:
            found.append(runtime)
    return found


def sweep(run_dir: Optional[str], run_id: str, kill_them: bool) -> List[Dict[str, Any]]:
    """The run's containers on this host (by its label, whatever their state), removed first with
    ``kill_them``: what is left, as ``sweep`` answers it. Asked: the daemon runtimes the run's
    specs name, and any other on the PATH (the task dirs may be gone); one of those that does not
    answer (a client without a daemon) is no leftover."""
    named = run_runtimes(run_dir) if run_dir else []
    left: List[Dict[str, Any]] = []
    for runtime in [*named, *(r for r in DAEMON_RUNTIMES if r not in named and shutil.which(r))]:
        timeout = RUNTIME_SECONDS if runtime in named else PATH_RUNTIME_SECONDS
        names, why = listed(runtime, run_id, timeout)
        if kill_them and names:
            remove(runtime, names)
            names, why = listed(runtime, run_id, timeout)
        left += [{"container": n, "cmdline": "%s container %s" % (runtime, n)} for n in names]
        if why and runtime in named:
            left.append({"container": "?", "cmdline": "%s did not list the run's containers: %s" % (runtime, why)})
    return left


def start_failure(returncode: int, last_stderr: Sequence[str], image: str = "",
                  runtime: Optional[str] = None) -> Optional[str]:
    """The runtime's own words when the container never started: "container did not start: ...".
    ``docker run`` exits 125 when the daemon refused ("docker: Error response from daemon: ...",
    then "See 'docker run --help'."), 126/127 when the image has no such program to run. None for
    any other exit, for an exit without the client's own error line (the program in the container
    may exit 125 itself), for a 126/127 that the command in the container gave, and for runtimes
    other than docker and podman (``runtime``; None: either's words)."""
    prefixes = adapter_for(runtime).client_errors if runtime is not None else _ANY_PREFIX
    if returncode not in (RUNTIME_FAILED, 126, 127) or not prefixes:
        return None
    lines = [ln.strip() for ln in last_stderr if ln.strip() and not ln.strip().startswith(("See '", "Run '"))]
    said = [ln for ln in lines if ln.startswith(prefixes)]
    if returncode != RUNTIME_FAILED:
        said = [ln for ln in said if "OCI runtime" in ln or "Error response from daemon" in ln]
    if not said:
        return None
    line = said[-1]
    changed = True
    while changed:
        changed = False
        for prefix in _ANY_PREFIX:
            if line.startswith(prefix):
                line, changed = line[len(prefix):], True
    why = line.rstrip(".") or "the runtime exited with %d" % returncode
    named = image and re.search(r"(?<![\w./:-])%s(?![\w./:-])" % re.escape(image), why)
    return "container did not start: %s" % (why if named or not image else "%s (image %s)" % (why, image))
