"""`check`'s look at the outputs on a host (launcher/remote/session.py): it creates nothing, says
which existing parent is not a writable directory, and never reads the path as shell."""

from __future__ import annotations

import subprocess
from pathlib import Path

from launcher.remote.session import outputs_creatable_script


def run(path: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["sh", "-c", outputs_creatable_script(path)], capture_output=True, text=True, timeout=30)


def test_a_creatable_path_passes_and_is_not_created(tmp_path: Path) -> None:
    assert run(str(tmp_path / "a" / "b" / "job")).returncode == 0
    assert list(tmp_path.iterdir()) == []


def test_a_file_on_the_way_is_named(tmp_path: Path) -> None:
    (tmp_path / "afile").write_text("")
    answer = run(str(tmp_path / "afile" / "job"))
    assert answer.returncode != 0
    assert answer.stderr == (f"the outputs {tmp_path}/afile/job: {tmp_path}/afile is not a directory "
                             "this user may write\n")


def test_the_path_is_never_shell(tmp_path: Path) -> None:
    path = f'{tmp_path}/x "$(touch {tmp_path}/pwned)" `touch {tmp_path}/pwned2`/job'
    assert run(path).returncode == 0
    assert list(tmp_path.iterdir()) == []
