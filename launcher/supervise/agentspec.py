"""What a task's agent is given to start it: its spec (spec.json on the host) and its secrets.

Built from the supervisor's current plan on each start, so a plan the supervisor replaced (a task
moved to another host) is what the next start of a task runs.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Protocol

from launcher.agent.spec import SCRIPT_VAR, AgentSpec, task_script
from launcher.autolog.steptime import PROFILER_PORT_ENV
from launcher.model import Plan
from launcher.plan import fill_placeholders, render_command, split_secrets, task_container, tf_config
from launcher.profile.overrides import mask_secrets
from launcher.remote.session import HostSession
from launcher.supervise.lifecycle import TaskRuntime


class SpecSource(Protocol):
    """What a spec is built from (the supervisor)."""

    @property
    def plan(self) -> Plan: ...
    @property
    def run_id(self) -> str: ...
    @property
    def sessions(self) -> Mapping[str, HostSession]: ...
    @property
    def ports(self) -> Mapping[str, int]: ...
    @property
    def profiler_ports(self) -> dict[str, int]: ...


def agent_spec(sup: SpecSource, rt: TaskRuntime) -> AgentSpec:
    spec = rt.spec
    profile = sup.plan.profile
    env, _secret = split_secrets(spec.env, profile.secrets)  # secrets go by stdin, not spec.json
    env["TF_CONFIG"] = json.dumps(tf_config(sup.plan, spec.task_id, dict(sup.ports)))
    profiler_port = sup.profiler_ports.get(spec.task_id)
    if PROFILER_PORT_ENV in env or not spec.autolog:  # the profile closed it: no server, no port
        sup.profiler_ports.pop(spec.task_id, None)
    elif profiler_port is not None:  # autolog starts the task's profiler server there
        env[PROFILER_PORT_ENV] = str(profiler_port)
    metrics = profile.metrics
    patterns = {k: v for k, v in (("step", metrics.step), ("loss", metrics.loss)) if v}
    patterns.update(metrics.extra)
    command = _command(sup, rt)
    secret = _secret_script(sup, rt) is not None
    container = task_container(sup.plan, spec)
    return AgentSpec(
        run=sup.run_id, task=spec.task_id, host=spec.host,
        incarnation=rt.incarnation, restarts=rt.restarts,
        command=mask_secrets(command, set(profile.secrets)) if secret else command,
        workdir=spec.workdir, env=env, gpus=list(spec.gpus),
        grace_seconds=spec.grace_seconds,
        orphan_grace_seconds=profile.orphan_grace_seconds,
        sample_interval=profile.sample_interval, metrics=patterns,
        setup=[mask_secrets(line, set(profile.secrets)) for line in spec.setup] if secret else list(spec.setup),
        shell=spec.shell or "", autolog=spec.autolog, script_in_env=secret,
        container=container.to_json() if container is not None else None,
        outputs=sup.sessions[spec.host].outputs_dir,
        preemption_notice=profile.hosts[spec.host].preemption_notice or "",
        checkpoint_dir=fill_placeholders(spec.checkpoint_dir, {"outputs": sup.sessions[spec.host].outputs_dir},
                                         quote=False),
    )


def _command(sup: SpecSource, rt: TaskRuntime) -> str:
    session = sup.sessions[rt.spec.host]
    return render_command(rt.spec.command, port=rt.port, run_dir=session.base_dir, outputs=session.outputs_dir)


def _secret_script(sup: SpecSource, rt: TaskRuntime) -> str | None:
    """The task's whole script (setup lines, then the command) when a value from the launcher's
    environment is in it: it then goes to the agent with the secrets, never in spec.json."""
    script = task_script(list(rt.spec.setup), _command(sup, rt), task_container(sup.plan, rt.spec) is not None)
    return script if any(secret in script for secret in sup.plan.profile.secrets if secret) else None


def task_secrets(sup: SpecSource, rt: TaskRuntime) -> dict[str, str]:
    secret = split_secrets(rt.spec.env, sup.plan.profile.secrets)[1]
    script = _secret_script(sup, rt)
    if script is not None:
        secret[SCRIPT_VAR] = script
    return secret
