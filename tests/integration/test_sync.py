"""[sync]: a source folder reaches an SSH host's workdir before any task starts; only changes travel."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

from launcher.remote.sync import Excludes
from tests.integration.jobtools import cli, kill_run_processes
from tests.profiles import build_profile, ssh_table, sshd_host, table
from tests.sshd import PrivateSshd

pytestmark = pytest.mark.sshd


def _source(tmp_path: Path) -> Path:
    src = tmp_path / "project"
    (src / "pkg").mkdir(parents=True)
    (src / "data").mkdir()
    (src / ".git").mkdir()
    (src / "train.py").write_text("import pkg.util as u, os\nprint('trained', u.VALUE, sorted(os.listdir('.')))\n")
    (src / "pkg" / "__init__.py").write_text("")
    (src / "pkg" / "util.py").write_text("VALUE = 41\n")
    (src / "data" / "big.bin").write_bytes(os.urandom(4096))
    (src / ".git" / "HEAD").write_text("ref: refs/heads/main\n")
    (src / "notes.tmp").write_text("scratch\n")
    return src


def test_sync_creates_the_workdir_sends_only_changes_and_the_job_runs_from_it(tmp_path: Path,
                                                                               private_sshd: PrivateSshd) -> None:
    src = _source(tmp_path)
    workdir = tmp_path / "remote" / "work"  # does not exist yet; on the ssh host (this machine)
    profile = build_profile(src / "sync.toml", name="sync", strategy="custom", outputs=f"{tmp_path}/outputs",
                            command="{python} train.py", defaults={"python": sys.executable}, workdir=workdir,
                            restart="never", ssh=ssh_table(private_sshd), hosts=[sshd_host(private_sshd, "box")],
                            roles={"worker": {}},
                            extra=table("sync", {"exclude": ["data/", "*.tmp"]}))
    run_id = "it-sync"
    try:
        first = cli("up", str(profile), "--no-tui", "--run-dir", str(tmp_path / "run1"), "--run-id", run_id)
        assert first.returncode == 0, first.stdout[-2000:] + first.stderr[-2000:]
        # train.py, pkg/__init__.py, pkg/util.py and sync.toml; not data/, .git/ or notes.tmp
        assert "syncing" in first.stderr and "synced box:" in first.stderr and "4 changed file(s)" in first.stderr
        log = (tmp_path / "run1" / "logs" / "worker-0.log").read_text()
        assert "trained 41 ['pkg', 'sync.toml', 'train.py']" in log
        assert not (workdir / "data").exists() and not (workdir / ".git").exists()

        (src / "pkg" / "util.py").write_text("VALUE = 42\n")
        os.utime(src / "pkg" / "util.py", (1, 1))  # an older mtime is still a change
        second = cli("up", str(profile), "--no-tui", "--run-dir", str(tmp_path / "run2"), "--run-id", run_id + "-2")
        assert second.returncode == 0, second.stderr[-2000:]
        assert "1 changed file(s)" in second.stderr
        assert "trained 42" in (tmp_path / "run2" / "logs" / "worker-0.log").read_text()
    finally:
        kill_run_processes(run_id)
        kill_run_processes(run_id + "-2")


def test_gitignore_style_excludes() -> None:
    ex = Excludes(["data/", "*.ckpt", "/build", "logs/**/*.txt"])
    assert ex.excluded(".git", True) and ex.excluded("data", True) and ex.excluded("sub/data", True)
    assert not ex.excluded("data", False)  # a file named data is not the folder
    assert ex.excluded("a/b/model.ckpt", False) and ex.excluded("build", True)
    assert not ex.excluded("src/build", True)  # anchored at the top
    assert ex.excluded("logs/x/y.txt", False) and ex.excluded("logs/y.txt", False)
    assert not ex.excluded("train.py", False)
