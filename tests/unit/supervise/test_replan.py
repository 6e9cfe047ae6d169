"""The supervisor's plan is a value it replaces (the handling of a lost host moves tasks this way):
the tasks kept keep their runtime under their new spec, and nothing derived from the old plan is
left behind (the next start's spec, TF_CONFIG, ports, the watchdog, on_nan, state.json)."""

from __future__ import annotations

import json
import sys
from dataclasses import replace
from pathlib import Path

import pytest

from launcher import events as ev
from launcher.model import LogPolicy, Plan
from launcher.plan import build_plan
from launcher.profile.reader import load_profile
from launcher.remote.session import HostSession
from launcher.rundir import RunDir
from launcher.supervise.agentspec import agent_spec
from launcher.supervise.lifecycle import TaskPhase
from launcher.supervise.supervisor import Supervisor
from launcher.transport import make_host

RUN = "r-replan"


def _plan(tmp_path: Path, workers: int, name: str = "p.toml") -> Plan:
    profile = tmp_path / name
    profile.write_text(f"""
name = "replan"
strategy = "multi_worker_mirrored"
[defaults]
command = "python train.py --port {{port}}"
workdir = "{tmp_path}"
[hosts.local]
address = "localhost"
transport = "local"
[roles.worker]
hosts = ["local"]
count = {workers}
stall_seconds = 60
""")
    return build_plan(load_profile(profile))


def _supervisor(tmp_path: Path, plan: Plan) -> Supervisor:
    config = plan.profile.hosts["local"]
    session = HostSession(config, make_host(config), RUN, str(tmp_path / "host"), sys.executable)
    # nothing is launched: only what the supervisor derives from its plan is looked at
    return Supervisor(plan, RunDir.create(RUN, tmp_path / "run"), {"local": session},
                      {t.task_id: 2000 + t.index for t in plan.tasks})


def test_a_task_kept_keeps_its_runtime_under_its_new_spec_and_port(tmp_path: Path) -> None:
    plan = _plan(tmp_path, 2)
    sup = _supervisor(tmp_path, plan)
    rt = sup.tasks["worker:1"]
    rt.phase, rt.restarts, rt.incarnation = TaskPhase.RUNNING, 2, 2
    moved = replace(plan.task("worker:1"), address="127.0.0.2", stall_seconds=5.0, on_nan="stop",
                    command="python train.py --moved --port {port}")
    new = replace(plan, tasks=tuple(moved if t.task_id == "worker:1" else t for t in plan.tasks))
    sup.replace_plan(new, {"worker:1": 4321})
    assert sup.plan is new and sup.tasks["worker:1"] is rt
    assert (rt.spec, rt.port, rt.phase, rt.restarts, rt.incarnation) == (moved, 4321, ev.RUNNING, 2, 2)
    spec = agent_spec(sup, rt)  # what the task's next start runs
    assert spec.command == "python train.py --moved --port 4321"
    assert json.loads(spec.env["TF_CONFIG"])["cluster"]["worker"] == ["localhost:2000", "127.0.0.2:4321"]
    assert sup.watchdog.stall_seconds == {"worker:0": 60.0, "worker:1": 5.0}
    assert sup.outputs._on_nan == {"worker:0": "warn", "worker:1": "stop"}
    sup.write_state()
    recorded = json.loads((sup.rundir.path / "state.json").read_text())["tasks"]["worker:1"]
    assert (recorded["address"], recorded["port"], recorded["restarts"]) == ("127.0.0.2", 4321, 2)


def test_tasks_added_start_pending_and_tasks_dropped_are_gone(tmp_path: Path) -> None:
    sup = _supervisor(tmp_path, _plan(tmp_path, 2))
    sup.tasks["worker:0"].restarts = 1
    grown = _plan(tmp_path, 3, "grown.toml")
    sup.replace_plan(grown, {"worker:2": 2002})
    assert list(sup.tasks) == ["worker:0", "worker:1", "worker:2"]
    assert sup.tasks["worker:0"].restarts == 1 and sup.tasks["worker:2"].phase == ev.PENDING
    assert sup.watchdog.workers == ["worker:0", "worker:1", "worker:2"]
    assert sup.restarts.facts().tasks.keys() == {"worker:0", "worker:1", "worker:2"}  # the policy's view
    sup.replace_plan(_plan(tmp_path, 1, "shrunk.toml"))
    assert list(sup.tasks) == ["worker:0"] and sup.knows("worker:0") and not sup.knows("worker:1")


def test_a_plan_on_a_host_with_no_session_is_refused_and_changes_nothing(tmp_path: Path) -> None:
    plan = _plan(tmp_path, 1)
    sup = _supervisor(tmp_path, plan)
    elsewhere = replace(plan, tasks=tuple(replace(t, host="spare") for t in plan.tasks))
    with pytest.raises(ValueError, match="no session: spare"):
        sup.replace_plan(elsewhere)
    assert sup.plan is plan and sup.tasks["worker:0"].spec.host == "local"


def test_log_policies_are_compiled_again_only_when_the_new_plan_changes_them(tmp_path: Path) -> None:
    plan = _plan(tmp_path, 1)
    sup = _supervisor(tmp_path, plan)
    logs = sup.outputs.logs
    sup.replace_plan(replace(plan))
    assert sup.outputs.logs is logs  # what the running incarnations matched is kept
    policy = LogPolicy("CUDA_ERROR_OUT_OF_MEMORY", "no_retry")
    sup.replace_plan(replace(plan, profile=replace(plan.profile, log_policies=(policy,))))
    assert sup.outputs.logs.policies == [policy]
    sup.outputs.on_event(ev.log_event(RUN, "worker:0", "stderr", "CUDA_ERROR_OUT_OF_MEMORY at step 3"))
    assert sup.outputs.no_retry("worker:0") == \
        "output matched log policy 1 (CUDA_ERROR_OUT_OF_MEMORY): CUDA_ERROR_OUT_OF_MEMORY at step 3"
