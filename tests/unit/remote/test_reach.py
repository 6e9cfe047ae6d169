"""The reach check on a host (launcher/agent/reachcheck.py): held ports greet with their host's token,
probes tell reached, refused, timed out and "another host's port" apart, and the verb's second
phase answers `#reach` lines on stdin, then lets the ports go on the next line."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import threading
from collections.abc import Iterator

import pytest

from launcher.agent.reachcheck import PortHold, probe
from launcher.protocol.agentlines import ReachAnswer
from launcher.remote.channel import AgentChannel

PREFIX = ReachAnswer.PREFIX  # what the launcher's request and the verb's answer start with

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))


@pytest.fixture
def hold() -> Iterator[PortHold]:
    held = PortHold("127.0.0.1", [0, 0], "b")  # port 0: any free one
    yield held
    held.close()


def test_held_ports_are_reached_with_their_token(hold: PortHold) -> None:
    targets = [{"task": f"worker:{i}", "address": "127.0.0.1", "port": p, "token": "b"}
               for i, p in enumerate(hold.ports)]
    assert len(hold.ports) == 2 and not hold.failed
    assert probe(targets) == []


def test_a_port_of_another_host_and_a_closed_port_fail_with_their_reason(hold: PortHold) -> None:
    with socket.socket() as closed:  # bound, never listening: connections are refused
        closed.bind(("127.0.0.1", 0))
        closed_port = closed.getsockname()[1]
        failed = probe([{"task": "ps:0", "address": "127.0.0.1", "port": hold.ports[0], "token": "c"},
                        {"task": "ps:1", "address": "127.0.0.1", "port": closed_port, "token": "b"},
                        {"task": "ps:2", "address": "no-such-host.invalid", "port": 1, "token": "b"}])
    errors = {f["task"]: f["error"] for f in failed}
    assert errors["ps:0"] == "answered by host b's port instead"
    assert errors["ps:1"] == "refused"
    assert errors["ps:2"].startswith("cannot resolve no-such-host.invalid")


def test_a_listener_that_never_accepts_in_time_times_out() -> None:
    # a listening socket whose backlog is full: the kernel drops further SYNs, as a firewall would
    with socket.socket() as full:
        full.bind(("127.0.0.1", 0))
        full.listen(0)
        port = full.getsockname()[1]
        fillers = [socket.create_connection(("127.0.0.1", port), timeout=1) for _ in range(1)]
        try:
            failed = probe([{"task": "w:0", "address": "127.0.0.1", "port": port, "token": "b"}], timeout=0.5)
        finally:
            for sock in fillers:
                sock.close()
    assert [f["error"] for f in failed] == ["timed out"]


def test_a_port_that_is_taken_is_reported_not_held() -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen(1)
        port = taken.getsockname()[1]
        held = PortHold("127.0.0.1", [port], "a")
        try:
            assert held.ports == [] and port in held.failed
        finally:
            held.close()


def test_the_verb_holds_its_ports_answers_reach_lines_then_frees_them_on_the_next_line(tmp_path: str) -> None:
    """`preflight --listen`: phase 1 is the answer line, phase 2 a `#reach` exchange on stdin; the ports
    stay held until the launcher's next line, then are free (the tasks bind them next)."""
    proc = subprocess.Popen([sys.executable, "-m", "launcher.agent", "preflight", "--bind", "127.0.0.1",
                             "--pick", "2", "--listen", "a"], cwd=REPO, env={**os.environ, "PYTHONPATH": REPO},
                            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    assert proc.stdin is not None and proc.stdout is not None
    try:
        answer = json.loads(proc.stdout.readline())
        ports = answer["ports"]["picked"]
        assert sorted(answer["listening"]) == sorted(ports) and answer["listen_failed"] == {}
        mine = [{"task": "ps:0", "address": "127.0.0.1", "port": p, "token": "a"} for p in ports]
        assert probe(mine) == []  # held while the launcher decides
        with socket.socket() as closed:
            closed.bind(("127.0.0.1", 0))
            other = {"task": "worker:0", "address": "127.0.0.1", "port": closed.getsockname()[1], "token": "b"}
            proc.stdin.write((PREFIX + json.dumps({"targets": [*mine, other]}) + "\n").encode())
            proc.stdin.flush()
            line = proc.stdout.readline().decode()
        assert line.startswith(PREFIX)
        assert [f["task"] for f in json.loads(line[len(PREFIX):])["failed"]] == ["worker:0"]
        assert probe(mine) == []  # still held after its own probe: other hosts may still be probing
        proc.stdin.close()  # the next "line": EOF; the verb lets the ports go and ends
        assert proc.wait(timeout=10) == 0
        for port in ports:
            with socket.socket() as again:
                again.bind(("127.0.0.1", port))
                again.listen(1)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


def test_channel_ask_gets_the_answer_line_and_none_when_the_command_ends() -> None:
    channel = AgentChannel()
    channel.feed("{}")
    sent = threading.Event()
    channel.send = lambda data, timeout=None: sent.set() or True  # type: ignore[method-assign]

    def answer_later() -> None:
        assert sent.wait(5.0)
        channel.feed(PREFIX + '{"failed": []}')

    threading.Thread(target=answer_later).start()
    assert channel.ask(PREFIX + "{}", PREFIX, 5.0) == PREFIX + '{"failed": []}'
    held: list[str] = []
    channel.attach(held.append, lambda _c: None)
    assert held == []  # the answer went to ask, not to the stream
    ended = AgentChannel()
    ended.feed("{}")
    ended.send = lambda data, timeout=None: True  # type: ignore[method-assign]
    threading.Timer(0.05, lambda: ended.ended(1)).start()
    assert ended.ask("x", PREFIX, 5.0) is None


def test_a_port_held_on_every_ipv4_address_answers_on_ipv6_too() -> None:
    """TensorFlow listens on both families: a tf_address that is an IPv6 address must be reached."""
    if not socket.has_ipv6:
        pytest.skip("no IPv6 here")
    held = PortHold("0.0.0.0", [0], "a")
    try:
        targets = [{"task": "ps:0", "address": address, "port": held.ports[0], "token": "a"}
                   for address in ("127.0.0.1", "::1")]
        assert probe(targets) == []
    finally:
        held.close()
