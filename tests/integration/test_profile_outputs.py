"""Issue 49, item 5: `distlaunch profile` never follows a link under ``{outputs}``. With the outputs
in a folder others can write, another user (uid 65534) plants ``profile/<run id>`` as a link to a
folder of theirs: the capture folder appeared there. Now such outputs are refused in one line
(exit 2) and nothing is made where the link points; a link at ``profile/<run id>`` under outputs
of the user's own is refused too."""

from __future__ import annotations

import os
from pathlib import Path

from tests.badports import bad_port
from tests.integration.jobtools import cli
from tests.integration.otheruser import as_other, require_other_user, shared_tmp
from tests.integration.profilerun import fake_run


def refusal(result_stderr: str) -> str:
    assert "internal error" not in result_stderr and "Traceback" not in result_stderr, result_stderr
    lines = [line for line in result_stderr.splitlines() if line.strip()]
    assert len(lines) == 1, lines
    return lines[0]


def test_a_link_another_user_plants_under_shared_outputs_is_not_followed(distlaunch_home: Path) -> None:
    require_other_user()
    with shared_tmp() as shared, bad_port("closed") as port:
        outputs = shared / "outputs"
        outputs.mkdir()
        outputs.chmod(0o777)  # a folder others can write (a shared project folder)
        trap = shared / "trap"
        as_other(f"mkdir -m 777 {trap} {outputs}/profile && ln -s {trap} {outputs}/profile/shared-run")
        fake_run(distlaunch_home, "shared-run", outputs, {"worker:0": port})
        result = cli("profile", "shared-run", "--seconds", "0.1", timeout=120)
        assert list(trap.iterdir()) == [], "the capture folder was made where the other user's link points"
        assert result.returncode == 2, result.stdout + result.stderr
        line = refusal(result.stderr)
        assert line.startswith(f"distlaunch: error: {os.path.realpath(outputs)}: writable by group and others"), line


def test_a_link_at_the_runs_folder_is_refused(distlaunch_home: Path, tmp_path: Path) -> None:
    with bad_port("closed") as port:
        outputs = tmp_path / "outputs"
        (outputs / "profile").mkdir(parents=True)
        trap = tmp_path / "trap"
        trap.mkdir()
        (outputs / "profile" / "linked-run").symlink_to(trap)
        fake_run(distlaunch_home, "linked-run", outputs, {"worker:0": port})
        result = cli("profile", "linked-run", "--seconds", "0.1", timeout=120)
    assert list(trap.iterdir()) == [], "the capture folder was made where the link points"
    assert result.returncode == 2, result.stdout + result.stderr
    line = refusal(result.stderr)
    assert line.startswith(f"distlaunch: error: {outputs / 'profile' / 'linked-run'}: a symbolic link; "), line
