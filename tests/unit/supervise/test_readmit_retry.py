"""A lost host that answers again but fails its fresh preflight is tried again after another
cooldown, a bounded number of times, each refusal one line (launcher/supervise/regrow.py)."""

from __future__ import annotations

import time
from collections.abc import Callable
from types import SimpleNamespace
from typing import Any

import pytest

from launcher import events as ev
from launcher.supervise import regrow
from launcher.supervise.hostloss import HostState


class Owner:
    """The supervisor's side Growth uses, run inline: its loop and host threads are the caller."""

    def __init__(self) -> None:
        self.run_id = "r"
        self.finishing = False
        self.plan = SimpleNamespace(profile=SimpleNamespace(readmit_after_seconds=1))
        self.sessions = {"c": object()}
        self.notices: list[str] = []
        self.published: list[ev.Event] = []
        self.submitted = 0

    def call(self, fn: Callable[[], None]) -> None:
        fn()

    def submit(self, host: str, fn: Callable[[], None]) -> None:
        self.submitted += 1
        fn()

    def notice(self, line: str) -> None:
        self.notices.append(line)

    def publish(self, event: ev.Event, line: str | None = None) -> None:
        self.published.append(event)


def test_a_refused_readmission_is_tried_again_after_the_wait_and_then_given_up(monkeypatch: pytest.MonkeyPatch) -> None:
    owner = Owner()
    hosts: Any = SimpleNamespace(states={"c": HostState(ev.HOST_LOST, "no contact", time.time() - 5)})
    growth = regrow.Growth(owner, hosts)  # type: ignore[arg-type]
    monkeypatch.setattr(growth, "_grow", lambda: None)
    monkeypatch.setattr(regrow, "preflight_again", lambda plan, host, session: ["the disk of /home is full"])
    growth.host_answered("c")
    growth.tick()
    assert owner.submitted == 1 and "tried again in 30 s" in owner.notices[-1]
    assert "c" in growth.returned
    growth.tick()  # within the wait: not tried
    assert owner.submitted == 1
    for tries in range(2, regrow.READMIT_TRIES + 1):
        growth._refused["c"] = (growth._refused["c"][0], time.monotonic() - 1)  # the wait is over
        growth.tick()
        assert owner.submitted == tries
    assert f"refused {regrow.READMIT_TRIES} times, not tried again" in owner.notices[-1]
    assert "c" not in growth.returned
    assert all(e.kind == ev.HOST for e in owner.published) and len(owner.published) == regrow.READMIT_TRIES
