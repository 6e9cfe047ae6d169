from __future__ import annotations

import json
import os
import secrets

import pytest

from launcher.supervise import controlsock

NOBODY = 65534


class RecordingControl:
    def __init__(self) -> None:
        self.calls: list[tuple[str, str | None]] = []

    def restart_task(self, task_id: str) -> None:
        self.calls.append(("restart", task_id))

    def stop_task(self, task_id: str) -> None:
        self.calls.append(("stop", task_id))

    def teardown(self, reason: str = "") -> None:
        self.calls.append(("teardown", reason))

    def detach(self) -> None:
        self.calls.append(("detach", None))


def test_requests_reach_the_launcher_and_unknown_ones_are_refused() -> None:
    run_id = f"t-{secrets.token_hex(4)}"
    control = RecordingControl()
    server = controlsock.ControlServer(run_id, control)  # type: ignore[arg-type]
    try:
        assert controlsock.send(run_id, "restart", "worker:1") == {"ok": True}
        assert controlsock.send(run_id, "teardown", reason="stopped by `distlaunch down`") == {"ok": True}
        answer = controlsock.send(run_id, "explode")
        assert answer is not None and answer["ok"] is False
    finally:
        server.close()
    assert control.calls == [("restart", "worker:1"), ("teardown", "stopped by `distlaunch down`")]
    assert controlsock.send(run_id, "restart", "worker:1") is None  # nobody listens any more


def _send_as(uid: int, run_id: str, action: str) -> dict[str, object] | None:
    """Connect from a forked child that became ``uid``: a real peer of another user."""
    read_end, write_end = os.pipe()
    pid = os.fork()
    if pid == 0:  # child: only syscalls and the client, then leave without cleanup handlers
        try:
            os.close(read_end)
            os.setgid(uid)
            os.setuid(uid)
            answer = controlsock.send(run_id, action, reason="not yours")
            os.write(write_end, json.dumps(answer).encode())
        finally:
            os._exit(0)
    os.close(write_end)
    with os.fdopen(read_end, "rb") as fh:
        data = fh.read()
    os.waitpid(pid, 0)
    answer: dict[str, object] | None = json.loads(data)
    return answer


@pytest.mark.skipif(os.geteuid() != 0, reason="needs root to connect as another user")
def test_a_connection_from_another_user_is_refused_and_changes_nothing() -> None:
    run_id = f"t-{secrets.token_hex(4)}"
    control = RecordingControl()
    server = controlsock.ControlServer(run_id, control)  # type: ignore[arg-type]
    try:
        answer = _send_as(NOBODY, run_id, "teardown")
        assert answer is not None and answer["ok"] is False and f"uid {NOBODY}" in str(answer["error"])
        assert controlsock.send(run_id, "restart", "worker:0") == {"ok": True}  # the owner still gets in
    finally:
        server.close()
    assert control.calls == [("restart", "worker:0")]
