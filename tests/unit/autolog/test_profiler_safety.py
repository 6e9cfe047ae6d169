"""Autolog says when a profiler capture would crash its task (issue 46 §2): a strategy that
configures collectives led by another task (launcher/autolog/profilersafety.py)."""

from __future__ import annotations

import json
from types import SimpleNamespace
from typing import Any

import pytest

from launcher.autolog import profilersafety, recorder
from launcher.autolog.profilersafety import PROFILER_UNSAFE


class FakeContext:
    """The one method of TensorFlow's eager Context that autolog wraps, with its signature."""

    def __init__(self) -> None:
        self.configured: Any = None

    def configure_collective_ops(self, collective_leader: str = "", scoped_allocator_enabled_ops: Any = (),
                                 use_nccl_communication: bool = False, device_filters: Any = None) -> str:
        self.configured = (collective_leader, device_filters)
        return "configured"


class Said(list):  # type: ignore[type-arg]
    """What autolog sent (its note() calls); ``cls``: a Context class of its own, wrapped."""

    cls: type


@pytest.fixture
def said(monkeypatch: pytest.MonkeyPatch) -> Said:
    lines = Said()
    monkeypatch.setattr(recorder, "note", lambda **kw: lines.append(kw))
    monkeypatch.delenv("TF_CONFIG", raising=False)
    lines.cls = type("Context", (FakeContext,), {"configure_collective_ops": FakeContext.configure_collective_ops})
    for _ in range(2):  # wrapped once
        profilersafety.watch(lambda name: SimpleNamespace(Context=lines.cls))
    return lines


def configure(lines: Said, *args: Any, **kwargs: Any) -> None:
    context = lines.cls()
    assert context.configure_collective_ops(*args, **kwargs) == "configured"  # the call goes through unchanged


UNSAFE = {"values": {PROFILER_UNSAFE: 1}, "now": True}


def test_a_worker_led_by_another_task_says_a_capture_would_crash_it(said: Said) -> None:
    # what MultiWorkerMirroredStrategy passes worker:1 of two workers
    configure(said, collective_leader="/job:worker/replica:0/task:0", device_filters=("/job:worker/task:1",))
    assert said == [UNSAFE]


def test_the_leader_and_local_collectives_are_safe(said: Said) -> None:
    configure(said, collective_leader="/job:worker/replica:0/task:0", device_filters=("/job:worker/task:0",))
    configure(said, "/job:chief/replica:0/task:0", (), False, ["/job:chief/task:0"])  # positional
    configure(said)  # MirroredStrategy on one machine: no leader
    configure(said, collective_leader="")
    assert said == []


def test_under_a_chief_every_worker_is_led_by_the_chief(said: Said) -> None:
    configure(said, "/job:chief/replica:0/task:0", (), False, ("/job:worker/task:0",))
    assert said == [UNSAFE]


def test_without_device_filters_the_task_is_tf_configs(said: Said,
                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TF_CONFIG", json.dumps({"cluster": {}, "task": {"type": "worker", "index": 1}}))
    configure(said, collective_leader="/job:worker/replica:0/task:0")
    assert said == [UNSAFE]
    monkeypatch.setenv("TF_CONFIG", "not json")
    configure(said, collective_leader="/job:worker/replica:0/task:0")  # no task known: nothing said
    assert said == [UNSAFE]


def test_a_failure_to_judge_is_said_once_and_never_the_scripts(said: Said,
                                                               monkeypatch: pytest.MonkeyPatch) -> None:
    degraded: list[str] = []
    monkeypatch.setattr(recorder, "degraded", lambda what, exc, once=None: degraded.append(what))
    monkeypatch.setattr(profilersafety, "_judge", lambda *a: 1 / 0)
    configure(said, collective_leader="/job:worker/replica:0/task:0")
    assert degraded == ["tell whether a profiler capture is safe here"] and said == []


def test_the_line_it_sends(capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(recorder.reporter, "min_interval", 1000.0)
    profilersafety._judge("/job:worker/replica:0/task:0", ["/job:worker/task:1"])
    line = capsys.readouterr().out.strip()
    assert line.startswith("@distlaunch ")
    message = json.loads(line[len("@distlaunch "):])
    assert message["kind"] == "metric" and message["values"][PROFILER_UNSAFE] == 1 and message["source"] == "autolog"
