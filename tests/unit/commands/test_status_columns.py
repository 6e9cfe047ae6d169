# ruff: noqa: E501  (the pinned lines are as long as the rows they pin)
"""`distlaunch status`'s task table, pinned byte for byte: its columns come from the same declaration
as the dashboard's (launcher/telemetry/columns.py), and moving them there changed no line."""

from __future__ import annotations

from pathlib import Path

import pytest

from launcher.cli import main
from launcher.commands import status
from launcher.rundir import RunDir
from tests.unit.telemetry.column_fixture import NOW, RUN, columns_events

TASKS = ("chief:0", "worker:0", "worker:1", "worker:2", "worker:3", "ps:0", "ps:1", "evaluator:0", "ps:2")

EXPECTED = """\
run r-columns  (demo, parameter_server, lost: no supervisor)
job Created
(lost: task states as last seen by its supervisor; `distlaunch attach r-columns` within the orphan grace takes the job over, `distlaunch down` cleans up)
TASK         HOST  ADDRESS         STATE    PID  RESTARTS  STEP        LOSS    CHECKPOINT                AT RISK  STEP TIME
chief:0      h     localhost:2222  running  100  0         300         0.4500  260 12s ago b:/data/ckpt  40       input 70% compute 20% peers 0% other 10% (input-bound)
evaluator:0  -     localhost:2229  pending  -    0         -           -       -                         -        -
ps:0         h     localhost:2227  running  105  0         -           -       -                         -        -
ps:1         h     localhost:2228  running  106  0         -           -       -                         -        12.5 closures/s, 40 ms each
ps:2         h     localhost:2230  lost     -    1         -           -       -                         -        -
worker:0     h     localhost:2223  running  101  0         50 (calls)  -       none yet                  50       -
worker:1     h     localhost:2224  running  102  0         7           nan     none yet                  7        -
worker:2     h     localhost:2225  failed   -    2         -           -       -                         -        -
worker:3     h     localhost:2226  running  104  0         55          1.2500  none yet                  55       - (no step timed in 2 train calls (a function's first call traces it, the second its timed twin))
ps:2 lost on h: host c lost
worker:1 stalled: no step for 300 s
"""


def test_the_status_table_reads_as_before(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                          monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(status, "wall_clock", lambda: NOW)  # a checkpoint's age
    rd = RunDir.create(RUN, tmp_path / RUN)
    tasks = {task: {"host": None if task == "evaluator:0" else "h", "address": "localhost", "port": 2222 + i,
                    "pid": None, "state": "pending"} for i, task in enumerate(TASKS)}
    rd.write_state({"run_id": RUN, "name": "demo", "strategy": "parameter_server", "supervisor_pid": None,
                    "tasks": tasks})
    for event in columns_events():
        rd.append(event)
    rd.close()
    assert main(["status", str(rd.path)]) == 0
    assert capsys.readouterr().out == EXPECTED
