"""The openssh transport's control sockets of a run too deep for a socket path live under
$TMPDIR/distlaunch-ssh-<uid>/: that folder (and the run's folder in it) is created 0700 and, when it
is there already, used only if it is ours, 0700 and not a symlink, else one line says what is wrong.
Another user who made it first would otherwise receive the ssh master's connections.

The host is the real OpenSshHost on its connect path; no server is needed (port 1 refuses), since
the folder is made, or refused, before ssh starts."""

from __future__ import annotations

import os
import stat
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from launcher.errors import HostError
from launcher.model import HostConfig, SshSettings
from launcher.transport import make_host
from launcher.transport.openssh import OpenSshHost
from tests.integration.otheruser import OTHER_UID, as_other, require_other_user, shared_tmp

RUN_ID = "run-with-a-long-name-20261124-153800"


@pytest.fixture
def tmpdir_shared(monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """$TMPDIR as a fresh /tmp-like folder (1777) another user can plant in."""
    with shared_tmp() as folder:
        monkeypatch.setenv("TMPDIR", str(folder))
        monkeypatch.setattr(tempfile, "tempdir", None)  # gettempdir() reads $TMPDIR again
        yield folder


@pytest.fixture
def deep_run(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> str:
    """A run whose own dir is too deep for its sockets: they go under $TMPDIR."""
    home = tmp_path / ("deep-" * 12) / "home"
    monkeypatch.setenv("DISTLAUNCH_HOME", str(home))
    (home / "runs" / RUN_ID).mkdir(parents=True)
    return RUN_ID


def _host(tmp_path: Path, run_id: str) -> OpenSshHost:
    settings = SshSettings(ssh_port=1, ssh_config=None, connect_timeout=2, known_hosts=str(tmp_path / "known_hosts"))
    host = make_host(HostConfig(name="o1", address="127.0.0.1", transport="openssh", ssh=settings), run_id=run_id)
    assert isinstance(host, OpenSshHost)
    return host


def _refusal(host: OpenSshHost) -> str:
    with pytest.raises(HostError) as caught:
        host.connect()
    message = str(caught.value)
    assert "\n" not in message and message.startswith("host o1 ")
    return message


def test_the_tmp_control_dirs_are_made_private(tmpdir_shared: Path, deep_run: str, tmp_path: Path) -> None:
    host = _host(tmp_path, deep_run)
    with pytest.raises(HostError, match="ssh"):  # made, then ssh finds nothing listening on port 1
        host.connect()
    shared = tmpdir_shared / f"distlaunch-ssh-{os.getuid()}"
    assert Path(host.socket_path).parent.parent == shared
    for folder in (shared, Path(host.socket_path).parent):
        st = os.lstat(folder)
        assert stat.S_ISDIR(st.st_mode) and st.st_uid == os.geteuid() and stat.S_IMODE(st.st_mode) == 0o700


@pytest.mark.parametrize(("plant", "problem"), [
    ('mkdir -m 777 "$P"', f"uid {OTHER_UID}), not by you"),
    ('mkdir -m 700 "$P.real" && ln -s "$P.real" "$P"', "a symbolic link, not a private directory of yours"),
], ids=["their-0777-dir", "their-symlink"])
def test_a_control_dir_another_user_made_first_is_refused(tmpdir_shared: Path, deep_run: str, tmp_path: Path,
                                                          plant: str, problem: str) -> None:
    require_other_user()
    shared = tmpdir_shared / f"distlaunch-ssh-{os.getuid()}"
    as_other(plant, P=str(shared))
    message = _refusal(_host(tmp_path, deep_run))
    assert f"{shared}: " in message and problem in message and "TMPDIR" in message
    real = Path(str(shared) + ".real") if shared.is_symlink() else shared
    assert os.listdir(real) == []  # nothing of ours went in there


@pytest.mark.parametrize("mode", [0o777, 0o755], ids=["0777", "0755"])
def test_a_control_dir_of_ours_with_another_mode_is_refused(tmpdir_shared: Path, deep_run: str, tmp_path: Path,
                                                            mode: int) -> None:
    shared = tmpdir_shared / f"distlaunch-ssh-{os.getuid()}"
    shared.mkdir()
    shared.chmod(mode)
    message = _refusal(_host(tmp_path, deep_run))
    assert f"{shared}: mode {mode:04o}, not 0700" in message and f"chmod 700 {shared}" in message
    assert os.listdir(shared) == [] and stat.S_IMODE(shared.stat().st_mode) == mode
