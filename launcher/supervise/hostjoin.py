"""Hosts added to a running job: ``distlaunch add-host RUN HOST`` and the ``host_discovery`` command.

A host is added as a spare, after the same preflight a re-admitted host passes (the agent
uploaded, python and TensorFlow, one task of each role rehearsed there): connected and checked on
a thread of its own, then taken into the job on the loop (its session, the plan's hosts, its
stream followed, state.json, so `down` tears it down too). The grow policy then places tasks
there as on any spare (growth.py): at once for a role below its target, and after `resize`. A
host that fails its preflight is said in one line and left as it was (its run dir removed).

``host_discovery`` is polled every ``host_discovery_seconds`` on a thread of its own: each line it
prints names a host (as `add-host` takes it); a new one is added, a refused one tried again after
``READMIT_RETRY_MIN_S``. A host that leaves the list is not taken out of the job (a lost host is
what the host-loss handling is for), as Horovod's discovery only ever adds to a running job.
"""

from __future__ import annotations

import contextlib
import dataclasses
import shlex
import subprocess
import threading
import time
from collections.abc import Callable, Mapping
from typing import Protocol

from launcher import events as ev
from launcher.errors import HostError, UserError
from launcher.model import SSH_TRANSPORTS, HostConfig, Plan
from launcher.placement import rehearsal
from launcher.plan import agent_python
from launcher.profile.addedhost import added_host
from launcher.remote.session import HostSession, remote_base_dir, remote_outputs_dir
from launcher.supervise.hostloss import HostLoss, HostState
from launcher.supervise.hostworker import HostWorker
from launcher.supervise.regrow import READMIT_RETRY_MIN_S, Growth, preflight_again
from launcher.transport import Host, make_host, sshconfig

#: how long one run of the discovery command may take
DISCOVERY_TIMEOUT_S = 30.0


class AddOwner(Protocol):
    @property
    def run_id(self) -> str: ...
    @property
    def plan(self) -> Plan: ...
    @property
    def sessions(self) -> dict[str, HostSession]: ...
    @property
    def workers(self) -> dict[str, HostWorker]: ...
    @property
    def finishing(self) -> bool: ...
    def call(self, fn: Callable[[], None]) -> None: ...
    def publish(self, event: ev.Event, line: str | None = None) -> None: ...
    def notice(self, message: str) -> None: ...
    def write_state(self) -> None: ...
    def take_host(self, session: HostSession, plan: Plan) -> None: ...
    def host_root(self) -> str | None: ...


class HostAdder:
    def __init__(self, sup: AddOwner, hosts: HostLoss, growth: Growth) -> None:
        self.sup = sup
        self.hosts = hosts
        self.growth = growth
        self._busy: set[str] = set()  # hosts being connected and checked
        self._refused: dict[str, float] = {}  # discovered host -> monotonic time it may be tried again

    def refusal(self, config: HostConfig) -> str | None:
        """On the loop: why ``config`` cannot join this job (one line), or None."""
        sup = self.sup
        name = config.name
        if sup.finishing:
            return "the job is ending"
        if name in sup.sessions:
            return (f"host {name} is already a host of the job" if name not in self.hosts.gone else
                    f"host {name} left the job; it comes back by re-admission (readmit_after_seconds)")
        if name in self._busy:
            return f"host {name} is being added already"
        if any(h.transport == "slurm" for h in sup.plan.profile.hosts.values()):
            return "a Slurm job's hosts are its allocation's nodes"
        if sup.plan.private_network:
            return "the job's tasks share a private network on this machine; no other host can reach them"
        if config.transport != "local" and any(t.address in ("127.0.0.1", "::1", "localhost")
                                               for t in sup.plan.tasks):
            return "the job's tasks listen on loopback addresses, which another host cannot reach"
        same = [h for h, s in sup.sessions.items() if _machine(s.config) == _machine(config)]
        if same and config.transport != "local":
            return f"{config.address} is host {same[0]} of the job already"
        profile = sup.plan.profile
        if any(role.settings.container is not None for role in profile.roles.values()):
            return "the job's tasks run in containers, whose images add-host does not check yet"
        if name not in profile.hosts and any(role.gpus_per_task for role in profile.roles.values()):
            return ("a host given by its address has no GPUs listed, and the job's tasks take GPUs: add a "
                    "host of the profile's [hosts] (its gpus = [...]) by its name")
        return None

    def add(self, spec: str, asked: bool, done: Callable[[str | None], None]) -> None:
        """On the loop: add the host ``spec`` names; ``done(why_not)`` once it is a spare (None) or
        refused. ``asked``: the operator's (growing at once is theirs to ask with resize)."""
        try:
            config = added_host(self.sup.plan.profile, spec)
        except UserError as exc:
            done(str(exc))
            return
        refused = self.refusal(config)
        if refused is not None:
            done(refused)
            return
        self._busy.add(config.name)
        plan = _with_host(self.sup.plan, config)
        threading.Thread(target=self._prepare, args=(config, plan, asked, done), daemon=True,
                         name=f"add-host-{config.name}").start()

    def _prepare(self, config: HostConfig, plan: Plan, asked: bool, done: Callable[[str | None], None]) -> None:
        """On its own thread: connect, the run dir and agent, the preflight. Whatever fails leaves
        nothing of the run there (a dir the run already had there is another host's: left alone)."""
        sup = self.sup
        name = config.name
        host: Host | None = None
        session: HostSession | None = None
        ours = False  # the host's run dir was made by this add
        try:
            address = _resolved(config)
            if address is not None:  # an alias: the tasks elsewhere reach it at the HostName it stands for
                plan = dataclasses.replace(plan, addresses={**plan.addresses, name: address})
            host = make_host(config, on_notice=sup.notice, run_id=sup.run_id)
            host.connect()
            base = remote_base_dir(host, config, sup.run_id, sup.host_root())
            if host.run(f"test -e {shlex.quote(base)}", timeout=60).ok:
                problems = [f"{base} is there already: the machine is a host of this job under another name"]
            else:
                ours = True
                outputs = remote_outputs_dir(host, config, plan.profile.outputs, plan.profile.directory)
                # the python the role's tasks would use there (the rehearsal places one of each on it)
                python = agent_python(rehearsal(plan), name)
                session = HostSession(config, host, sup.run_id, base, python, outputs)
                problems = preflight_again(plan, name, session)
        except HostError as exc:
            problems = [str(exc)]
        except Exception as exc:  # a bug must not keep the host "being added" for good
            problems = [f"{type(exc).__name__}: {exc}"]
        if not problems and sup.finishing:
            problems = ["the job is ending"]
        if problems:
            _forget(host, session if ours else None)
            line = f"host {name} is not added: {problems[0]}"
            sup.call(lambda: self._refused_now(name, line, done))
            return
        assert session is not None
        sup.call(lambda: self._take(session, plan.addresses.get(name), asked, done))

    def _refused_now(self, name: str, line: str, done: Callable[[str | None], None]) -> None:
        self._busy.discard(name)
        self._refused[name] = time.monotonic() + READMIT_RETRY_MIN_S
        done(line)

    def _take(self, session: HostSession, address: str | None, asked: bool,
              done: Callable[[str | None], None]) -> None:
        """On the loop: the host is a spare of the job from now on."""
        sup = self.sup
        name = session.name
        self._busy.discard(name)
        if sup.finishing:
            threading.Thread(target=_forget, args=(session.host, session), daemon=True).start()
            done("the job is ending")
            return
        plan = _with_host(sup.plan, session.config)
        if address is not None:
            plan = dataclasses.replace(plan, addresses={**plan.addresses, name: address})
        sup.take_host(session, plan)
        said = "added by `distlaunch add-host`" if asked else "found by host_discovery"
        self.hosts.states[name] = HostState(ev.HOST_SPARE, said, time.time())
        if name not in self.hosts.spares:
            self.hosts.spares.append(name)
        sup.publish(ev.host_event(sup.run_id, name, ev.HOST_SPARE, said))
        self.growth.why[name] = f"host {name} {said}"
        sup.write_state()  # before its stream: `down` finds the host from here on
        sup.notice(f"host {name} {said}; it is a spare of the job")
        done(None)

    def request(self, spec: str, timeout: float) -> str | None:
        """The operator's add-host, from any thread but the loop: why not, or None once added."""
        answer: list[str | None] = []
        finished = threading.Event()

        def done(why: str | None) -> None:
            answer.append(why)
            finished.set()

        self.sup.call(lambda: self.add(spec, True, done))
        if not finished.wait(timeout):
            return "the host was not ready in time (it is still being checked; `distlaunch status` says when it is)"
        return answer[0]

    # -- discovery ------------------------------------------------------------------------------------

    def discover(self, stop: threading.Event) -> None:
        """On a thread of its own until ``stop``: the discovery command, every few seconds."""
        profile = self.sup.plan.profile
        command, every = profile.host_discovery, profile.host_discovery_seconds
        if not command:
            return
        said: set[str] = set()
        while not stop.is_set():
            names, problem = run_discovery(command)
            if problem is not None and problem not in said:
                said.add(problem)
                self.sup.notice(f"host_discovery: {problem}")
            for name in names:
                self.sup.call(lambda n=name: self._discovered(n))  # type: ignore[misc]
            stop.wait(every)

    def _discovered(self, spec: str) -> None:
        """On the loop: a host the discovery command printed."""
        sup = self.sup
        if sup.finishing or spec in sup.sessions or spec in self._busy:
            return
        if self._refused.get(spec, 0.0) > time.monotonic():
            return

        def done(why: str | None) -> None:
            if why is not None:  # said, and tried again after a while: never at every poll
                self._refused[spec] = time.monotonic() + READMIT_RETRY_MIN_S
                sup.notice(f"host_discovery found {spec}: {why}")

        try:
            config = added_host(sup.plan.profile, spec)
        except UserError as exc:
            done(str(exc))
            return
        if config.name in sup.sessions:
            return
        self.add(spec, False, done)


def run_discovery(command: str) -> tuple[list[str], str | None]:
    """The host names ``command`` prints (one per line; blank lines and ``#`` comments left out),
    and what went wrong, if anything (a failing command's names are not taken)."""
    try:
        done = subprocess.run(["/bin/sh", "-c", command], capture_output=True, text=True,
                              timeout=DISCOVERY_TIMEOUT_S, stdin=subprocess.DEVNULL)
    except subprocess.TimeoutExpired:
        return [], f"`{command}` did not finish within {DISCOVERY_TIMEOUT_S:.0f} s"
    except OSError as exc:
        return [], f"`{command}` cannot run: {exc.strerror or exc}"
    if done.returncode != 0:
        last = (done.stderr.strip().splitlines() or [f"exit {done.returncode}"])[-1]
        return [], f"`{command}` failed: {last[:200]}"
    names = [line.strip() for line in done.stdout.splitlines()]
    return list(dict.fromkeys(n for n in names if n and not n.startswith("#"))), None


def _with_host(plan: Plan, config: HostConfig) -> Plan:
    """The plan with one more host (no task placed on it yet)."""
    hosts: Mapping[str, HostConfig] = {**plan.profile.hosts, config.name: config}
    spares = plan.profile.spares if config.name in plan.profile.spares else (*plan.profile.spares, config.name)
    # a spare of the job: the host-loss limit (one loss more than the spares) counts it too
    return dataclasses.replace(plan, profile=dataclasses.replace(plan.profile, hosts=dict(hosts), spares=spares))


def _resolved(config: HostConfig) -> str | None:
    """The HostName ~/.ssh/config gives an ssh host's address (None: none, or not an ssh host)."""
    if config.tf_address or config.transport not in SSH_TRANSPORTS or config.ssh.ssh_config is None:
        return None
    try:
        return sshconfig.resolve(config).target.hostname
    except HostError:
        return None


def _forget(host: Host | None, session: HostSession | None) -> None:
    """A host that did not join: the run dir this add made there removed, the connection closed."""
    if session is not None:
        with contextlib.suppress(HostError):
            session.remove_run_dir()
    if host is not None:
        with contextlib.suppress(HostError, OSError):
            host.close()


def _machine(config: HostConfig) -> tuple[str, str | None, int]:
    """What tells two hosts apart when they are one machine's: its address, login and ssh port."""
    return (config.address, config.ssh.user, config.ssh.ssh_port)
