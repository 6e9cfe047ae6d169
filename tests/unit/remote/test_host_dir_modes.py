"""A host run dir and the folders made above it are private whatever the host's umask (issue 59,
items 1 and 3): ``~/.cache/distlaunch/runs`` made 0775 under umask 002 let a member of a shared
group swap a run dir, and the agent.pyz in it, away before distlaunch ran it."""

from __future__ import annotations

import os
import stat
import subprocess
from pathlib import Path

from launcher.model import HostConfig
from launcher.remote.session import HostSession


def test_the_host_run_dir_and_its_new_parents_are_0700_under_umask_002(tmp_path: Path) -> None:
    base = tmp_path / "home" / ".cache" / "distlaunch" / "runs" / "r1"
    (tmp_path / "home").mkdir()
    session = HostSession(HostConfig(name="h", address="localhost", transport="local"), None,  # type: ignore[arg-type]
                          "r1", str(base), "python3")
    done = subprocess.run(["/bin/sh", "-c", session._dirs_script()], capture_output=True, text=True, timeout=30,
                          preexec_fn=lambda: os.umask(0o002) and None)
    assert done.returncode == 0, done.stderr
    for folder in (base, base.parent, base.parent.parent, base.parent.parent.parent):
        assert stat.S_IMODE(folder.stat().st_mode) == 0o700, folder
