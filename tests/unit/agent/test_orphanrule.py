"""The orphan rule (launcher/agent/orphanrule.py), the one the host agent and the `run` verb share,
on a clock the test moves: a lease touch keeps the tasks; the grace is judged by the
monotonic clock too, so a wall clock set back does not keep them."""

from __future__ import annotations

import os
from pathlib import Path
from types import SimpleNamespace

import pytest

from launcher.agent import orphanrule
from launcher.agent.orphanrule import OrphanRule


class Clock:
    def __init__(self) -> None:
        self.wall = 1_000_000.0
        self.mono = 50.0

    def advance(self, seconds: float, wall: float | None = None) -> None:
        self.mono += seconds
        self.wall += seconds if wall is None else wall


@pytest.fixture
def clock(monkeypatch: pytest.MonkeyPatch) -> Clock:
    clock = Clock()
    monkeypatch.setattr(orphanrule, "time", SimpleNamespace(time=lambda: clock.wall, monotonic=lambda: clock.mono))
    return clock


def touch(run_dir: Path, clock: Clock) -> None:
    lease = run_dir / "lease"
    lease.touch()
    os.utime(lease, (clock.wall, clock.wall))


def test_lease_touches_keep_the_tasks_and_their_end_starts_the_grace(tmp_path: Path, clock: Clock) -> None:
    rule = OrphanRule(str(tmp_path), 10.0)
    for _ in range(4):
        clock.advance(6.0)
        touch(tmp_path, clock)
        assert not rule.lost()
    clock.advance(9.0)
    assert not rule.lost()
    clock.advance(2.0)
    assert rule.lost()


def test_a_wall_clock_set_back_does_not_keep_the_tasks(tmp_path: Path, clock: Clock) -> None:
    """What the `run` verb's copy of the rule lacked: by the lease's time alone they ran on."""
    rule = OrphanRule(str(tmp_path), 10.0)
    touch(tmp_path, clock)
    assert not rule.lost()
    clock.advance(11.0, wall=-3600.0)
    assert rule.lost()


def test_a_lease_older_than_the_grace_by_the_wall_clock_is_lost(tmp_path: Path, clock: Clock) -> None:
    rule = OrphanRule(str(tmp_path), 10.0)
    touch(tmp_path, clock)
    assert not rule.lost()
    clock.advance(1.0, wall=20.0)  # the host's clock stepped forward, or this process was stopped
    assert rule.lost()


def test_a_detached_marker_an_older_distlaunch_left_changes_nothing(tmp_path: Path, clock: Clock) -> None:
    rule = OrphanRule(str(tmp_path), 10.0)
    (tmp_path / "detached").touch()  # detaching was removed: the marker keeps no task alive
    clock.advance(11.0)
    assert rule.lost()
