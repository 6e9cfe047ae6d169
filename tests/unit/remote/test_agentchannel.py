"""The launcher's side of a host's one exec: the preflight's line first, the event stream after."""

from __future__ import annotations

import threading

import pytest

from launcher.remote.channel import AgentChannel


def test_the_first_line_answers_the_preflight_and_later_lines_wait_for_attach_in_order() -> None:
    channel = AgentChannel()
    channel.feed('{"python": "3.11"}')
    channel.feed("a")
    channel.feed("b")
    assert channel.first_line(1.0) == '{"python": "3.11"}'
    got: list[str] = []
    closed: list[int | None] = []
    channel.attach(got.append, closed.append)
    assert got == ["a", "b"]
    channel.feed("c")
    assert got == ["a", "b", "c"] and closed == []
    channel.ended(0)
    assert closed == [0]


def test_an_end_before_attach_is_told_at_attach_and_only_once() -> None:
    channel = AgentChannel()
    channel.feed("{}")
    channel.feed("last")
    channel.ended(1)
    got: list[str] = []
    closed: list[int | None] = []
    channel.attach(got.append, closed.append)
    assert got == ["last"] and closed == [1]


def test_a_command_that_ends_without_a_line_gives_none_and_a_silent_one_times_out() -> None:
    ended = AgentChannel()
    ended.ended(127)
    assert ended.first_line(1.0) is None
    with pytest.raises(TimeoutError):
        AgentChannel().first_line(0.05)


def test_lines_fed_while_attach_replays_keep_their_order() -> None:
    channel = AgentChannel()
    channel.feed("{}")
    for i in range(2000):
        channel.feed(str(i))
    got: list[str] = []
    feeder = threading.Thread(target=lambda: [channel.feed(str(i)) for i in range(2000, 4000)])
    feeder.start()
    channel.attach(got.append, lambda _code: None)
    feeder.join()
    assert got == [str(i) for i in range(4000)]


def test_what_a_login_script_prints_before_the_answer_is_kept_aside() -> None:
    channel = AgentChannel()
    channel.feed("Welcome to the cluster")
    channel.feed("")
    channel.feed('{"python": "3.11.7"}')
    assert channel.first_line(1.0) == '{"python": "3.11.7"}'
    assert channel.noise == ["Welcome to the cluster", ""]
