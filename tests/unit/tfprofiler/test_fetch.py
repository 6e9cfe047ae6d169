"""Issue 49, item 4: the capture files a host sends back land only under the capture folder, under
the exact names of that host's own tasks. The host here runs the real copy script in a real shell
on folders of this machine (its "logdir" is another folder than the capture's, as on another
host); a host's answer is also crafted, as a host that does not run that script could send it."""

from __future__ import annotations

import base64
import json
import os
import secrets
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from launcher.runstate import RunState
from launcher.tfprofiler import fetch as fetch_module
from launcher.tfprofiler.capture import Target
from launcher.tfprofiler.fetch import fetch_remote
from launcher.transport import CommandResult, LineSplitter

STAMP = "2026_01_31_12_00_00"
REPO = Path(__file__).resolve().parents[2]


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

    def stream_lines(self, command: str, on_line: Callable[[str], None]) -> FinishedStream:
        """The answer of ``run`` fed line by line through the transports' own splitter (whose line
        bound is what keeps a stream's memory small)."""
        result = self.run(command, timeout=60)
        splitter = LineSplitter(on_line)
        splitter.feed(result.stdout.encode())
        splitter.finish()
        return FinishedStream(result.exit_code, result.stderr)

    def close(self) -> None:
        pass


class FinishedStream:
    def __init__(self, code: int, stderr: str) -> None:
        self.code, self.stderr = code, stderr

    def wait(self, timeout: float | None = None) -> int:
        return self.code

    def close(self) -> None:
        pass

    def stderr_tail(self) -> str:
        return self.stderr


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


# --- issue 59, item 9: what one host may send is bounded in files, bytes and memory ---

def test_a_host_that_sends_thousands_of_stamp_folders_gets_a_bounded_number_written(
        monkeypatch: pytest.MonkeyPatch, folder: Path, tmp_path: Path) -> None:
    mine = Target("worker:1", "h2", "10.0.0.2", 40001)
    answer = "".join(f"{b64(f'plugins/profile/{n:06d}/{mine.file_name}'.encode())} {b64(b'x')}\n"
                     for n in range(20_000))
    lines = fetch(monkeypatch, ShellHost(folder, tmp_path, canned=answer), [mine])
    assert len(every_file(folder)) == fetch_module.MAX_FILES
    assert any(f"more than {fetch_module.MAX_FILES} capture files" in line for line in lines), lines


def test_a_file_over_the_bound_is_not_kept(monkeypatch: pytest.MonkeyPatch, folder: Path, tmp_path: Path) -> None:
    mine = Target("worker:1", "h2", "10.0.0.2", 40001)
    monkeypatch.setattr(fetch_module, "MAX_FILE_BYTES", 1000)
    name = b64(f"plugins/profile/{STAMP}/{mine.file_name}".encode())
    answer = "".join(f"{name} {b64(bytes(300))}\n" for _ in range(5))  # 1500 bytes in five parts
    lines = fetch(monkeypatch, ShellHost(folder, tmp_path, canned=answer), [mine])
    assert every_file(folder) == []
    assert len(lines) == 1 and "was not copied: more than" in lines[0], lines


_COPY = """
import json, resource, sys
from pathlib import Path
from launcher.model import HostConfig
from launcher.tfprofiler.fetch import _fetch_one
from launcher.transport.local import LocalHost

class Elsewhere(LocalHost):  # the same path on "another host": the folder argv[3] here
    def stream_lines(self, command, on_line, on_close=None):
        return super().stream_lines(command.replace(sys.argv[1], sys.argv[3]), on_line, on_close)

before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
lines = _fetch_one(Elsewhere(HostConfig(name="h2", address="localhost", transport="local")), "h2",
                   {sys.argv[2]}, Path(sys.argv[1]))
print(json.dumps({"lines": lines, "grew_kib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before}))
"""


def test_a_big_capture_is_copied_whole_through_a_bounded_stream(folder: Path, tmp_path: Path) -> None:
    """A real shell runs the real script on a 96 MiB capture: copied byte for byte, in lines the
    stream bounds, so the launcher's memory never holds the file (it once held it twice over)."""
    mine = Target("worker:1", "h2", "10.0.0.2", 40001)
    remote = tmp_path / "remote"
    (remote / "plugins" / "profile" / STAMP).mkdir(parents=True)
    source = remote / "plugins" / "profile" / STAMP / mine.file_name
    block = os.urandom(1 << 20)
    with source.open("wb") as fh:
        for _ in range(96):
            fh.write(block)
    done = subprocess.run([sys.executable, "-c", _COPY, str(folder), mine.file_name, str(remote)],
                          capture_output=True, text=True, timeout=120, cwd=REPO,
                          env={**os.environ, "PYTHONPATH": str(REPO)})
    assert done.returncode == 0, done.stderr
    result = json.loads(done.stdout)
    assert result["lines"] == []
    copied = folder / "plugins" / "profile" / STAMP / mine.file_name
    assert copied.stat().st_size == source.stat().st_size
    with copied.open("rb") as got, source.open("rb") as want:
        while True:
            a, b = got.read(1 << 20), want.read(1 << 20)
            assert a == b
            if not a:
                break
    assert result["grew_kib"] < 48 * 1024, result
