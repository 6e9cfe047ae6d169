"""Files of a run read back while it runs are opened as private regular files (issue 59, item 8):
a FIFO or a non-UTF-8 ``resolved.json`` during a drain once left the move "Restarting: ... moving"
for ever (the read blocked, or its error ended the supervisor's step); now each is one line, the
record left as it is, and the move goes on."""

from __future__ import annotations

import json
import os
import threading
from pathlib import Path
from types import SimpleNamespace

import pytest

from launcher.errors import UserError
from launcher.runrecord import RESOLVED_FILE, record_placement
from launcher.supervise.hostloss import HostLoss

PLACEMENT = {"worker:0": {"host": "b", "address": "10.0.0.2", "port": 2222}}
MOVES = [{"task": "worker:0", "from": "a", "to": "b", "why": "drained"}]


def _within(seconds: float, call: object) -> list[object]:
    """``call()``'s outcome (its value or exception) from a thread that must end within ``seconds``."""
    outcome: list[object] = []

    def run() -> None:
        try:
            outcome.append(call())  # type: ignore[operator]
        except Exception as exc:
            outcome.append(exc)

    worker = threading.Thread(target=run, daemon=True)
    worker.start()
    worker.join(seconds)
    assert not worker.is_alive(), "blocked reading the run's record"
    return outcome


@pytest.mark.parametrize("kind", ["fifo", "not-utf8", "not-an-object", "a-link"])
def test_a_record_that_is_not_distlaunchs_is_one_line_and_left_as_it_is(kind: str, tmp_path: Path) -> None:
    path = tmp_path / RESOLVED_FILE
    if kind == "fifo":
        os.mkfifo(path, 0o600)
    elif kind == "not-utf8":
        path.write_bytes(b'{"a": "\xff\xfe"}\n')
    elif kind == "not-an-object":
        path.write_text("[1, 2]\n")
    else:
        (tmp_path / "elsewhere.json").write_text("{}\n")
        path.symlink_to(tmp_path / "elsewhere.json")
    path.parent.chmod(0o700)
    outcome = _within(10, lambda: record_placement(tmp_path, PLACEMENT, MOVES))
    assert len(outcome) == 1 and isinstance(outcome[0], UserError), outcome
    message = str(outcome[0])
    assert str(path) in message and "\n" not in message
    if kind == "a-link":
        assert (tmp_path / "elsewhere.json").read_text() == "{}\n"


def test_a_whole_record_gets_the_placement_and_moves(tmp_path: Path) -> None:
    (tmp_path / RESOLVED_FILE).write_text(json.dumps({"profile": {"name": "x"}}))
    (tmp_path / (RESOLVED_FILE + ".tmp")).symlink_to(tmp_path / "victim")
    record_placement(tmp_path, PLACEMENT, MOVES)
    record = json.loads((tmp_path / RESOLVED_FILE).read_text())
    assert record["placement"] == PLACEMENT and record["moves"] == MOVES and record["profile"] == {"name": "x"}
    assert not (tmp_path / "victim").exists()


def test_the_supervisor_says_it_in_one_line_and_the_move_goes_on(tmp_path: Path) -> None:
    os.mkfifo(tmp_path / RESOLVED_FILE, 0o600)
    notices: list[str] = []
    loss = object.__new__(HostLoss)  # only what record_placement reads of it
    loss.sup = SimpleNamespace(tasks={}, rundir=SimpleNamespace(path=tmp_path), notice=notices.append)  # type: ignore[assignment]
    loss.moves = list(MOVES)
    assert _within(10, loss.record_placement) == [None]
    assert len(notices) == 1 and "could not update the run record" in notices[0] and "not a regular file" in notices[0]
