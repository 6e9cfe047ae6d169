"""The growth policy (launcher/supervise/growth.py) from a table: when a role grows, onto which
host, whether the cluster restarts, and which tasks a smaller size stops."""

from __future__ import annotations

from pathlib import Path

import pytest

from launcher.errors import ProfileError
from launcher.model import Plan
from launcher.plan import build_plan
from launcher.profile.reader import load_profile
from launcher.supervise.growth import Grow, GrowRoom, Hold, check_target, decide_grow, decide_shrink


def _plan(tmp_path: Path, strategy: str, *, top: str = "", workers: int = 2, extra: str = "max_count = 4") -> Plan:
    ps = '[roles.ps]\nhosts = ["a"]\n[roles.chief]\nhosts = ["a"]\n' if strategy == "parameter_server" else ""
    path = tmp_path / "p.toml"
    path.write_text(f"""
name = "grow"
strategy = "{strategy}"
spares = ["s"]
{top}
[defaults]
command = "python train.py"
workdir = "{tmp_path}"
[hosts.a]
address = "10.0.0.1"
[hosts.b]
address = "10.0.0.2"
[hosts.c]
address = "10.0.0.3"
[hosts.s]
address = "10.0.0.9"
{ps}[roles.worker]
hosts = ["b", "c"]
count = {workers}
min_count = 1
{extra}
""")
    return build_plan(load_profile(path))


def test_a_pss_worker_whose_host_is_back_starts_alone_at_its_address(tmp_path: Path) -> None:
    plan = _plan(tmp_path, "parameter_server")
    room = GrowRoom(("b", "c"), {"worker:1": "c"}, {"worker": 2}, spares=("c",), new_checkpoint=False)
    assert decide_grow(plan, room) == Grow("worker", 1, 2, (("worker:1", "c"),), restart=False)


def test_on_its_own_the_policy_never_doubles_a_task_up_on_the_hosts_that_are_left(tmp_path: Path) -> None:
    """A PSS job that went on without worker:1 (host c lost, no spare left): nothing to grow onto,
    so nothing happens; the same room when the operator resizes puts it on a host of the role."""
    plan = _plan(tmp_path, "parameter_server", top='grow = "now"')
    room = GrowRoom(("a", "b"), {"worker:1": "c"}, {"worker": 2})
    assert decide_grow(plan, room) is None
    asked = decide_grow(plan, GrowRoom(("a", "b"), {"worker:1": "c"}, {"worker": 2}, asked=True))
    assert isinstance(asked, Grow) and asked.placements == (("worker:1", "b"),) and asked.restart


def test_a_pss_worker_on_another_host_restarts_the_cluster_and_says_why(tmp_path: Path) -> None:
    plan = _plan(tmp_path, "parameter_server", top='grow = "now"')
    decision = decide_grow(plan, GrowRoom(("b", "s"), {"worker:1": "c"}, {"worker": 2}, spares=("s",)))
    assert isinstance(decision, Grow) and decision.placements == (("worker:1", "s"),) and decision.restart
    assert "cannot join the running coordinator at a new address" in decision.restart_why


def test_at_checkpoint_waits_for_a_checkpoint_before_a_restarting_grow(tmp_path: Path) -> None:
    plan = _plan(tmp_path, "multi_worker_mirrored")
    room = GrowRoom(("b", "s"), {}, {"worker": 3}, spares=("s",))
    held = decide_grow(plan, room)
    assert isinstance(held, Hold) and "waits for a checkpoint" in held.why
    grown = decide_grow(plan, GrowRoom(("b", "s"), {}, {"worker": 3}, spares=("s",), new_checkpoint=True))
    assert grown == Grow("worker", 2, 3, (("worker:2", "s"),), restart=True, restart_why=grown.restart_why
                         if isinstance(grown, Grow) else "")


def test_never_grows_only_when_asked_and_grow_every_seconds_spaces_grows(tmp_path: Path) -> None:
    never = _plan(tmp_path, "custom", top='grow = "never"')
    room = GrowRoom(("b", "c"), {"worker:1": "c"}, {"worker": 2})
    assert decide_grow(never, room) is None
    assert isinstance(decide_grow(never, GrowRoom(("b", "c"), {"worker:1": "c"}, {"worker": 2}, asked=True)), Grow)
    spaced = _plan(tmp_path, "custom", top="grow_every_seconds = 60")
    held = decide_grow(spaced, GrowRoom(("b", "c"), {"worker:1": "c"}, {"worker": 2}, since_last=10.0))
    assert isinstance(held, Hold) and "waits 50 s" in held.why


def test_nothing_to_grow_at_the_target_or_without_a_host(tmp_path: Path) -> None:
    plan = _plan(tmp_path, "custom")
    assert decide_grow(plan, GrowRoom(("b", "c"), {}, {"worker": 2})) is None
    assert decide_grow(plan, GrowRoom((), {"worker:1": "c"}, {"worker": 2})) is None


def test_a_resize_up_adds_new_indices_on_the_roles_hosts_in_turn(tmp_path: Path) -> None:
    plan = _plan(tmp_path, "custom")
    decision = decide_grow(plan, GrowRoom(("b", "c"), {}, {"worker": 4}, asked=True))
    assert decision == Grow("worker", 2, 4, (("worker:2", "b"), ("worker:3", "c")), restart=False)


def test_shrink_stops_the_highest_indices_and_targets_stay_within_min_and_max(tmp_path: Path) -> None:
    plan = _plan(tmp_path, "custom", workers=3)
    assert decide_shrink(plan, "worker", 1, {}) == ("worker:2", "worker:1")
    assert decide_shrink(plan, "worker", 1, {"worker:2": "c"}) == ("worker:1",)
    assert check_target(plan, "worker", 3) is None
    assert "outside 1..4 (min_count..max_count)" in str(check_target(plan, "worker", 5))
    assert "outside 1..4" in str(check_target(plan, "worker", 0))
    assert "no ps role" in str(check_target(plan, "ps", 1))


def test_max_count_below_count_is_one_line(tmp_path: Path) -> None:
    with pytest.raises(ProfileError, match=r"max_count.*is 1, less than count \(2\)"):
        _plan(tmp_path, "custom", extra="max_count = 1")
