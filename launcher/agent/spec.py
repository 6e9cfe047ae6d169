"""What one task is (``tasks/<slug>/spec.json``) and how it is started: argv, environment, exit.

Stdlib-only, Python >= 3.9 (runs on hosts from the agent zipapp).
"""

from __future__ import annotations

import errno
import functools
import json
import os
import re
import shlex
import signal
from dataclasses import dataclass, field
from typing import Any, Dict, List, Optional, Tuple

#: autolog's sitecustomize directory inside the zipapp (launcher/remote/agentpack.py SITE_DIR)
AUTOLOG_SITE_DIR = "distlaunch_site"
#: the file (in the task dir) autolog's faulthandler appends stacks to, and the variable naming it
STACKS_FILE = "stacks.txt"
STACKS_ENV = "DISTLAUNCH_STACKS_FILE"
#: the file (in the task dir) where the task's wrapper shell leaves the exit status
EXIT_STATUS_FILE = "exit_status"

# The task's own shell runs under this wrapper, which writes the exit status to a file before it
# ends: an agent that adopts a task after its predecessor was killed is not the task's parent and
# could not learn how it ended otherwise. The wrapper defers TERM/INT/HUP until its child ended
# (the whole group gets them anyway) and dies of the child's signal, so the parent sees it as before.
# Its stdin is the batch gate (``HostAgent.start``): it waits there until the agent has spawned the
# whole batch, so tasks that boot at once do not starve the spawning of the rest (stdin /dev/null:
# no wait); the command gets /dev/null. Before anything, it moves itself into the task's own cgroup
# ($2, the cgroup.procs file; empty: none, launcher/agent/taskcgroup.py), which all it starts inherit.
_WRAPPER = ('[ -z "$2" ] || { echo 0 >"$2"; } 2>/dev/null; read _ 2>/dev/null; exec </dev/null; '
            'f=$1; shift 2; trap : HUP INT TERM; "$@"; s=$?; echo $s >"$f"; '
            'if [ $s -gt 128 ] && [ $s -lt 160 ]; then trap - HUP INT TERM; kill -$((s - 128)) $$; fi; exit $s')


@dataclass
class AgentSpec:
    """One task as the agent runs it: the contents of ``tasks/<slug>/spec.json``. The launcher
    builds it (``launcher/supervise/agentspec.py``) and sends ``to_dict()``; the agent writes that
    to the file and reads it back with ``load``."""

    run: str
    task: str
    command: str
    workdir: str
    host: str = "local"
    incarnation: int = 0
    restarts: int = 0
    env: Dict[str, str] = field(default_factory=dict)
    grace_seconds: float = 10.0
    orphan_grace_seconds: float = 60.0
    sample_interval: float = 1.0
    metrics: Dict[str, str] = field(default_factory=dict)
    gpus: List[int] = field(default_factory=list)
    setup: List[str] = field(default_factory=list)  # shell lines run before the command, in its shell
    shell: str = ""  # e.g. "bash -lc"; empty: /bin/sh -c
    autolog: bool = True
    #: the script (setup lines and command) holds a secret: ``command``/``setup`` here are masked,
    #: and the real script comes with the task's secrets as SCRIPT_VAR (memory, then its environment)
    script_in_env: bool = False
    #: the role's container (``containerrt.ContainerSpec`` as JSON); None: the task runs bare
    container: Optional[Dict[str, Any]] = None
    #: the job's outputs on this host (mounted into a container at the same path); "" where unknown
    outputs: str = ""
    #: the host's preemption_notice command (run every few seconds; exit 0: the host is about to go)
    preemption_notice: str = ""
    #: a directory of checkpoints autolog cannot see (relative: to the workdir), watched by the
    #: agent's sample loop (``launcher/agent/ckptwatch.py``); "": none
    checkpoint_dir: str = ""

    def to_dict(self) -> Dict[str, Any]:
        """What ``spec.json`` holds (the agent writes it with sorted keys: ``agentfiles.write_specs``);
        ``from_dict`` reads it back."""
        return {
            "run": self.run, "task": self.task, "host": self.host,
            "incarnation": self.incarnation, "restarts": self.restarts,
            "command": self.command, "workdir": self.workdir, "env": dict(self.env), "gpus": list(self.gpus),
            "grace_seconds": self.grace_seconds, "orphan_grace_seconds": self.orphan_grace_seconds,
            "sample_interval": self.sample_interval, "metrics": dict(self.metrics), "setup": list(self.setup),
            "shell": self.shell, "autolog": self.autolog, "script_in_env": self.script_in_env,
            "container": dict(self.container) if self.container is not None else None,
            "outputs": self.outputs, "preemption_notice": self.preemption_notice,
            "checkpoint_dir": self.checkpoint_dir,
        }

    @classmethod
    def from_dict(cls, obj: Dict[str, Any]) -> "AgentSpec":
        missing = [k for k in ("run", "task", "command", "workdir") if k not in obj]
        if missing:
            raise ValueError("spec.json lacks %s" % ", ".join(missing))
        return cls(
            run=str(obj["run"]),
            task=str(obj["task"]),
            command=str(obj["command"]),
            workdir=str(obj["workdir"]),
            host=str(obj.get("host") or "local"),
            incarnation=int(obj.get("incarnation") or 0),
            restarts=int(obj.get("restarts") or 0),
            env={str(k): str(v) for k, v in (obj.get("env") or {}).items()},
            grace_seconds=float(obj.get("grace_seconds", 10.0)),
            orphan_grace_seconds=float(obj.get("orphan_grace_seconds", 60.0)),
            sample_interval=float(obj.get("sample_interval", 1.0)),
            metrics={str(k): str(v) for k, v in (obj.get("metrics") or {}).items()},
            gpus=[int(g) for g in (obj.get("gpus") or [])],
            setup=[str(line) for line in (obj.get("setup") or [])],
            shell=str(obj.get("shell") or ""),
            script_in_env=bool(obj.get("script_in_env")),
            autolog=bool(obj.get("autolog", True)),
            container=dict(obj["container"]) if isinstance(obj.get("container"), dict) else None,
            outputs=str(obj.get("outputs") or ""),
            preemption_notice=str(obj.get("preemption_notice") or ""),
            checkpoint_dir=str(obj.get("checkpoint_dir") or ""),
        )

    @classmethod
    def load(cls, path: str) -> "AgentSpec":
        with open(path, encoding="utf-8") as f:
            return cls.from_dict(json.load(f))


# -- small process helpers (Linux /proc, with kill(0) fallbacks) ------------------------------



def describe_exit(returncode: int) -> Tuple[int, str]:
    """(exit code as a shell reports it, reason): a signal N becomes 128+N."""
    if returncode < 0:
        signum = -returncode
        try:
            name = signal.Signals(signum).name
        except ValueError:
            name = "signal %d" % signum
        return 128 + signum, "killed by %s" % name
    return returncode, "exit code %d" % returncode


def start_error_text(exc: OSError, workdir: str) -> str:
    """Why Popen failed, naming the workdir when the chdir into it was what failed."""
    if exc.errno in (errno.ENOENT, errno.ENOTDIR, errno.EACCES):
        what = {errno.ENOENT: "does not exist", errno.ENOTDIR: "is not a directory",
                errno.EACCES: "cannot be entered (permission denied)"}[exc.errno]
        return "workdir %s %s" % (workdir, what)
    return str(exc)


#: what /bin/sh says on stderr when it cannot run the command (exit 127: not found, 126: not executable)
_SHELL_CANNOT = re.compile(r"(not found|No such file or directory|Permission denied|cannot execute)\s*$")


def shell_cannot_execute(returncode: int, last_stderr_line: str) -> Optional[str]:
    """The shell's own "command not found" / "cannot execute", as opposed to a program's exit 126/127.

    Both conditions are needed: a program may exit 127 by itself, and print such words too."""
    if returncode not in (126, 127) or not _SHELL_CANNOT.search(last_stderr_line):
        return None
    return last_stderr_line.strip()


def agent_pythonpath_entry() -> str:
    """The directory (or zipapp) holding the ``launcher`` package this agent runs from."""
    return os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


#: secret env values reach the agent in its own environment, never in spec.json:
#: a JSON object {task slug: {NAME: value}} that the launcher's start script read from stdin
SECRETS_VAR = "DISTLAUNCH_SECRETS"
#: the secret script of a task whose command or setup holds a secret (``AgentSpec.script_in_env``)
SCRIPT_VAR = "DISTLAUNCH_SCRIPT"


def task_secrets(task: str) -> Dict[str, str]:
    try:
        every = json.loads(os.environ.get(SECRETS_VAR) or "{}")
        mine = every.get(task.replace(":", "-")) or {}
    except (ValueError, AttributeError):
        return {}
    return {str(k): str(v) for k, v in mine.items()}


#: words that make a command more than one program to ``exec`` (shell syntax, builtins)
_NOT_EXECABLE = frozenset({"exec", "cd", "source", ".", "if", "for", "while", "until", "case", "{", "(", "!",
                           "eval", "set", "export", "ulimit", "umask", "time", "function", "select"})


def exec_last(command: str) -> str:
    """``exec COMMAND`` where ``COMMAND`` is one simple command (the shell is then replaced by it, so a
    container's stop signal reaches the program itself, not a shell that dies of it and leaves the
    program to the container's end); the command as it is where ``exec`` would change its meaning
    (``a && b``, ``VAR=1 prog``, a pipe, a builtin, unbalanced quotes)."""
    text = command.strip()
    if not text or "\n" in text:
        return command
    lexer = shlex.shlex(text, posix=True, punctuation_chars=True)
    lexer.whitespace_split = True
    try:
        words = list(lexer)
    except ValueError:
        return command
    if not words or words[0] in _NOT_EXECABLE or re.match(r"^[A-Za-z_][A-Za-z0-9_]*=", words[0]):
        return command
    for word in words:
        if word and all(ch in "();<>|&" for ch in word) and not word.startswith((">", "<")):
            return command  # a control operator: ; && || | & ( )
    return "exec " + text


def task_script(setup: List[str], command: str, container: bool = False) -> str:
    """The setup lines, then the command, each only if the one before succeeded (a failed
    ``conda activate`` must not run training in the wrong env); in a container the command is
    ``exec``'d where it can be (``exec_last``)."""
    if container:
        command = exec_last(command)
    return " && ".join([*setup, command]) if setup else command


def task_argv(spec: AgentSpec) -> List[str]:
    """The task's shell and its script (``task_script``)."""
    script = task_script(spec.setup, spec.command, spec.container is not None)
    if spec.script_in_env:
        # the shell evaluates the script it finds in its environment, dropped before it runs: no
        # argv (`ps`, /proc/PID/cmdline, readable by every user) and no spec.json carries a secret
        script = 's=$%s; unset %s; eval "$s"' % (SCRIPT_VAR, SCRIPT_VAR)
    shell = shlex.split(spec.shell) if spec.shell else ["/bin/sh", "-c"]
    return [*shell, script]


def wrapped_argv(spec: AgentSpec, task_dir: str, cgroup: Optional[str] = None,
                 inner: Optional[List[str]] = None) -> List[str]:
    """``task_argv`` (or ``inner``: the container runtime's command line that runs it) under the
    wrapper shell that leaves the exit status in the task dir and joins ``cgroup`` (a directory) first."""
    status = os.path.join(os.path.abspath(task_dir), EXIT_STATUS_FILE)
    procs = os.path.join(cgroup, "cgroup.procs") if cgroup else ""
    return ["/bin/sh", "-c", _WRAPPER, "distlaunch-task", status, procs, *(inner or task_argv(spec))]


def read_exit_status(task_dir: str) -> Optional[int]:
    """The status the wrapper left (a shell's: 128+N for a signal N), None if it left none."""
    try:
        with open(os.path.join(task_dir, EXIT_STATUS_FILE), encoding="ascii") as f:
            return int(f.read().strip())
    except (OSError, ValueError):
        return None


def task_environment(spec: AgentSpec, secrets: Optional[Dict[str, str]] = None,
                     task_dir: Optional[str] = None) -> Dict[str, str]:
    """The task's environment: the agent's, under ``task_variables``. A containerised task's
    own PYTHONPATH does not inherit the agent's (host paths)."""
    env = dict(os.environ)
    env.pop(SECRETS_VAR, None)  # only this task's own secrets go on, by name
    env.pop(STACKS_ENV, None)
    inherited = "" if spec.container is not None else env.get("PYTHONPATH", "")
    env.update(task_variables(spec, secrets, task_dir, inherited))
    return env


def task_variables(spec: AgentSpec, secrets: Optional[Dict[str, str]] = None, task_dir: Optional[str] = None,
                   inherited_pythonpath: str = "") -> Dict[str, str]:
    """What distlaunch itself gives a task: the spec's env, its secrets (``secrets``, else the
    ``DISTLAUNCH_SECRETS`` the agent was started with), the distlaunch variables; with autolog on,
    where its faulthandler writes stacks (``task_dir``/stacks.txt, ``launcher.agent.stackreader``). A
    container gets exactly these names (their values never on its command line)."""
    env = dict(spec.env)
    env.update(secrets if secrets is not None else task_secrets(spec.task))
    env["DISTLAUNCH_RUN_ID"] = spec.run
    env["DISTLAUNCH_TASK"] = spec.task
    existing = env.get("PYTHONPATH", inherited_pythonpath)
    entries = [agent_pythonpath_entry()]
    site = autolog_site_dir()
    if spec.autolog and site is not None:
        entries.insert(0, site)  # its sitecustomize chains to any other one further down the path
    env["DISTLAUNCH_AUTOLOG"] = "1" if spec.autolog else "0"
    if spec.autolog and task_dir is not None:
        env[STACKS_ENV] = os.path.join(os.path.abspath(task_dir), STACKS_FILE)
    env["DISTLAUNCH_SAMPLE_INTERVAL"] = repr(spec.sample_interval)
    if existing:
        entries.append(existing)
    env["PYTHONPATH"] = os.pathsep.join(entries)
    env["PYTHONUNBUFFERED"] = "1"
    return env


def autolog_site_dir() -> Optional[str]:
    """autolog's start-up hook dir next to this agent's ``launcher`` package, if it has one."""
    site = os.path.join(agent_pythonpath_entry(), AUTOLOG_SITE_DIR)
    return site if _holds_hook(site) else None


@functools.lru_cache(maxsize=8)
def _holds_hook(site: str) -> bool:
    """``site/sitecustomize.py`` exists: a directory, or one inside a zip archive (``agent.pyz/sub``).

    The archive is read through zipimport, which already holds the directory of the archive this
    agent was imported from (``zipfile`` alone cost 13 ms to import, on the way to a launch's
    first task); cached, as the agent's own archive does not change under it."""
    if os.path.isdir(site):
        return os.path.isfile(os.path.join(site, "sitecustomize.py"))
    archive, _, inner = site.rpartition(os.sep)
    try:
        import zipimport

        zipimport.zipimporter(archive).get_data(inner + "/sitecustomize.py")
    except (OSError, ImportError):  # not there, or not a zip archive (ZipImportError)
        return False
    return True
