"""squeue's lines as the job's state, reason, expected start and batch node; the words shown."""

from __future__ import annotations

import time

from launcher.transport.slurmqueue import parse_squeue_line


def test_a_pending_job_has_its_reason_and_expected_start() -> None:
    info = parse_squeue_line("12", "PENDING|Resources|2031-05-01T14:02:11|n/a")
    assert (info.state, info.reason, info.node, info.waiting, info.ended) == ("PENDING", "Resources", None, True, False)
    assert info.start_time == time.mktime((2031, 5, 1, 14, 2, 11, 0, 0, -1))
    assert info.text().startswith("PENDING (Resources), expected start 2031-05-01 14:02:11")


def test_a_running_job_names_its_batch_node_and_no_reason() -> None:
    info = parse_squeue_line("12", "RUNNING|None|2031-05-01T14:02:11|node7")
    assert (info.reason, info.node, info.waiting, info.ended) == ("", "node7", False, False)
    assert info.text() == "RUNNING on node7"


def test_an_unknown_start_and_an_ended_job() -> None:
    info = parse_squeue_line("12", "CANCELLED|None|N/A|(null)")
    assert info.start_time is None and info.node is None and info.ended
    assert parse_squeue_line("12", "").text() == "no longer known to Slurm"
