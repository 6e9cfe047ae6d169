from __future__ import annotations

import secrets

from launcher import controlsock


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
