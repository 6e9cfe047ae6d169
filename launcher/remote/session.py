"""A run's presence on one host: its run dir there, the uploaded agent, and the agent verbs.

The supervisor talks to hosts only through this class; it turns agent verbs
(docs/ARCHITECTURE.md) into shell commands over a ``Host`` and parses their JSON answers.
"""

from __future__ import annotations

import io
import json
import posixpath
import shlex
import tarfile
import time
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path
from typing import Any

from launcher.agent.containercheck import PULL_SECONDS, TF_SECONDS
from launcher.agent.netns import NETWORK_FILE
from launcher.agent.taskcontainer import SWEEP_SECONDS
from launcher.errors import HostError
from launcher.model import HostConfig
from launcher.paths import private_state_dir, state_home
from launcher.protocol.agentlines import StartRequest
from launcher.remote.agentpack import agent_digest, build_agent_zipapp
from launcher.remote.channel import BOOTSTRAP, AgentChannel
from launcher.remote.launchclock import LaunchClock
from launcher.runclean import HOST_FILES, HOST_PREFIXES, HOST_TREES
from launcher.transport import Host, LineStream


def remote_base_dir(host: Host, config: HostConfig, run_id: str, local_host_root: str | None) -> str:
    """The host run dir: under the local run dir for local hosts, under ~/.cache on SSH hosts. A
    Slurm job's nodes share their home as a rule, and a node may be two hosts (two components of
    a heterogeneous job): each host has a dir of its own there (``.../runs/RUN/hosts/NAME``), as
    each host's agent holds its dir for itself."""
    if config.transport == "local" and local_host_root is not None:
        return f"{local_host_root}/{config.name}"
    if config.transport == "slurm":
        return f"{host.home()}/.cache/distlaunch/runs/{run_id}/hosts/{config.name}"
    return f"{host.home()}/.cache/distlaunch/runs/{run_id}"


def remote_outputs_dir(host: Host, config: HostConfig, outputs: str, profile_dir: Path) -> str:
    """The job's outputs folder on a host: ``~`` is the host's home; a relative path is taken from the
    profile's folder on local hosts and from the home on ssh hosts (like ``workdir``)."""
    if outputs == "~" or outputs.startswith("~/"):
        return posixpath.normpath(host.home() + outputs[1:])
    if outputs.startswith("/"):
        return posixpath.normpath(outputs)
    if config.transport == "local":
        return str((profile_dir / outputs).resolve())
    return posixpath.normpath(f"{host.home()}/{outputs}")


def remove_host_dir_script(base: str) -> str:
    """Shell that removes the names distlaunch writes in the host run dir ``base`` (a link among
    them as a link: ``rm`` never follows one; a folder where it writes a file is left), then
    ``base`` if it is empty, else lists what is left; ``base`` itself must be a directory of the
    user's, not a symbolic link (exit 3)."""
    q = shlex.quote(base)
    files = " ".join(shlex.quote(n) for n in sorted(HOST_FILES))
    files += "".join(f" {shlex.quote(p)}*" for p in HOST_PREFIXES)
    trees = " ".join(shlex.quote(n) for n in sorted(HOST_TREES))
    refuse = "{ printf '%s; left in place\\n' \"$1\" >&2; exit 3; }"
    return (f"refuse() {refuse}; [ -L {q} ] && refuse 'a symbolic link'; [ -e {q} ] || exit 0; "
            f"[ -d {q} ] && [ -O {q} ] || refuse 'not a directory of yours'; "
            f"cd -P -- {q} && [ -O . ] || refuse 'not a directory of yours'; "
            f"rm -f -- {files} 2>/dev/null; rm -rf -- {trees} && cd / && "
            f"{{ rmdir -- {q} 2>/dev/null || ls -A -- {q}; }}")


def stale_upload_cleanup(pyz: str) -> str:
    """Shell that removes ``pyz``'s temporary upload files whose writer is gone (the pid in the
    name is dead; an older name without one): an upload that was killed leaves one behind."""
    # one group, true in the end: chained after `mkdir ... &&`, a failure before it must stay one
    return (f"{{ for f in {shlex.quote(pyz + '.tmp')}*; do [ -e \"$f\" ] || continue; p=${{f##*.tmp-}}; "
            "case $p in ''|*[!0-9]*) rm -f -- \"$f\";; *) kill -0 \"$p\" 2>/dev/null || rm -f -- \"$f\";; esac; "
            "done; :; }")


def outputs_creatable_script(outputs: str) -> str:
    """Shell that creates nothing and fails, saying why on stderr, unless ``outputs`` is a writable
    directory or could be made as one: its nearest existing parent is a directory the user may
    write (what `check` asks; `up` makes them)."""
    quoted = shlex.quote(outputs)  # the path only ever as a quoted word: never read as shell
    return (f'{{ o={quoted}; p="$o"; while [ ! -e "$p" ] && [ ! -L "$p" ]; do p=$(dirname -- "$p"); done; '
            'if [ ! -d "$p" ] || [ ! -w "$p" ] || [ ! -x "$p" ]; then '
            'printf "%s\\n" "the outputs $o: $p is not a directory this user may write" >&2; false; fi; }')


class HostSession:
    def __init__(self, config: HostConfig, host: Host, run_id: str, base_dir: str, python: str,
                 outputs_dir: str = "") -> None:
        self.config = config
        self.host = host
        self.run_id = run_id
        self.base_dir = base_dir
        self.python = python
        #: the job's outputs on this host: created before any task starts, never removed by distlaunch
        self.outputs_dir = outputs_dir
        #: whether ``prepare`` creates the outputs (`up`); `check` starts nothing and creates nothing
        #: there: it only makes sure they could be created (their nearest existing parent is writable)
        self.make_outputs = True
        #: the channel ``open_channel`` left open, until the supervisor takes it as its follow channel
        self.channel: AgentChannel | None = None
        #: whether the preflight reads the host's GPUs too (`check`, or tasks here are given GPUs)
        self.ask_gpus = True
        #: the images of the tasks here, checked (and pulled) by the preflight (launcher/remote/imagecheck.py)
        self.containers: list[dict[str, Any]] = []
        #: the launch's phase stamps (`up`; launcher/remote/launchclock.py)
        self.clock: LaunchClock | None = None
        #: the host agent gives its tasks a private network (launcher/agent/netns.py; a local host only)
        self.private_network = False

    def _preflight_timeout(self, seconds: float) -> float:
        """A preflight that may pull images and start them for TensorFlow's version waits for that too."""
        return seconds + (PULL_SECONDS + TF_SECONDS) * len(self.containers)

    @property
    def name(self) -> str:
        return self.config.name

    @property
    def pyz(self) -> str:
        return f"{self.base_dir}/agent.pyz"

    def agent_cache(self) -> tuple[str, str]:
        """The folder that keeps agent archives on this host by their sha256, and the folder up
        to which it must be the user's alone (channel.BOOTSTRAP): ``~/.cache/distlaunch/agent``
        and the home; a local host's is in the launcher's private state dir."""
        if self.config.transport == "local":
            try:
                return str(private_state_dir("cache", "hostagent")), str(state_home())
            except OSError:
                return "", ""
        home = posixpath.normpath(self.host.home())
        return f"{home}/.cache/distlaunch/agent", home

    def task_dir(self, slug: str) -> str:
        return f"{self.base_dir}/tasks/{slug}"

    def _agent_cmd(self, verb: str, *args: str, python: str | None = None) -> str:
        parts = [python or self.python, self.pyz, verb, *args]
        return " ".join(shlex.quote(p) for p in parts)

    def agent(self, verb: str, *args: str, timeout: float = 60.0) -> dict[str, Any]:
        """Run an agent verb and return its JSON answer."""
        result = self.host.run(self._agent_cmd(verb, *args), timeout=timeout)
        lines = [ln for ln in result.stdout.splitlines() if ln.strip()]
        if result.exit_code != 0 or not lines:
            detail = (result.stderr.strip().splitlines() or ["no output"])[-1]
            raise HostError(f"host {self.name}: agent `{verb}` failed (exit {result.exit_code}): {detail}")
        try:
            answer: dict[str, Any] = json.loads(lines[-1])
        except ValueError:
            raise HostError(f"host {self.name}: agent `{verb}` answered {lines[-1][:200]!r}") from None
        return answer

    # -- setup ----------------------------------------------------------------------------------

    def prepare(self) -> None:
        """Start a fresh host run dir, private to the user (0700: task output and specs hold
        paths, env and tokens): leftovers of an earlier run with the same id must not be
        followed as if they were this run's events."""
        # one round trip: the run dir, the outputs, and the agent from stdin (SFTP costs ~6 round trips)
        result = self.host.run(self._prepare_script(), timeout=120, stdin=build_agent_zipapp())
        if not result.ok:
            detail = (result.stderr.strip().splitlines() or ["no output"])[-1]
            raise HostError(f"host {self.name}: cannot create the run dir {self.base_dir} or the outputs "
                            f"{self.outputs_dir}, or write the agent there: {detail}")

    def _dirs_script(self) -> str:
        """Shell for a fresh private run dir and the outputs (and no upload a killed writer left)."""
        base = shlex.quote(self.base_dir)
        if not self.outputs_dir:
            outputs = ""
        elif self.make_outputs:
            outputs = f" && mkdir -p -- {shlex.quote(self.outputs_dir)}"
        else:
            outputs = " && " + outputs_creatable_script(self.outputs_dir)
        network = shlex.quote(f"{self.base_dir}/{NETWORK_FILE}")
        network = f" && echo private > {network}" if self.private_network else f" && rm -f -- {network}"
        return (f"rm -rf -- {base}/tasks {base}/lease && "
                f"(umask 077 && mkdir -p -- {base}) && chmod 700 {base}{outputs}{network} && "
                f"{stale_upload_cleanup(self.pyz)}")

    def _prepare_script(self) -> str:
        """Shell for a fresh private run dir, the outputs, and the agent zipapp from stdin: written
        through a file of this shell's own (``agent.pyz.tmp-<pid>``), installed only whole, and
        removed when the upload is cut short or the shell is stopped."""
        pyz, tmp = shlex.quote(self.pyz), shlex.quote(self.pyz + ".tmp-") + "$$"
        size = len(build_agent_zipapp())
        return (f"{self._dirs_script()} && t={tmp} && trap 'rm -f -- \"$t\"' EXIT && "
                "trap 'exit 129' HUP && trap 'exit 130' INT && trap 'exit 143' TERM && "
                f'(umask 077 && cat > "$t") && [ $(wc -c < "$t") -eq {size} ] && mv -f -- "$t" {pyz} && '
                "trap - EXIT HUP INT TERM")

    def _preflight_args(self, bind: str, check: Iterable[int], pick: int, path_checks: list[dict[str, Any]],
                        listen: str | None = None) -> list[str]:
        """The agent `preflight` arguments; relative paths are judged from the host run dir. The
        host's facts (launcher/remote/parity.py) always come along, its GPUs where ``ask_gpus`` is set;
        with ``listen`` the verb holds the ports for the reach check (launcher/remote/reach.py),
        greeting with that token."""
        paths = [p for p in (self.outputs_dir, self.base_dir) if p]
        args = ["--cwd", self.base_dir, "--bind", bind, "--checks", json.dumps(path_checks),
                "--facts", json.dumps({"paths": paths, "gpus": self.ask_gpus})]
        if listen is not None:
            args += ["--listen", listen]
        if self.containers:  # the run id labels the TensorFlow probe's container (down's sweep finds it)
            args += ["--containers", json.dumps([{**c, "run": self.run_id} for c in self.containers])]
        ports = ",".join(str(p) for p in check)
        if ports:
            args += ["--check", ports]
        if pick:
            args += ["--pick", str(pick)]
        return args

    def prepare_and_preflight(self, bind: str, check: Iterable[int], pick: int, path_checks: list[dict[str, Any]],
                              tensorflow: bool) -> dict[str, Any]:
        """``prepare`` and the agent's ``preflight`` in ONE round trip (the launch's fast path, when
        no [sync] has to run between them). Raises HostError with ``python_missing`` set when the
        host's python does not run; else returns the preflight answer."""
        args = self._preflight_args(bind, check, pick, path_checks)
        if tensorflow:
            args.append("--tensorflow")
        script = f"{self._prepare_script()} || exit 98\n" + self._agent_cmd("preflight", *args)
        result = self.host.run(script, timeout=self._preflight_timeout(180), stdin=build_agent_zipapp())
        lines = [ln for ln in result.stdout.splitlines() if ln.strip()]
        detail = (result.stderr.strip().splitlines() or ["no output"])[-1]
        if result.exit_code != 0 or not lines:
            raise self._preflight_failure(result.exit_code, detail, answered=bool(lines))
        if self.clock is not None:  # one exec: the upload and the answer end together
            self.clock.stamp(self.name, "agent")
            self.clock.agent_from[self.name] = "sent"
            self.clock.stamp(self.name, "preflight")
        return self._preflight_answer(lines[-1])

    def open_channel(self, bind: str, check: Iterable[int], pick: int, path_checks: list[dict[str, Any]],
                     tensorflow: bool, timeout: float = 180.0, listen: str | None = None,
                     follow: bool = True) -> dict[str, Any]:
        """What ``prepare_and_preflight`` does, in one exec that then stays open as this host's
        follow channel (launcher/remote/channel.py): returns the preflight answer and leaves the
        channel in ``self.channel``; the host agent starts on the launcher's first line there.
        ``listen``: the ports stay held for the reach check first. Without ``follow`` the verb ends
        after the reach check (a host whose agent must be started apart: a Slurm step).
        Raises HostError as ``prepare_and_preflight`` does (the channel is closed then)."""
        args = self._preflight_args(bind, check, pick, path_checks, listen)
        if tensorflow:
            args.append("--tensorflow")
        if follow:
            args += ["--then-follow", "--run-dir", self.base_dir]
        pyz = build_agent_zipapp()
        cache, top = self.agent_cache()
        verb = " ".join(shlex.quote(p) for p in (self.python, "-c", BOOTSTRAP, str(len(pyz)), agent_digest(),
                                                  self.pyz, cache, top, "preflight", *args))
        script = f"{self._dirs_script()} || exit 98\nDISTLAUNCH_RUN_ID={shlex.quote(self.run_id)} exec {verb}"
        answer, self.channel = self._open(script, pyz, self._preflight_timeout(timeout))
        return answer

    def open_preflight(self, bind: str, check: Iterable[int], pick: int, path_checks: list[dict[str, Any]],
                       listen: str, timeout: float = 180.0) -> tuple[dict[str, Any], AgentChannel]:
        """The agent's ``preflight`` (uploaded already) holding its ports for the reach check on
        the returned channel, which the caller closes when the check is done (the step-by-step path)."""
        args = self._preflight_args(bind, check, pick, path_checks, listen)
        return self._open(self._agent_cmd("preflight", *args), b"", self._preflight_timeout(timeout))

    def _open(self, script: str, upload: bytes, timeout: float) -> tuple[dict[str, Any], AgentChannel]:
        """Run ``script`` as a channel, send it ``upload`` (the agent, where the script writes it),
        and read the preflight answer."""
        channel = AgentChannel()
        channel.stream = self.host.stream_lines(script, channel.feed, channel.ended)
        uploaded = True
        try:
            if upload:
                try:
                    wanted = channel.agent_wanted(timeout)
                except TimeoutError:
                    raise HostError(f"host {self.name}: the agent's bootstrap did not answer within {timeout:g} s") \
                        from None
                if wanted == "send":
                    uploaded = channel.send(upload, timeout)  # a command gone already: its exit tells
                if self.clock is not None and wanted is not None:
                    self.clock.stamp(self.name, "agent")
                    self.clock.agent_from[self.name] = "cached" if wanted == "cached" else "sent"
            try:
                line = channel.first_line(timeout)
            except TimeoutError:
                raise HostError(f"host {self.name}: agent `preflight` did not answer within {timeout:g} s") from None
            if self.clock is not None and line is not None:
                self.clock.stamp(self.name, "preflight")
            if line is None:
                code = channel.wait(10.0)
                if code is None and not uploaded:
                    raise HostError(f"host {self.name}: uploading the agent ({len(upload)} bytes) stalled for "
                                    f"{timeout:g} s; check the host and the link")
                detail = (channel.stderr_tail().strip().splitlines() or channel.noise or ["no output"])[-1]
                raise self._preflight_failure(-1 if code is None else code, detail, answered=False)
            answer = self._preflight_answer(line)
            if answer.get("error"):
                raise HostError(f"host {self.name}: agent `preflight` failed: {answer['error']}")
        except BaseException:
            channel.close()
            raise
        return answer, channel

    def _preflight_failure(self, code: int, detail: str, answered: bool) -> HostError:
        if code == 98:
            return HostError(f"host {self.name}: cannot create the run dir {self.base_dir} or the outputs "
                             f"{self.outputs_dir}, or write the agent there: {detail}")
        if code == 127 or (code != 0 and "not found" in detail and not answered):
            error = HostError(f"host {self.name}: python {self.python!r} not found; set `python` in "
                              "[defaults] (or the role) to an interpreter that exists there")
            error.python_missing = True  # type: ignore[attr-defined]
            return error
        return HostError(f"host {self.name}: agent `preflight` failed (exit {code}): {detail}")

    def _preflight_answer(self, line: str) -> dict[str, Any]:
        try:
            answer: dict[str, Any] = json.loads(line)
        except ValueError:
            raise HostError(f"host {self.name}: agent `preflight` answered {line[:200]!r}") from None
        return answer

    def take_channel(self) -> AgentChannel | None:
        """The channel ``open_channel`` left open (once: a later follow is an exec of its own)."""
        channel, self.channel = self.channel, None
        return channel

    def remove_run_dir(self) -> list[str]:
        """Remove what distlaunch wrote in this host's run dir (agent, specs, event files), then the
        dir itself if nothing else is left; the names left there. The job's outputs are never touched.

        Refuses a path that does not look like a run dir of this run, that holds the outputs, that
        is a symbolic link or is not the user's."""
        base = posixpath.normpath(self.base_dir)
        parts = base.split("/")
        looks_like_run_dir = len(parts) > 3 and (parts[-1] == self.run_id or parts[-2] == "hosts")
        outputs = posixpath.normpath(self.outputs_dir) if self.outputs_dir else ""
        if not looks_like_run_dir or (outputs and (outputs == base or outputs.startswith(base + "/"))):
            raise HostError(f"host {self.name}: {self.base_dir} is not only this run's scratch space; "
                            "left in place")
        script = remove_host_dir_script(base)
        if self.config.transport == "slurm":  # .../runs/RUN/hosts/NAME: its parents go once empty
            parents = [posixpath.dirname(base), posixpath.dirname(posixpath.dirname(base))]
            script += "\n" + " ".join(["rmdir", *map(shlex.quote, parents)]) + " 2>/dev/null; true"
        result = self.host.run(script, timeout=120)
        if not result.ok:
            detail = (result.stderr.strip().splitlines() or ["no output"])[-1]
            raise HostError(f"host {self.name}: cannot remove {self.base_dir}: {detail}")
        return [line for line in result.stdout.splitlines() if line]

    def write_specs(self, specs: Mapping[str, Mapping[str, Any]]) -> None:
        """Every spec.json of this host in one round trip: a tar archive unpacked from stdin
        (one exec per file made a 64-task launch spend seconds on round trips)."""
        if not specs:
            return
        buffer = io.BytesIO()
        now = int(time.time())
        with tarfile.open(fileobj=buffer, mode="w") as archive:
            for slug, spec in sorted(specs.items()):
                data = json.dumps(spec, indent=1, sort_keys=True).encode()
                info = tarfile.TarInfo(f"{slug}/spec.json")
                info.size, info.mode, info.mtime = len(data), 0o600, now
                archive.addfile(info, io.BytesIO(data))
        tasks = shlex.quote(f"{self.base_dir}/tasks")
        result = self.host.run(f"mkdir -p {tasks} && tar -xf - -C {tasks}", timeout=60, stdin=buffer.getvalue())
        if not result.ok:
            detail = (result.stderr.strip().splitlines() or ["no output"])[-1]
            raise HostError(f"host {self.name}: cannot write task specs under {self.base_dir}: {detail}")

    def preflight(self, bind: str, check: Iterable[int], pick: int,
                  path_checks: list[dict[str, Any]]) -> dict[str, Any]:
        """Ports, path checks and the host's facts in one round trip: the agent's answer.

        Relative paths are judged from the host run dir, where the agents start tasks from."""
        return self.agent("preflight", *self._preflight_args(bind, check, pick, path_checks),
                          timeout=self._preflight_timeout(60.0))

    # -- the host agent ---------------------------------------------------------------------------

    def _client_cmd(self, verb: str, *args: str) -> str:
        """An agent verb that talks to the host agent and starts it (forked from the verb, so with
        the run id in its environment for ``sweep``) when none serves. Hosts whose detached
        processes must be started by the transport (a Slurm step) get the host agent started here
        instead, and the verb only waits for it."""
        if self.host.detach_by_setsid:
            extra: tuple[str, ...] = ()
        else:
            serve = (f"DISTLAUNCH_RUN_ID={shlex.quote(self.run_id)} exec "
                     + self._agent_cmd("serve", "--run-dir", self.base_dir))
            self.host.start_detached(serve, f"{self.base_dir}/agent.log", cwd=self.base_dir)
            extra = ("--no-spawn",)
        return f"DISTLAUNCH_RUN_ID={shlex.quote(self.run_id)} " + self._agent_cmd(verb, *args, *extra)

    def start_tasks(self, request: StartRequest) -> dict[str, int]:
        """Write the request's specs and have the host agent start its tasks, in their order, in one
        round trip, by the agent's `start` verb (the host agent is started first if none serves).
        Its secrets (slug -> env) travel on stdin into the agent's memory, never into a file or a
        command line. Returns slug -> pid."""
        if not request.tasks:
            return {}
        result = self.host.run(self._client_cmd("start", "--run-dir", self.base_dir), timeout=60,
                               stdin=request.encode())
        lines = [ln for ln in result.stdout.splitlines() if ln.strip()]
        try:
            answer: dict[str, Any] = json.loads(lines[-1]) if lines else {}
        except ValueError:
            answer = {}
        if not result.ok and not answer.get("error"):
            answer["error"] = (result.stderr.strip().splitlines() or ["no answer"])[-1]
        return self.started(answer, list(request.tasks))

    def started(self, answer: Mapping[str, Any], slugs: list[str]) -> dict[str, int]:
        """The pids of the host agent's answer to a start (by the `start` verb or over the follow
        channel); raises HostError naming what could not start."""
        if answer.get("error"):
            raise HostError(f"host {self.name}: could not start {', '.join(slugs)}: {answer['error']}")
        problems = dict(answer.get("errors") or {})
        if problems:
            raise HostError(f"host {self.name}: " + "; ".join(f"{s}: {why}" for s, why in problems.items()))
        return {str(k): int(v) for k, v in (answer.get("pids") or {}).items() if isinstance(v, int)}

    def stop_tasks(self, slugs: Iterable[str], grace: float, exit_agent: bool = False) -> None:
        """Stop several tasks at once and wait for their final events; with ``exit_agent`` the host
        agent then ends too (the job is over). Without a live host agent the verb stops the groups."""
        tasks = ",".join(slugs)
        if not tasks and not exit_agent:
            return
        args = ["--run-dir", self.base_dir, "--tasks", tasks, "--grace", f"{grace:g}"]
        if exit_agent:
            args.append("--exit")
        self.host.run(self._agent_cmd("stop", *args), timeout=grace + 60)

    def pick_ports(self, count: int) -> list[int]:
        """``count`` free TCP ports on this host (a task moved here listens on one each)."""
        # in the run's private network where it has one: the live tasks' ports are taken only in there
        answer = self.agent("ports", "--bind", "0.0.0.0", "--pick", str(count), "--run-dir", self.base_dir)
        picked = answer.get("picked")
        if not isinstance(picked, list) or len(picked) < count:
            raise HostError(f"host {self.name}: could not pick {count} free port(s): {answer.get('error') or answer}")
        return [int(p) for p in picked]

    def retire(self, reason: str, slugs: Iterable[str] = (), grace: float = 5.0) -> list[str]:
        """The run left this host (lost, then back; or drained): mark it so that nothing of the run
        starts here again, stop whatever of ``slugs`` still runs (through the agent, else each
        task's group), end the agent. Returns the tasks that could not be stopped."""
        args = ["--run-dir", self.base_dir, "--tasks", ",".join(slugs), "--grace", f"{grace:g}", "--exit",
                "--retire", reason]
        answer = self.agent("stop", *args, timeout=grace + 60)
        return [str(s) for s in answer.get("left") or [] if s]

    def readmit(self, token: str) -> dict[str, int]:
        """Lift the host's retired mark for a new incarnation (``token``, never used before):
        returns each task's events.jsonl size there, from where the old incarnation's events end."""
        answer = self.agent("readmit", "--run-dir", self.base_dir, "--token", token)
        offsets = answer.get("offsets")
        if not isinstance(offsets, dict):
            raise HostError(f"host {self.name}: re-admission refused: {answer.get('error') or answer}")
        return {str(k): int(v) for k, v in offsets.items() if isinstance(v, int)}

    def sweep(self, kill: bool, grace: float = 5.0) -> list[dict[str, Any]]:
        args = ["--run-id", self.run_id, "--run-dir", self.base_dir, "--grace", f"{grace:g}"]
        if kill:
            args.append("--kill")
        # the processes' grace and confirmation, and the containers' list, removal and list again
        timeout = grace + 30 + SWEEP_SECONDS
        left: list[dict[str, Any]] = self.agent("sweep", *args, timeout=timeout).get("left", [])
        return left

    def follow(self, offsets: Mapping[str, int], on_line: Callable[[str], None],
               on_close: Callable[[int | None], None]) -> LineStream:
        """The host agent's event stream from these byte offsets (it is started if none serves,
        and adopts the tasks of one that was killed)."""
        args = ["--run-dir", self.base_dir, "--pinged"]  # the supervisor pings every second
        for slug, offset in sorted(offsets.items()):
            args += ["--offset", f"{slug}={offset}"]
        return self.host.stream_lines(self._client_cmd("follow", *args), on_line, on_close)
