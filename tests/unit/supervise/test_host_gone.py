"""What the job does when a host is gone for good (supervise/replan.py) and the plan it moves to
(launcher/placement.py): tables on plans built from real profiles; no socket, process or clock."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest

from launcher import events as ev
from launcher.model import Plan
from launcher.placement import drop_tasks, is_rehearsal, move_tasks, moved_from, recorded_placement, rehearsal
from launcher.plan import build_plan, tf_config
from launcher.profile.reader import load_profile
from launcher.runstate import RunState
from launcher.supervise.decide import GiveUp, JobFacts, TaskFacts
from launcher.supervise.policy import deciding_task, job_succeeded
from launcher.supervise.replan import (
    HostGone,
    Move,
    Nothing,
    Room,
    Shrink,
    decide_host_gone,
    lost_after,
    recovery_set,
)


def _plan(tmp_path: Path, strategy: str, roles: str, top: str = "") -> Plan:
    hosts = "".join(f'[hosts.{h}]\naddress = "10.9.0.{i + 1}"\n' for i, h in enumerate("abcde"))
    path = tmp_path / "p.toml"
    path.write_text(f'name = "gone"\nstrategy = "{strategy}"\norphan_grace_seconds = 10\n{top}\n'
                    f'[defaults]\ncommand = "python train.py"\nworkdir = "/w"\n{hosts}{roles}')
    return build_plan(load_profile(path))


MWMS = '[roles.worker]\nhosts = ["a", "b"]\ncount = 2\nport = 7000\n'
PSS = ('[roles.ps]\nhosts = ["a"]\ncount = 1\nport = 7000\n[roles.chief]\nhosts = ["a"]\ncount = 1\nport = 7100\n'
       '[roles.worker]\nhosts = ["b", "c"]\ncount = 2\nport = 7200\n')


def _facts(plan: Plan, **states: str) -> JobFacts:
    given = {k.replace("_", ":"): v for k, v in states.items()}
    return JobFacts({t.task_id: TaskFacts(given.get(t.task_id, ev.RUNNING)) for t in plan.tasks})


def test_a_lost_host_moves_to_the_first_spare(tmp_path: Path) -> None:
    plan = _plan(tmp_path, "multi_worker_mirrored", MWMS, 'spares = ["d", "e"]')
    gone = HostGone("b", "no contact for 120 s")
    decision = decide_host_gone(plan, _facts(plan, worker_1=ev.LOST), gone, Room(("d", "e"), 0))
    assert decision == Move(("worker:1",), "b", "d", "host b lost (no contact for 120 s)")


def test_without_a_spare_mwms_at_min_count_fails_naming_the_host_and_the_task(tmp_path: Path) -> None:
    plan = _plan(tmp_path, "multi_worker_mirrored", MWMS)
    decision = decide_host_gone(plan, _facts(plan), HostGone("b", "no contact for 120 s"), Room((), 0))
    assert isinstance(decision, GiveUp)
    assert decision.cause.startswith("host b lost (no contact for 120 s); no spare host for worker:1")
    assert "min_count = 2" in decision.cause


def test_without_a_spare_a_role_above_min_count_shrinks(tmp_path: Path) -> None:
    plan = _plan(tmp_path, "multi_worker_mirrored", MWMS.replace("port = 7000", "port = 7000\nmin_count = 1"))
    decision = decide_host_gone(plan, _facts(plan), HostGone("a", "no contact for 30 s"), Room((), 0))
    assert decision == Shrink(("worker:0",), "a", "host a lost (no contact for 30 s)")
    after = drop_tasks(plan, decision.tasks)
    # the worker left is numbered 0 in TF_CONFIG, and it decides the job's success
    assert tf_config(after, "worker:1")["task"] == {"type": "worker", "index": 0}
    assert tf_config(after, "worker:1")["cluster"] == {"worker": ["10.9.0.2:7000"]}
    assert deciding_task([t.task_id for t in after.tasks]) == "worker:1"
    assert job_succeeded("chief", {"worker:1": "succeeded"})


def test_pss_workers_shrink_by_default_but_a_lost_ps_or_chief_fails(tmp_path: Path) -> None:
    plan = _plan(tmp_path, "parameter_server", PSS)
    assert decide_host_gone(plan, _facts(plan), HostGone("c", "x"), Room((), 0)) == \
        Shrink(("worker:1",), "c", "host c lost (x)", in_place=True)
    lost_a = decide_host_gone(plan, _facts(plan), HostGone("a", "no contact for 120 s"), Room((), 0))
    assert isinstance(lost_a, GiveUp)
    assert lost_a.cause.startswith("host a lost (no contact for 120 s); no spare host for ps:0, chief:0")


def test_a_pss_worker_shrink_restarts_nothing_and_counts_the_workers_already_left(tmp_path: Path) -> None:
    """Issue 55: PSS workers leave in place (the coordinator goes on); min_count counts those gone before."""
    three = PSS.replace('hosts = ["b", "c"]\ncount = 2', 'hosts = ["b", "c", "d"]\ncount = 3\nmin_count = 2')
    plan = _plan(tmp_path, "parameter_server", three, "max_host_losses = 3")
    first = decide_host_gone(plan, _facts(plan), HostGone("d", "x"), Room((), 0))
    assert first == Shrink(("worker:2",), "d", "host d lost (x)", in_place=True)
    # worker:2 stays in the plan (lost): the next loss would take the role below min_count 2
    second = decide_host_gone(plan, _facts(plan, worker_2=ev.LOST), HostGone("c", "y"), Room((), 1, ("worker:2",)))
    assert isinstance(second, GiveUp) and "worker may not go below min_count = 2 (it would have 1)" in second.cause
    # a shrink of MWMS (or of a PSS chief with a worker) is no shrink in place: the cluster restarts
    mwms = _plan(tmp_path, "multi_worker_mirrored", MWMS.replace("port = 7000", "port = 7000\nmin_count = 1"))
    assert not decide_host_gone(mwms, _facts(mwms), HostGone("b", "x"), Room((), 0)).in_place  # type: ignore[union-attr]
    # the job succeeds without the lost worker under success_policy = "all_workers"
    assert job_succeeded("all_workers", {"chief:0": "succeeded", "worker:0": "succeeded", "worker:1": "lost"})


@pytest.mark.parametrize(("policy", "spares", "expected"), [
    ("replace", ("d",), Move), ("shrink", ("d",), Shrink), ("fail", ("d",), GiveUp), ("replace", (), Shrink)])
def test_on_host_lost_chooses(tmp_path: Path, policy: str, spares: tuple[str, ...], expected: type) -> None:
    plan = _plan(tmp_path, "parameter_server", PSS, f'on_host_lost = "{policy}"\nspares = ["d"]')
    decision = decide_host_gone(plan, _facts(plan), HostGone("c", "x"), Room(spares, 0))
    assert type(decision) is expected


def test_max_host_losses_bounds_the_moves(tmp_path: Path) -> None:
    plan = _plan(tmp_path, "parameter_server", PSS, 'spares = ["d"]')
    assert plan.profile.host_loss_limit == 2  # spares + 1
    decision = decide_host_gone(plan, _facts(plan), HostGone("c", "x"), Room(("d",), 2))
    assert isinstance(decision, GiveUp) and "max_host_losses = 2" in decision.cause


def test_a_host_whose_tasks_all_ended_needs_nothing(tmp_path: Path) -> None:
    plan = _plan(tmp_path, "parameter_server", PSS)
    facts = _facts(plan, worker_1=ev.SUCCEEDED)
    assert decide_host_gone(plan, facts, HostGone("c", "x"), Room((), 0)) == Nothing("c")


def test_a_drain_is_said_as_one(tmp_path: Path) -> None:
    plan = _plan(tmp_path, "parameter_server", PSS, 'spares = ["d"]')
    decision = decide_host_gone(plan, _facts(plan), HostGone("b", "maintenance", drained=True), Room(("d",), 0))
    assert decision == Move(("worker:0",), "b", "d", "host b drained (maintenance)")


def test_recovery_set_follows_the_strategy(tmp_path: Path) -> None:
    mwms = _plan(tmp_path, "multi_worker_mirrored", MWMS + '[roles.evaluator]\nhosts = ["a"]\ncount = 1\n')
    assert recovery_set(mwms, ("worker:1",), {}) == ("worker:0", "worker:1")  # the evaluator is no peer
    pss = _plan(tmp_path, "parameter_server", PSS)
    assert set(recovery_set(pss, ("worker:1",), {"worker:0": ev.SUCCEEDED})) == {"ps:0", "chief:0", "worker:1"}
    custom = _plan(tmp_path, "custom", PSS)
    assert recovery_set(custom, ("worker:1",), {}) == ("worker:1",)


def test_a_moved_task_is_placed_as_the_builder_places_it_and_every_tf_config_follows(tmp_path: Path) -> None:
    plan = _plan(tmp_path, "multi_worker_mirrored", MWMS, 'spares = ["d"]')
    after = move_tasks(plan, ["worker:1"], "d")
    moved = after.task("worker:1")
    assert (moved.host, moved.address, moved.port) == ("d", "10.9.0.4", None)
    assert moved_from(plan, after) == {"worker:1": "b"}
    ports = {"worker:0": 7000, "worker:1": 41000}
    for task in ("worker:0", "worker:1"):
        assert tf_config(after, task, ports)["cluster"]["worker"] == ["10.9.0.1:7000", "10.9.0.4:41000"]


def test_the_recorded_placement_is_the_plan_attach_adopts(tmp_path: Path) -> None:
    plan = _plan(tmp_path, "parameter_server", PSS, 'spares = ["d"]')
    state = RunState.from_json(json.loads(json.dumps(
        {"run_id": "r", "tasks": {t.task_id: {"host": t.host} for t in plan.tasks}})))
    state.tasks["worker:0"].host = "d"
    del state.tasks["worker:1"]
    adopted = recorded_placement(plan, {t: r.host for t, r in state.tasks.items()})
    assert {t.task_id: t.host for t in adopted.tasks} == {"ps:0": "a", "worker:0": "d", "chief:0": "a"}


def test_a_task_grown_past_the_count_is_in_the_plan_attach_adopts(tmp_path: Path) -> None:
    """A resize up to max_count added worker:2 on spare d: attach places it as the grow did."""
    plan = _plan(tmp_path, "parameter_server", PSS, 'spares = ["d"]')
    recorded = {t.task_id: t.host for t in plan.tasks} | {"worker:2": "d"}
    adopted = recorded_placement(plan, recorded)
    grown = adopted.task("worker:2")
    assert (grown.role, grown.index, grown.host, grown.address) == ("worker", 2, "d", "10.9.0.4")
    assert [t.task_id for t in adopted.tasks if t.role == "worker"][-1] == "worker:2"
    with pytest.raises(KeyError):
        recorded_placement(plan, {**recorded, "nosuch:0": "d"})


def test_spares_are_rehearsed_with_a_task_of_each_role(tmp_path: Path) -> None:
    plan = _plan(tmp_path, "parameter_server", PSS, 'spares = ["d"]')
    rehearsed = [t for t in rehearsal(plan).tasks if is_rehearsal(t.task_id)]
    assert {(t.role, t.host, t.address, t.port) for t in rehearsed} == {
        ("ps", "d", "10.9.0.4", None), ("chief", "d", "10.9.0.4", None), ("worker", "d", "10.9.0.4", None)}
    assert rehearsal(_plan(tmp_path, "parameter_server", PSS)).tasks == build_plan(plan.profile).tasks


def test_a_host_is_never_lost_before_its_agent_has_surely_stopped_its_tasks(tmp_path: Path) -> None:
    plan = _plan(tmp_path, "multi_worker_mirrored", MWMS.replace("port = 7000", "port = 7000\ngrace_seconds = 30"),
                 "host_lost_seconds = 12")
    # orphan_grace_seconds 10 + the tasks' grace 30 + the margin for the pings the agent may still have had
    assert lost_after(plan, "b") == 10 + 30 + 10
    assert lost_after(plan, "e") == 12 + 8  # no task there: orphan grace + margin still
    roomy = _plan(tmp_path, "multi_worker_mirrored", MWMS, "host_lost_seconds = 300")
    assert lost_after(roomy, "b") == 300


def test_a_spare_known_by_an_ssh_alias_is_reached_at_its_resolved_address(tmp_path: Path) -> None:
    plan = _plan(tmp_path, "multi_worker_mirrored", MWMS, 'spares = ["d"]')
    plan = dataclasses.replace(plan, addresses={"d": "192.0.2.40"})
    assert move_tasks(plan, ["worker:1"], "d").task("worker:1").address == "192.0.2.40"
