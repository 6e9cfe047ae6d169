"""Each host keeps the agent zipapp by its sha256 (channel.BOOTSTRAP): sent once per version, and
never taken from a place another user could have written. Real processes: the bootstrap's Python
as a host runs it, a home of its own under tmp_path; the other user is uid 65534 (chown as root)."""

from __future__ import annotations

import os
import stat
import subprocess
import sys
from pathlib import Path

import pytest

from launcher.model import HostConfig
from launcher.remote.agentpack import agent_digest, build_agent_zipapp
from launcher.remote.channel import BOOTSTRAP
from launcher.remote.launchclock import LaunchClock
from launcher.remote.session import HostSession
from launcher.transport import make_host
from tests.integration.otheruser import OTHER_UID, require_other_user


class Host:
    """A home with the cache under it, and a fresh run dir per bootstrap."""

    def __init__(self, root: Path) -> None:
        self.home = root / "home"
        self.home.mkdir(mode=0o700)
        self.cache = self.home / ".cache" / "distlaunch" / "agent"
        self.runs = 0

    @property
    def kept(self) -> Path:
        return self.cache / f"{agent_digest()}.pyz"

    def bootstrap(self) -> tuple[str, Path]:
        """Run the bootstrap as a launch does: it says whether it wants the archive, gets it only
        then, and runs `preflight` from the run dir's copy. Returns its word and that copy."""
        self.runs += 1
        run_dir = self.home / f"run{self.runs}"
        run_dir.mkdir(mode=0o700)
        pyz = build_agent_zipapp()
        proc = subprocess.Popen([sys.executable, "-c", BOOTSTRAP, str(len(pyz)), agent_digest(),
                                 str(run_dir / "agent.pyz"), str(self.cache), str(self.home), "preflight"],
                                stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        assert proc.stdout is not None and proc.stdin is not None
        word = proc.stdout.readline().decode().strip()
        if word == "#agent send":
            proc.stdin.write(pyz)
        proc.stdin.close()
        out = proc.stdout.read()
        err = proc.stderr.read() if proc.stderr is not None else b""
        assert proc.wait(60) == 0, err
        assert out.startswith(b"{")  # the preflight answered, from the run dir's agent
        return word, run_dir / "agent.pyz"


@pytest.fixture
def host(tmp_path: Path) -> Host:
    return Host(tmp_path)


def _mode(path: Path) -> int:
    return stat.S_IMODE(os.lstat(path).st_mode)


def test_the_first_launch_sends_and_keeps_it_the_next_takes_it_from_the_cache(host: Host) -> None:
    word, copy = host.bootstrap()
    assert word == "#agent send"
    assert host.kept.read_bytes() == build_agent_zipapp() and _mode(host.kept) == 0o600
    assert all(_mode(d) == 0o700 for d in (host.cache, host.cache.parent, host.cache.parent.parent))
    word, copy = host.bootstrap()
    assert word == "#agent cached"  # nothing crossed stdin, yet the run dir holds the whole agent
    assert copy.read_bytes() == build_agent_zipapp()
    assert sorted(p.name for p in host.cache.iterdir()) == [host.kept.name]  # no temporary file left


def test_a_tampered_cached_archive_is_sent_again_and_replaced(host: Host) -> None:
    host.bootstrap()
    data = bytearray(host.kept.read_bytes())
    data[len(data) // 2] ^= 0xFF  # same size, ours, 0600: only the hash tells
    host.kept.write_bytes(bytes(data))
    word, copy = host.bootstrap()
    assert word == "#agent send"
    assert copy.read_bytes() == build_agent_zipapp() == host.kept.read_bytes()


def test_a_cached_archive_through_a_link_is_not_taken(host: Host, tmp_path: Path) -> None:
    host.bootstrap()
    real = tmp_path / "elsewhere.pyz"
    host.kept.rename(real)
    host.kept.symlink_to(real)  # the right bytes, reached through a link
    word, _ = host.bootstrap()
    assert word == "#agent send"
    assert not host.kept.is_symlink() and host.kept.read_bytes() == build_agent_zipapp()


def test_a_cached_archive_another_user_owns_is_never_run(host: Host) -> None:
    require_other_user()
    host.bootstrap()
    os.chown(host.kept, OTHER_UID, OTHER_UID)  # the right bytes even: whose file it is decides
    word, copy = host.bootstrap()
    assert word == "#agent send"
    assert copy.read_bytes() == build_agent_zipapp()
    assert host.kept.stat().st_uid == os.geteuid()  # replaced by one of ours (the folder is ours)


@pytest.mark.parametrize("level", ["cache", "distlaunch", ".cache", "home"])
def test_a_cache_in_a_folder_others_may_write_is_neither_used_nor_filled(host: Host, level: str) -> None:
    host.bootstrap()
    folder = {"cache": host.cache, "distlaunch": host.cache.parent, ".cache": host.cache.parent.parent,
              "home": host.home}[level]
    folder.chmod(0o770)  # a group shared with others may write there: any file below may be theirs
    before = host.kept.stat().st_mtime_ns
    word, copy = host.bootstrap()
    assert word == "#agent send"
    assert copy.read_bytes() == build_agent_zipapp()
    assert host.kept.stat().st_mtime_ns == before  # not touched, not rewritten


def test_a_cache_folder_another_user_owns_is_never_used(host: Host) -> None:
    require_other_user()
    host.bootstrap()
    os.chown(host.cache, OTHER_UID, OTHER_UID)  # 0700, but theirs: they could have put anything there
    word, _ = host.bootstrap()
    assert word == "#agent send"


def test_a_launch_sends_the_agent_once_per_version(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The launcher's side (HostSession._open): the archive goes only where the bootstrap asks."""
    monkeypatch.setenv("DISTLAUNCH_HOME", str(tmp_path / "state"))
    config = HostConfig(name="h", address="localhost", transport="local")
    froms = []
    for attempt in range(2):
        session = HostSession(config, make_host(config), "cache-run", str(tmp_path / f"run{attempt}"), sys.executable)
        session.clock = LaunchClock.begin()
        session.clock.stamp("h", "connected")  # preflight's connection puts the host on the clock
        session.open_channel("127.0.0.1", [], 1, [], tensorflow=False, follow=False)
        channel = session.take_channel()
        if channel is not None:
            channel.end()
        froms.append(session.clock.agent_from["h"])
        assert {"connected", "agent", "preflight"} <= set(session.clock.hosts["h"])
        assert (tmp_path / f"run{attempt}" / "agent.pyz").read_bytes() == build_agent_zipapp()
    assert froms == ["sent", "cached"]
    assert (tmp_path / "state" / "cache" / "hostagent" / f"{agent_digest()}.pyz").is_file()


def test_a_home_that_is_a_link_keeps_the_cache_where_it_leads(tmp_path: Path) -> None:
    """/home/u -> /gpfs/u: judged where the link leads, so the cache still serves."""
    (tmp_path / "gpfs").mkdir()
    real = Host(tmp_path / "gpfs")
    linked = tmp_path / "home-link"
    linked.symlink_to(real.home)
    real.home, real.cache = linked, linked / ".cache" / "distlaunch" / "agent"
    assert real.bootstrap()[0] == "#agent send"
    assert real.bootstrap()[0] == "#agent cached"
    assert (tmp_path / "gpfs" / "home" / ".cache" / "distlaunch" / "agent" / f"{agent_digest()}.pyz").is_file()


def test_a_home_of_slash_ends_the_trust_walk(tmp_path: Path) -> None:
    """HOME=/ (root on some hosts) makes the cache path //root/...: the walk up from it stops at
    /, where it looped for ever on "//" before."""
    if os.geteuid() != 0 or not os.path.isdir("/root") or os.stat("/root").st_mode & 0o022:
        pytest.skip("needs root and a /root only root may write")
    pyz = build_agent_zipapp()
    run_dir = tmp_path / "run"
    run_dir.mkdir(mode=0o700)
    done = subprocess.run([sys.executable, "-c", BOOTSTRAP.split("data = cached()")[0] + "print(trusted())",
                           str(len(pyz)), agent_digest(), str(run_dir / "agent.pyz"), "//root", "/", "preflight"],
                          capture_output=True, text=True, timeout=20)
    assert done.returncode == 0 and done.stdout.strip() == "True", done.stderr
