"""`distlaunch profile`'s pieces that need no TensorFlow: which tasks and ports, the capture
length, which file is whose, where it is kept; and the preflight's profiler ports."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

import pytest

from launcher.commands.profile import capture_folder, parse_seconds, targets_of
from launcher.errors import UserError
from launcher.remote.preflight import Preflight, _judge_host
from launcher.runstate import RunState
from launcher.tfprofiler.capture import Target, match

STATE = RunState.from_json({
    "run_id": "r1", "name": "job", "hosts": {"a": {"config": {"transport": "local"}, "outputs_dir": "/o/job"}},
         "tasks": {"worker:0": {"host": "a", "address": "10.0.0.1", "port": 2222, "state": "running",
                                "profiler_port": 40001},
                   "worker:1": {"host": "b", "address": "10.0.0.2", "port": 2222, "state": "running",
                                "profiler_port": 40001},
                   "ps:0": {"host": "a", "address": "10.0.0.1", "port": 2223, "state": "succeeded",
                            "profiler_port": 40002},
                   "old:0": {"host": "a", "address": "10.0.0.1", "port": 2224, "state": "running"}}})


def test_running_tasks_by_default_and_one_line_mistakes() -> None:
    chosen = targets_of(STATE, ["worker:0", "worker:1"])
    assert [t.service for t in chosen] == ["grpc://10.0.0.1:40001", "grpc://10.0.0.2:40001"]
    with pytest.raises(UserError, match="no task 'worker:7'"):
        targets_of(STATE, ["worker:7"])
    with pytest.raises(UserError, match="old:0 of run r1 has no profiler port"):
        targets_of(STATE, [])  # every running task: old:0 has none


def test_seconds_are_bounded_and_readable() -> None:
    assert parse_seconds("2") == 2.0
    for bad in ("abc", "0", "0.001", "61", "-1"):
        with pytest.raises(UserError, match="--seconds"):
            parse_seconds(bad)


def test_files_go_to_their_own_task_only_by_exact_name(tmp_path: Path) -> None:
    a, b = Target("worker:0", "a", "10.0.0.1", 40001), Target("worker:1", "b", "10.0.0.2", 40001)
    files = [tmp_path / "p" / "10.0.0.2_40001.xplane.pb", tmp_path / "p" / "somehost_40001.xplane.pb"]
    assert match([a, b], files) == {"worker:1": files[0]}  # the same port on another host is not a's


def test_kept_under_the_local_hosts_outputs() -> None:
    folder = capture_folder(STATE, 0.0)
    assert folder == Path("/o/job/profile/r1/19700101T000000Z")


def task(task_id: str, port: int | None = None) -> SimpleNamespace:
    return SimpleNamespace(task_id=task_id, port=port, role=task_id.split(":")[0])


def test_preflight_gives_each_task_a_profiler_port_beside_its_own() -> None:
    given, auto = [task("ps:0", 2222)], [task("worker:0"), task("worker:1")]
    answer = {"ports": {"busy": [], "picked": [5001, 5002, 6001, 6002, 6003]}}
    problems, ports = _judge_host("h", given, auto, answer)  # type: ignore[arg-type]
    pre = Preflight(hosts={})
    pre.take_ports(ports)
    assert problems == []
    assert pre.ports == {"ps:0": 2222, "worker:0": 5001, "worker:1": 5002}
    assert pre.profiler_ports == {"ps:0": 6001, "worker:0": 6002, "worker:1": 6003}
    assert not set(pre.profiler_ports.values()) & set(pre.ports.values())
