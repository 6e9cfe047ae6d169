"""Issue 49, item 3, the part without TensorFlow: before TensorFlow's profiler client is asked, each
task's port is connected to and must greet as a gRPC server does; a port that does not is said at
once, per task, in words that say what is there (real sockets: tests/badports.py)."""

from __future__ import annotations

import time

import pytest

import launcher.tfprofiler.capture
from launcher.tfprofiler.capture import Target, probe
from tests.badports import bad_port

PROBE_TIMEOUT_S = 1.0
EXPECTED = {
    "garbage": "not a TensorFlow profiler server (it sent b'HTTP/1.0 '",
    "big": "not a TensorFlow profiler server (it sent b'xxxxxxxxx'",
    "silent": f"says nothing within {PROBE_TIMEOUT_S:g} s",
    "closed": "nothing listens there (connection refused)",
}


@pytest.fixture(autouse=True)
def quick_probe(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(launcher.tfprofiler.capture, "PROBE_TIMEOUT_S", PROBE_TIMEOUT_S)


@pytest.mark.parametrize("mode", sorted(EXPECTED))
def test_a_port_that_is_no_grpc_server_is_named_with_what_is_there(mode: str) -> None:
    with bad_port(mode) as port:
        started = time.monotonic()
        found = probe([Target("worker:3", "local", "127.0.0.1", port)])
    assert list(found) == ["worker:3"]
    assert EXPECTED[mode] in found["worker:3"], found
    assert "\n" not in found["worker:3"]
    assert time.monotonic() - started < PROBE_TIMEOUT_S + 1.5


def test_a_connection_closed_at_once_is_no_profiler_server() -> None:
    with bad_port("close") as port:
        found = probe([Target("ps:0", "local", "127.0.0.1", port)])
    assert "not a TensorFlow profiler server" in found["ps:0"], found


def test_what_greets_as_grpc_goes_on_to_tensorflow_and_all_are_checked_at_once() -> None:
    with bad_port("h2silent") as good, bad_port("silent") as slow1, bad_port("silent") as slow2:
        targets = [Target("chief:0", "local", "127.0.0.1", good), Target("worker:0", "local", "127.0.0.1", slow1),
                   Target("worker:1", "local", "127.0.0.1", slow2)]
        started = time.monotonic()
        found = probe(targets)
    assert sorted(found) == ["worker:0", "worker:1"]
    assert time.monotonic() - started < PROBE_TIMEOUT_S + 1.5  # not one timeout after the other
