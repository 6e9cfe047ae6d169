"""The control socket's lines (launcher/protocol/controllines.py): every message's bytes as
distlaunch wrote them before the module existed (a supervisor of a run the previous version started
must still understand and be understood), every message's round trip, and what malformed lines
decode to. Both protocol modules on Python 3.9 with the stdlib alone, and what importing them loads."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from launcher.protocol import controllines as lines
from launcher.protocol.controllines import (
    Answer,
    Dropped,
    End,
    Hello,
    Launched,
    Live,
    Request,
    decode_answer,
    decode_follow,
    decode_request,
    job_exit_code,
)
from launcher.protocol.message import Malformed, Message

EVENT = '{"v":1,"ts":1.5,"run":"r","task":"worker:0","kind":"log","stream":"stdout","line":"x","seq":3}'

#: each message and its bytes, as controlsock.py, remotejob.py and core.py wrote them as literals before
WIRE: list[tuple[Message, bytes]] = [
    (Hello("r-1", 4242, False), b'#hello {"run_id": "r-1", "supervisor_pid": 4242, "launched": false}\n'),
    (Live(), b"#live\n"),
    (Launched(), b"#launched\n"),
    (End("Failed", 143), b'#end {"outcome": "Failed", "exit_code": 143}\n'),
    (End(None, 1), b'#end {"outcome": null, "exit_code": 1}\n'),
    (Dropped("this client fell behind; follow it again"), b"#dropped this client fell behind; follow it again\n"),
    (Request("restart", task="worker:1"), b'{"action": "restart", "task": "worker:1", "reason": null}\n'),
    (Request("teardown", reason="stopped by `distlaunch down`"),
     b'{"action": "teardown", "task": null, "reason": "stopped by `distlaunch down`"}\n'),
    (Request("teardown", reason="stopped by SIGTERM", origin="SIGTERM"),
     b'{"action": "teardown", "task": null, "reason": "stopped by SIGTERM", "origin": "SIGTERM"}\n'),
    (Request("stacks", tasks=("worker:0",), native=True, timeout_s=5.0),
     b'{"action": "stacks", "task": null, "reason": null, "tasks": ["worker:0"], "native": true, "timeout_s": 5.0}\n'),
    (Request("follow", history=False), b'{"action": "follow", "history": false}\n'),
    (Answer(True), b'{"ok": true}\n'),
    (Answer(False, "refused: uid 65534 does not own this run"),
     b'{"ok": false, "error": "refused: uid 65534 does not own this run"}\n'),
    (Answer(True, note="the supervisor goes on without clients"),
     b'{"ok": true, "note": "the supervisor goes on without clients"}\n'),
    (Answer(True, stacks=[{"task": "worker:0"}], path="/r/stacks/1.json"),
     b'{"ok": true, "stacks": [{"task": "worker:0"}], "path": "/r/stacks/1.json"}\n'),
]


def _decode(message: Message, line: bytes) -> object:
    """``line`` read back by the side that receives ``message``."""
    text = line.decode()
    if isinstance(message, Request):
        return decode_request(line.rstrip(b"\n"))
    if isinstance(message, Answer):
        return decode_answer(line)
    return decode_follow(text)


@pytest.mark.parametrize(("message", "wire"), WIRE, ids=[f"{i}-{type(m).__name__}" for i, (m, _) in enumerate(WIRE)])
def test_each_message_has_the_bytes_of_before_and_reads_back_as_itself(message: Message, wire: bytes) -> None:
    assert message.encode() == wire
    assert message.line() + "\n" == wire.decode()
    assert _decode(message, wire) == message


def test_every_message_class_is_pinned_above() -> None:
    pinned = {type(message) for message, _ in WIRE}
    every = {cls for cls in vars(lines).values()
             if isinstance(cls, type) and issubclass(cls, Message) and cls is not Message}
    assert every == pinned


def test_an_event_line_comes_back_as_it_came() -> None:
    assert decode_follow(EVENT) == EVENT
    assert decode_follow(EVENT + "\n") == EVENT + "\n"  # a reader's line, newline and all: Event.from_json takes it


@pytest.mark.parametrize(("line", "meant"), [
    ('#hello {"run_id": "r"', Hello),  # cut short
    ("#hello [1, 2]", Hello),
    ("#hello", Hello),
    ("#helloworld {}", None),
    ("#future {}", None),  # a marker of a newer supervisor: skipped, never fatal
    ("#", None),
])
def test_malformed_follow_lines(line: str, meant: type | None) -> None:
    decoded = decode_follow(line)
    assert isinstance(decoded, Malformed)
    assert decoded.meant is meant and decoded.line == line and decoded.why


def test_follow_lines_with_bodies_of_the_wrong_kind_read_leniently() -> None:
    # an end whose body does not parse still ends the stream; its fields read as not said
    assert decode_follow("#end") == End(None, None)
    assert decode_follow("#end {not json") == End(None, None)
    assert decode_follow('#end {"outcome": 3, "exit_code": "1"}') == End(None, None)
    assert decode_follow('#end {"outcome": "Succeeded", "exit_code": true}') == End("Succeeded", None)
    assert decode_follow('#hello {"run_id": 5, "supervisor_pid": "12", "launched": 1}') == Hello("", None, True)
    assert decode_follow("#dropped") == Dropped("")
    assert decode_follow("#live now\n") == Live()


def test_requests_and_answers_with_fields_of_the_wrong_type_read_them_as_absent() -> None:
    assert isinstance(decode_request(b"[1]"), Malformed)
    assert isinstance(decode_request(b"{"), Malformed)
    assert isinstance(decode_request(b""), Malformed)
    assert decode_request(b'{"action": 1, "task": 2, "reason": [], "origin": 3}') == Request("")
    assert decode_request(b'{"action": "stacks", "tasks": "worker:0", "native": 1, "timeout_s": true}') == \
        Request("stacks", native=True)
    assert decode_request(b'{"action": "stacks", "tasks": [1], "timeout_s": 3}') == \
        Request("stacks", tasks=("1",), timeout_s=3.0)
    assert decode_request(b'{"action": "follow", "history": null}') == Request("follow")  # only false leaves it out
    assert decode_request(b'{"action": "follow", "history": false}') == Request("follow", history=False)
    assert isinstance(decode_answer(b""), Malformed)  # a supervisor that hung up
    assert isinstance(decode_answer(b"ok\n"), Malformed)
    assert decode_answer(b'{"ok": 1, "error": 5, "stacks": {}, "path": 3}') == Answer(False, "5")
    assert decode_answer(b'{"ok": true, "stacks": [1, {"task": "a"}]}') == Answer(True, stacks=[{"task": "a"}])


@pytest.mark.parametrize(("outcome", "stopped", "code"), [
    ("Succeeded", None, 0),
    ("Succeeded", 143, 0),  # a job that succeeded succeeded, whatever came after
    ("Failed", None, 1),
    ("Failed", 130, 130),
    ("Failed", 143, 143),
    ("Stopped", None, 143),  # stopped on purpose with no signal of this client's (down, the dashboard)
    ("Stopped", 130, 130),  # by this client's Ctrl-C
    (None, None, 1),  # no outcome: the supervisor ended before the job did
    (None, 130, 130),
])
def test_the_exit_code_rule(outcome: str | None, stopped: int | None, code: int) -> None:
    assert job_exit_code(outcome, stopped) == code


def test_the_socket_address(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("XDG_RUNTIME_DIR", raising=False)
    home = str(tmp_path)
    assert lines.socket_path("r-1.a_b", home) == os.path.join(home, "control", "r-1.a_b.sock")
    for odd in ("-r", ".r", "r/x", "r" * 65, ""):  # not a plain file name: a hash of it
        name = os.path.basename(lines.socket_path(odd, home))
        assert len(name) == 32 + len(".sock") and name != lines.socket_name("r")
    assert lines.socket_name("r" * 65) != lines.socket_name("r" * 66)
    deep = str(tmp_path / ("d" * 120))  # too long for a socket path: the runtime dir, else the temp dir
    monkeypatch.setenv("XDG_RUNTIME_DIR", str(tmp_path / "run"))
    assert lines.socket_path("r", deep) == str(tmp_path / "run" / "distlaunch" / "r.sock")
    monkeypatch.setenv("XDG_RUNTIME_DIR", "relative/run")  # not absolute: never used
    assert lines.control_dirs(home) == [os.path.join(home, "control"), lines.control_dirs(home)[-1]]
    assert os.path.basename(lines.socket_path("r", deep)) == "r.sock"
    assert os.path.dirname(lines.socket_path("r", deep)).endswith(f"distlaunch-{os.getuid()}")


PY39 = os.path.expanduser("~/.pyenv/versions/3.9.18/bin/python3.9")
#: what importing the protocol package's modules loads of distlaunch
LOADED = ["launcher", "launcher.events", "launcher.protocol", "launcher.protocol.agentlines",
          "launcher.protocol.controllines", "launcher.protocol.message", "launcher.protocol.metricnames"]

ON_OLD_PYTHON = """
import sys
sys.path.insert(0, sys.argv[1])
import launcher.events
from launcher.protocol import agentlines as A, controllines as C, metricnames
assert set(m for m in sys.modules if m.startswith("launcher")) == set(LOADED)
for message, decode in [(C.Hello("r", 1, True), C.decode_follow), (C.End("Failed", 130), C.decode_follow),
                        (A.Heartbeat(2.5), A.decode_agent), (A.Note("w:0", "c", True), A.decode_agent),
                        (A.AgentAnswer({"pids": {}}, 3), A.decode_agent)]:
    assert decode(message.line()) == message, message
start = A.AgentRequest(A.StartRequest(("w-0",), {}, {"w-0": {"run": "r"}}), 1)
assert A.decode_agent_input(start.encode()[:-1]) == start
assert A.decode_request(A.StopRequest(("w-0",), 2.0, True).encode()) == A.StopRequest(("w-0",), 2.0, True)
assert C.decode_request(C.Request("stacks", tasks=("a",)).encode()) == C.Request("stacks", tasks=("a",))
assert isinstance(A.decode_agent("#re {"), A.Malformed)
print("ok")
"""


@pytest.mark.skipif(not os.path.exists(PY39), reason="no Python 3.9 interpreter here")
def test_the_protocol_runs_on_python_3_9_with_the_stdlib_alone() -> None:
    root = str(Path(lines.__file__).resolve().parents[2])
    code = ON_OLD_PYTHON.replace("set(LOADED)", repr(set(LOADED)))
    done = subprocess.run([PY39, "-I", "-c", code, root], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert done.stdout == "ok\n"


def test_importing_the_protocol_loads_no_launcher_side_module() -> None:
    code = ("import sys; import launcher.protocol.agentlines, launcher.protocol.controllines, "
            "launcher.protocol.metricnames; print(sorted(m for m in sys.modules if m.startswith(('launcher', 'tui'))))")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60,
                          cwd=Path(lines.__file__).resolve().parents[2])
    assert done.stdout.strip() == str(LOADED)
