"""squeue's lines as the job's state, reason, expected start and batch node; the words shown."""

from __future__ import annotations

import os
import time
from pathlib import Path

import pytest

from launcher.errors import UserError
from launcher.transport import slurmqueue
from launcher.transport.slurmqueue import cancel, cluster_of, parse_squeue_line, query, submit


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


def _fake(bin_dir: Path, name: str, body: str) -> None:
    path = bin_dir / name
    path.write_text("#!/bin/sh\n" + body)
    path.chmod(0o755)


def test_the_cluster_sbatch_args_name_is_found_in_each_spelling() -> None:
    assert cluster_of(["--partition=gpu", "-M", "alpha"]) == "alpha"
    assert cluster_of(["--clusters=beta"]) == "beta" and cluster_of(["-Mgamma"]) == "gamma"
    assert cluster_of(["--cluster", "delta"]) == "delta" and cluster_of(["--mem=4G"]) is None


def test_squeue_and_scancel_are_told_the_cluster_and_its_header_is_no_job(tmp_path: Path,
                                                                           monkeypatch: pytest.MonkeyPatch) -> None:
    calls = tmp_path / "calls"
    _fake(tmp_path, "squeue", f'echo "$*" >> {calls}\necho "CLUSTER: alpha"\necho "RUNNING|None|N/A|node3"\n')
    _fake(tmp_path, "scancel", f'echo "scancel $*" >> {calls}\n')
    monkeypatch.setenv("PATH", f"{tmp_path}:{os.environ['PATH']}")
    info = query("41", cluster="alpha")
    assert info is not None and (info.state, info.node) == ("RUNNING", "node3")
    assert cancel("41", cluster="alpha") is None
    assert calls.read_text().splitlines() == ["-M alpha -h -j 41 --states=all -o %T|%r|%S|%B|%e|%i",
                                             "scancel -M alpha 41"]


def test_a_job_queued_by_an_sbatch_that_never_answered_is_found_by_its_run(tmp_path: Path,
                                                                            monkeypatch: pytest.MonkeyPatch) -> None:
    """sbatch timed out after slurmctld queued the job: `up` finds it by the run's comment and goes
    on with it, rather than saying nothing was submitted while a job waits in the queue."""
    _fake(tmp_path, "sbatch", "sleep 30\n")
    _fake(tmp_path, "squeue", 'echo "77|distlaunch-run:other"\necho "78|distlaunch-run:r1"\necho "79|"\n')
    monkeypatch.setenv("PATH", f"{tmp_path}:{os.environ['PATH']}")
    monkeypatch.setattr(slurmqueue, "SUBMIT_TIMEOUT_S", 0.5)
    script = tmp_path / "job.sbatch"
    script.write_text("#!/bin/sh\n")
    assert submit(script, tmp_path, "p.toml", run_id="r1") == ("78", None)
    with pytest.raises(UserError, match=r"sbatch did not answer within 0 s .* squeue shows no job of this run"):
        submit(script, tmp_path, "p.toml", run_id="r2")
    _fake(tmp_path, "squeue", "exit 1\n")  # slurmctld busy: squeue fails too
    with pytest.raises(UserError, match=r"squeue did not answer either: the job may be queued .*distlaunch-run:r1"):
        submit(script, tmp_path, "p.toml", run_id="r1")


def test_the_cluster_sbatch_names_in_its_answer_is_kept(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """`-M a,b`: sbatch answers `id;cluster`, and the job's number means something only there."""
    _fake(tmp_path, "sbatch", 'echo "91;beta"\n')
    monkeypatch.setenv("PATH", f"{tmp_path}:{os.environ['PATH']}")
    script = tmp_path / "job.sbatch"
    script.write_text("#!/bin/sh\n")
    assert submit(script, tmp_path, "p.toml", run_id="r1", cluster="alpha,beta") == ("91", "beta")
