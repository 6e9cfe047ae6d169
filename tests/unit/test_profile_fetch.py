"""Issue 49, item 4: the capture files a host sends back land only under the capture folder, under
the exact names of that host's own tasks. The host here runs the real copy script in a real shell
on folders of this machine (its "logdir" is another folder than the capture's, as on another
host); a host's answer is also crafted, as a host that does not run that script could send it."""

from __future__ import annotations

import base64
import os
import secrets
import subprocess
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from launcher.runstate import RunState
from launcher.tfprofiler.capture import Target
from launcher.tfprofiler.fetch import fetch_remote
from launcher.transport import CommandResult

STAMP = "2026_01_31_12_00_00"


class ShellHost:
    """A host that runs commands in /bin/sh here, with its logdir at ``remote`` (the script names
    the capture folder, as the same path on another host), or that answers ``canned``."""

    def __init__(self, folder: Path, remote: Path, canned: str | None = None) -> None:
        self.folder, self.remote, self.canned = folder, remote, canned

    def run(self, command: str, timeout: float = 60.0, stdin: bytes | None = None) -> CommandResult:
        if self.canned is not None:
            return CommandResult(0, self.canned, "")
        assert str(self.folder) in command
        done = subprocess.run(["/bin/sh", "-c", command.replace(str(self.folder), str(self.remote))],
                              capture_output=True, text=True, timeout=timeout)
        return CommandResult(done.returncode, done.stdout, done.stderr)

    def close(self) -> None:
        pass


@pytest.fixture
def folder(tmp_path: Path) -> Path:
    capture = tmp_path / "outputs" / "profile" / "r1" / "20260131T120000Z"
    capture.mkdir(parents=True, mode=0o700)
    return capture


def fetch(monkeypatch: pytest.MonkeyPatch, host: ShellHost, targets: list[Target]) -> list[str]:
    def sessions(state: RunState) -> tuple[dict[str, Any], dict[str, str]]:
        return {name: SimpleNamespace(host=host) for name in state.hosts}, {}

    hosts = {"h1": {"config": {"transport": "local"}}, "h2": {"config": {"transport": "ssh"}}}
    state = RunState.from_json({"run_id": "r1", "hosts": hosts})
    return fetch_remote(state, targets, host.folder, sessions)


def every_file(root: Path) -> list[str]:
    return sorted(str(p.relative_to(root)) for p in root.rglob("*") if not p.is_dir())


def test_a_newline_in_a_folder_name_cannot_send_bytes_elsewhere(monkeypatch: pytest.MonkeyPatch, folder: Path,
                                                                tmp_path: Path) -> None:
    address = f"10.{secrets.randbelow(200)}.{secrets.randbelow(200)}.9"
    mine = Target("worker:1", "h2", address, 40001)
    remote = tmp_path / "remote"
    good = remote / "plugins" / "profile" / STAMP
    good.mkdir(parents=True)
    (good / mine.file_name).write_bytes(b"the real capture")
    # a folder name with newlines: the old script's "name line, data line" pairs shifted, and the
    # launcher wrote the file's bytes to /<address>_<port>.xplane.pb
    sly = remote / "plugins" / "profile" / "a\nb\n"
    sly.mkdir(parents=True)
    (sly / mine.file_name).write_bytes(b"the host's bytes")
    escaped = Path("/") / mine.file_name
    try:
        lines = fetch(monkeypatch, ShellHost(folder, remote), [mine])
        assert not escaped.exists(), f"the host's bytes went to {escaped}"
    finally:
        if escaped.exists():
            escaped.unlink()
    assert every_file(folder) == [f"plugins/profile/{STAMP}/{mine.file_name}"]
    assert (folder / "plugins" / "profile" / STAMP / mine.file_name).read_bytes() == b"the real capture"
    assert len(lines) == 1 and "1 file(s) it sent were not taken" in lines[0], lines


def b64(data: bytes) -> str:
    return base64.b64encode(data).decode()


def test_only_exact_names_of_the_hosts_own_tasks_are_written(monkeypatch: pytest.MonkeyPatch, folder: Path,
                                                            tmp_path: Path) -> None:
    mine = Target("worker:1", "h2", "10.0.0.2", 40001)
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    names = [f"{elsewhere}/{mine.file_name}",  # absolute
             f"plugins/profile/../../../../elsewhere/{mine.file_name}",
             f"plugins/profile/{STAMP}/../{mine.file_name}",
             f"plugins/profile/x\n{STAMP}/{mine.file_name}",
             f"plugins/profile/{STAMP}/sub/{mine.file_name}",
             f"plugins/profile/{STAMP}/10.0.0.1_40001.xplane.pb",  # another host's task
             f"plugins/profile/{STAMP}/{mine.file_name}"]
    new_form = "".join(f"{b64(n.encode())} {b64(b'bytes of ' + n.encode())}\n" for n in names)
    old_form = "".join(f"{n}\n{b64(b'old form')}\n" for n in names[:2])  # what the old script sent
    lines = fetch(monkeypatch, ShellHost(folder, tmp_path, canned=old_form + new_form + "%%%% ****\n"),
                  [mine, Target("worker:0", "h1", "10.0.0.1", 40001)])
    assert list(elsewhere.iterdir()) == []
    assert not (tmp_path / mine.file_name).exists()
    assert every_file(folder) == [f"plugins/profile/{STAMP}/{mine.file_name}"]
    assert (folder / names[-1]).read_bytes() == b"bytes of " + names[-1].encode()
    assert len(lines) == 1 and "were not taken" in lines[0] and "\n" not in lines[0], lines


def test_nothing_is_written_over_or_through_a_link(monkeypatch: pytest.MonkeyPatch, folder: Path,
                                                  tmp_path: Path) -> None:
    mine = Target("worker:1", "h2", "10.0.0.2", 40001)
    here = folder / "plugins" / "profile" / STAMP
    here.mkdir(parents=True)
    (here / mine.file_name).write_bytes(b"written here first")
    target = tmp_path / "target"
    target.mkdir()
    os.symlink(target, folder / "plugins" / "profile" / "2026_01_31_12_00_01")
    names = [f"plugins/profile/{stamp}/{mine.file_name}" for stamp in (STAMP, "2026_01_31_12_00_01")]
    old_form = "".join(f"{name}\n{b64(b'from the host')}\n" for name in names)  # what the old script sent
    new_form = "".join(f"{b64(name.encode())} {b64(b'from the host')}\n" for name in names)
    lines = fetch(monkeypatch, ShellHost(folder, tmp_path, canned=old_form + new_form), [mine])
    assert (here / mine.file_name).read_bytes() == b"written here first"
    assert list(target.iterdir()) == []
    assert [line for line in lines if "a symbolic link" in line], lines
    assert all("\n" not in line for line in lines)
