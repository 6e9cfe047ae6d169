"""Where the disks are: a token in the first host's outputs dir, looked for from the others (real shell)."""

from __future__ import annotations

from pathlib import Path

from launcher.model import HostConfig
from launcher.remote.session import HostSession
from launcher.remote.storage import probe_outputs
from launcher.transport.local import LocalHost


def session(name: str, outputs: Path) -> HostSession:
    config = HostConfig(name=name, address="localhost", transport="local")
    return HostSession(config, LocalHost(config), "r", "/nonexistent", "python3", str(outputs))


def test_one_outputs_dir_seen_by_every_host_is_shared(tmp_path: Path) -> None:
    found = probe_outputs({h: session(h, tmp_path / "out") for h in ("a", "b")})
    assert found is not None and found.shared
    assert found.line().startswith("outputs is shared by every host")
    assert list((tmp_path / "out").iterdir()) == []  # the token is gone again


def test_outputs_a_host_does_not_see_is_per_host_and_says_what_follows(tmp_path: Path) -> None:
    found = probe_outputs({"a": session("a", tmp_path / "a"), "b": session("b", tmp_path / "a"),
                           "c": session("c", tmp_path / "c")})
    assert found is not None and not found.shared and found.apart == ["c"]
    assert found.line() == ("outputs is per host (the first host's is not seen from c): distlaunch copies "
                            "checkpoints to the launcher's machine and on to whoever restarts")


def test_one_host_has_nothing_to_share(tmp_path: Path) -> None:
    assert probe_outputs({"a": session("a", tmp_path)}) is None
