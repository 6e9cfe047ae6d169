"""The agent stream's lines and the requests to a host agent (launcher/protocol/agentlines.py):
every message's bytes as distlaunch wrote them before the module existed (agents of a run the
previous version started must still understand and be understood), every message's round trip,
and what malformed lines and requests decode to."""

from __future__ import annotations

import pytest

from launcher.protocol import agentlines
from launcher.protocol.agentlines import (
    AgentAnswer,
    AgentRequest,
    FollowRequest,
    Heartbeat,
    Note,
    Ping,
    Preempted,
    ReachAnswer,
    ReachRequest,
    StacksRequest,
    StartRequest,
    StatusRequest,
    StopRequest,
    Unwritten,
    decode_agent,
    decode_agent_input,
    decode_request,
)
from launcher.protocol.message import Malformed, Message

EVENT = '{"v":1,"ts":1.5,"run":"r","task":"worker:0","kind":"log","stream":"stdout","line":"x","seq":3}'
REQUESTS = (FollowRequest, StartRequest, StopRequest, StacksRequest, StatusRequest)

#: each message and its bytes, as links.py, restarts.py, teardown.py, stackcapture.py, agent/clients.py,
#: agent/stream.py, agent/output.py and agent/reach.py wrote them as literals before
WIRE: list[tuple[Message, bytes]] = [
    (Ping(), b"\n"),
    (AgentRequest(StartRequest(("worker-0",), {}, {"worker-0": {"run": "r", "task": "worker:0"}}), 7),
     b'{"op":"start","specs":{"worker-0":{"run":"r","task":"worker:0"}},"tasks":["worker-0"],"secrets":{},"id":7}\n'),
    (AgentRequest(StopRequest(("worker-0", "ps-0"), 10, exit=True), 8),
     b'{"op":"stop","tasks":["worker-0","ps-0"],"grace":10,"exit":true,"id":8}\n'),
    (AgentRequest(StacksRequest(("worker:0",), True, 7.0), 9),
     b'{"op":"stacks","tasks":["worker:0"],"native":true,"timeout":7.0,"id":9}\n'),
    (FollowRequest({"worker-0": 120}, True), b'{"op": "follow", "offsets": {"worker-0": 120}, "pinged": true}\n'),
    (StartRequest(("worker-0",), {"worker-0": {"TOKEN": "s"}}),
     b'{"op": "start", "tasks": ["worker-0"], "secrets": {"worker-0": {"TOKEN": "s"}}}\n'),
    (StopRequest(("worker-0",), None, False), b'{"op": "stop", "tasks": ["worker-0"], "grace": null, "exit": false}\n'),
    (StacksRequest(), b'{"op": "stacks", "tasks": [], "native": false, "timeout": null}\n'),
    (StatusRequest(), b'{"op": "status"}\n'),
    (AgentAnswer({"pids": {"worker-0": 12}}, 7), b'#re {"pids": {"worker-0": 12}, "id": 7}\n'),
    (AgentAnswer({"error": "JSONDecodeError: ..."}, None), b'#re {"error": "JSONDecodeError: ...", "id": null}\n'),
    (Heartbeat(1700000000.25), b"#hb 1700000000.250\n"),
    (Note("worker:0", "events_unwritten", True, "disk full"),
     b'#note {"task": "worker:0", "condition": "events_unwritten", "active": true, "reason": "disk full"}\n'),
    (Unwritten(EVENT), b"#unwritten " + EVENT.encode() + b"\n"),
    (Preempted("preemption notice (curl -sf meta/preempted): TRUE"),
     b"#preempt preemption notice (curl -sf meta/preempted): TRUE\n"),
    (ReachRequest([{"task": "ps:0", "address": "10.0.0.2", "port": 2222}]),
     b'#reach {"targets": [{"task": "ps:0", "address": "10.0.0.2", "port": 2222}]}\n'),
    (ReachAnswer([{"task": "ps:0", "error": "refused"}]),
     b'#reach {"failed": [{"task": "ps:0", "error": "refused"}]}\n'),
    (ReachAnswer(error="bad reach request: x"), b'#reach {"error": "bad reach request: x"}\n'),
]


def _decode(message: Message, line: bytes) -> object:
    """``line`` read back by the side that receives ``message``."""
    if isinstance(message, REQUESTS):
        return decode_request(line.rstrip(b"\n"))
    if isinstance(message, (Ping, AgentRequest, ReachRequest)):
        return decode_agent_input(line.rstrip(b"\n"))
    return decode_agent(line.decode().rstrip("\n"))


@pytest.mark.parametrize(("message", "wire"), WIRE, ids=[f"{i}-{type(m).__name__}" for i, (m, _) in enumerate(WIRE)])
def test_each_message_has_the_bytes_of_before_and_reads_back_as_itself(message: Message, wire: bytes) -> None:
    assert message.encode() == wire
    assert message.line() + "\n" == wire.decode()
    assert _decode(message, wire) == message


def test_every_message_class_is_pinned_above() -> None:
    pinned = {type(message) for message, _ in WIRE} | {type(m.request) for m, _ in WIRE if isinstance(m, AgentRequest)}
    every = {cls for name, cls in vars(agentlines).items()
             if isinstance(cls, type) and issubclass(cls, Message) and cls is not Message and not name.startswith("_")}
    assert every == pinned


def test_an_event_line_comes_back_as_it_came() -> None:
    assert decode_agent(EVENT) == EVENT


@pytest.mark.parametrize(("line", "meant"), [
    ("#hb", Heartbeat),
    ("#hb soon", Heartbeat),
    ("#re", AgentAnswer),
    ("#re {broken", AgentAnswer),
    ('#re ["not", "an", "object"]', AgentAnswer),
    ("#note {}", Note),
    ('#note {"task": "worker:0"}', Note),
    ("#note nonsense", Note),
    ("#reach {", ReachAnswer),
    ("#hbx 1.0", None),
    ("#unknown", None),
    ("", None),
])
def test_malformed_agent_lines(line: str, meant: type | None) -> None:
    decoded = decode_agent(line)
    assert isinstance(decoded, Malformed)
    assert decoded.meant is meant and decoded.line == line and decoded.why


def test_agent_lines_read_as_the_launcher_read_them() -> None:
    assert decode_agent('#re {"id": "7", "ok": 1}') == AgentAnswer({"ok": 1}, None)  # an id it never sent
    assert decode_agent('#note {"task": 3, "condition": "c", "reason": null}') == Note("3", "c", False, "")
    assert decode_agent('#reach {"failed": "x"}') == ReachAnswer([], "")
    assert decode_agent("#unwritten") == Unwritten("")  # no event in it: the event decoder says so


@pytest.mark.parametrize(("line", "meant"), [
    (b"{", AgentRequest),
    (b'{"op": "start"', AgentRequest),
    (b"[1]", None),
    (b"#reach", ReachRequest),
    (b"#reach {broken", ReachRequest),
    (b'#reach {"targets": {"a": 1}}', ReachRequest),
    (b"ping", None),
    (b"#re {}", None),
])
def test_malformed_agent_input(line: bytes, meant: type | None) -> None:
    decoded = decode_agent_input(line)
    assert isinstance(decoded, Malformed)
    assert decoded.meant is meant and decoded.why


def test_a_request_that_does_not_parse_says_why_as_the_agent_answered_before() -> None:
    decoded = decode_agent_input(b'{"op": "start",}')
    assert isinstance(decoded, Malformed)
    assert decoded.why.startswith("JSONDecodeError: ")
    assert decode_agent_input(b'{"op": "stop", "id": "x"}') == AgentRequest(StopRequest(()), None)
    assert decode_agent_input(b"#reach {}") == ReachRequest([])


def test_an_unknown_request_is_answered_under_its_id() -> None:
    """A newer launcher's op: the agent answers why, and the launcher's wait for that id ends."""
    line = b'{"op": "resize", "id": 4}'
    decoded = decode_agent_input(line)
    assert isinstance(decoded, AgentRequest) and decoded.id == 4
    assert decoded.request == Malformed(line.decode(), "unknown request 'resize'", AgentRequest)
    assert decoded.encode() == line + b"\n"  # the line as it came
    assert decode_request(b"{}") == Malformed("{}", "unknown request None", AgentRequest)  # as the agent said before


def test_request_fields_of_the_wrong_type_read_as_absent() -> None:
    assert decode_request(b'{"op": "stop", "tasks": "worker-0", "grace": "5", "exit": 1}') == \
        StopRequest((), None, True)
    assert decode_request(b'{"op": "stacks", "tasks": [1], "native": 0, "timeout": true}') == StacksRequest(("1",))
    assert decode_request(b'{"op": "follow", "offsets": {"worker-0": "9", "ps-0": 3}}') == FollowRequest({"ps-0": 3})
    assert decode_request(b'{"op": "start", "tasks": ["a"], "secrets": {"a": {"K": 1}, "b": 2}, "specs": []}') == \
        StartRequest(("a",), {"a": {"K": "1"}, "b": {}})


def test_a_start_without_tasks_starts_its_specs_in_their_order() -> None:
    specs = {"ps-0": {"run": "r"}, "worker-0": {"run": "r"}}
    assert decode_agent_input(AgentRequest(StartRequest((), {}, specs), 1).encode()[:-1]) == \
        AgentRequest(StartRequest(("ps-0", "worker-0"), {}, specs), 1)


def test_the_start_verbs_stdin_may_leave_out_the_op() -> None:
    """What the launcher of the version before wrote on the `start` verb's stdin."""
    assert decode_request(b'{"specs": {"worker-0": {"run": "r"}}, "tasks": ["worker-0"], "secrets": {}}',
                          op=StartRequest.OP) == StartRequest(("worker-0",), {}, {"worker-0": {"run": "r"}})
    assert decode_request(b"{}", op=StartRequest.OP) == StartRequest(())
