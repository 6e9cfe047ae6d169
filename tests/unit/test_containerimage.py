"""The test image's pure logic (tests/containerimage.py): apt sources, wheel tags, mounts, dockerd's start.
Nothing here needs Docker: dockerd and docker are stand-in scripts."""

from __future__ import annotations

import fcntl
import os
import subprocess
import time
from pathlib import Path

import pytest

from tests import containerimage as ci
from tests import containers

DEB822 = """\
Types: deb
# http://snapshot.debian.org/archive/debian/20250520T000000Z
URIs: http://deb.debian.org/debian
Suites: bookworm bookworm-updates
Components: main
Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg

Types: deb
URIs: http://deb.debian.org/debian-security
Suites: bookworm-security
Components: main
"""


def test_deb822_stanzas() -> None:
    main, security = ci.parse_deb822_sources(DEB822)
    assert main == ci.AptSource("http://deb.debian.org/debian", ("bookworm", "bookworm-updates"), ("main",),
                                "/usr/share/keyrings/debian-archive-keyring.gpg")
    assert security.suites == ("bookworm-security",) and security.signed_by is None


def test_deb822_skips_disabled_source_only_and_inline_keys() -> None:
    text = """\
Types: deb deb-src
URIs: http://a.example/debian http://b.example/debian
Suites: bookworm
Components: main contrib
Signed-By:
 -----BEGIN PGP PUBLIC KEY BLOCK-----
 .
 -----END PGP PUBLIC KEY BLOCK-----

Types: deb
URIs: http://off.example/debian
Suites: bookworm
Enabled: no

Types: deb-src
URIs: http://src.example/debian
Suites: bookworm
"""
    found = ci.parse_deb822_sources(text)
    assert [s.uri for s in found] == ["http://a.example/debian", "http://b.example/debian"]
    assert found[0].components == ("main", "contrib") and found[0].signed_by is None


def test_one_line_sources() -> None:
    text = """\
# a comment
deb-src http://deb.debian.org/debian bookworm main
deb [arch=amd64 signed-by=/usr/share/keyrings/k.gpg] http://mirror.example/debian bookworm main  # trailing
deb http://deb.debian.org/debian-security bookworm-security main contrib
"""
    first, second = ci.parse_one_line_sources(text)
    assert first == ci.AptSource("http://mirror.example/debian", ("bookworm",), ("main",), "/usr/share/keyrings/k.gpg")
    assert second.components == ("main", "contrib") and second.signed_by is None


def test_debian_mirror_takes_the_first_source_of_the_suite() -> None:
    sources = [
        ci.AptSource("https://packages.cloud.google.com/apt", ("cloud-sdk-bookworm",), ("main",)),
        ci.AptSource("http://deb.debian.org/debian-security", ("bookworm-security",), ("main",)),
        ci.AptSource("http://contrib-only.example/debian", ("bookworm",), ("contrib",)),
        ci.AptSource("http://mirror.example/debian", ("bookworm", "bookworm-updates"), ("main",)),
    ]
    assert ci.debian_mirror(sources).uri == "http://mirror.example/debian"
    assert ci.debian_mirror(sources[:3]).uri == ci.DEFAULT_MIRROR


def test_apt_sources_reads_what_apt_reads(tmp_path: Path) -> None:
    (tmp_path / "sources.list").write_text("deb http://one.example/debian bookworm main\n")
    parts = tmp_path / "sources.list.d"
    parts.mkdir()
    (parts / "debian.sources").write_text(DEB822)
    (parts / "google-cloud-sdk.list.disabled-by-farm").write_text("deb http://off.example/apt bookworm main\n")
    (parts / "z.list").write_text("deb http://last.example/debian bookworm main\n")
    uris = [s.uri for s in ci.apt_sources(tmp_path)]
    assert uris == ["http://one.example/debian", "http://deb.debian.org/debian",
                    "http://deb.debian.org/debian-security", "http://last.example/debian"]
    assert ci.apt_sources(tmp_path / "missing") == []


def test_wheel_platforms_cover_older_glibcs_and_legacy_aliases() -> None:
    tags = ci.wheel_platforms((2, 36), "x86_64")
    assert tags[0] == "manylinux_2_36_x86_64" and "manylinux_2_37_x86_64" not in tags
    for tag in ("manylinux_2_27_x86_64", "manylinux_2_5_x86_64", "manylinux2014_x86_64",
                "manylinux2010_x86_64", "manylinux1_x86_64"):
        assert tag in tags
    arm = ci.wheel_platforms((2, 36), "aarch64")
    assert "manylinux2014_aarch64" in arm and not any("manylinux2010" in t or "manylinux1_" in t for t in arm)


def test_pip_download_is_for_the_images_python_not_the_hosts(tmp_path: Path) -> None:
    argv = ci.pip_download_argv("/host/python3.13", tmp_path / "w", ["tensorflow-cpu==2.21.0"])
    assert argv[:4] == ["/host/python3.13", "-m", "pip", "download"]
    assert argv[-1] == "tensorflow-cpu==2.21.0"
    joined = " ".join(argv)
    assert "--python-version 3.11" in joined and "--abi cp311" in joined and "--only-binary=:all:" in joined
    assert f"--dest {tmp_path / 'w'}" in joined


def test_mounts_under_is_deepest_first_and_exact_on_prefixes() -> None:
    mountinfo = "\n".join([
        "22 1 0:20 / / rw - ext4 /dev/vda rw",
        "30 22 0:5 /pts /c/build-1/root/dev/pts rw - devpts devpts rw",
        "31 22 0:5 /null /c/build-1/root/dev/null rw - devtmpfs udev rw",
        "32 22 0:6 / /c/build-1/root/proc rw - proc proc rw",
        "33 22 0:7 / /c/build-10/root/proc rw - proc proc rw",
        "34 22 0:8 / /c/build\\0401/x rw - tmpfs t rw",
    ])
    found = ci.mounts_under(Path("/c/build-1"), mountinfo)
    assert found[:2] in ([Path("/c/build-1/root/dev/pts"), Path("/c/build-1/root/dev/null")],
                         [Path("/c/build-1/root/dev/null"), Path("/c/build-1/root/dev/pts")])
    assert found[2:] == [Path("/c/build-1/root/proc")]
    assert ci.mounts_under(Path("/c/build 1"), mountinfo) == [Path("/c/build 1/x")]


def test_cache_and_recipe(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("DISTLAUNCH_IMAGE_CACHE", str(tmp_path))
    h = ci.recipe_hash()
    assert len(h) == 12 and int(h, 16) >= 0 and h == ci.recipe_hash()
    assert ci.tarball_path() == tmp_path / f"distlaunch-test-tf2.21-{h}.tar.zst"
    assert f"LABEL {ci.LABEL}={h}" in ci.import_changes()
    monkeypatch.setattr(ci, "PIP_REQUIREMENTS", ("tensorflow-cpu==2.22.0",))
    assert ci.recipe_hash() != h


def _stand_ins(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, dockerd: str) -> Path:
    """docker answers once $MARK exists; dockerd is the given script. Both first on PATH."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    mark = tmp_path / "up"
    (bin_dir / "docker").write_text('#!/bin/sh\n[ -e "$MARK" ]\n')
    (bin_dir / "dockerd").write_text(f"#!/bin/sh\n{dockerd}\n")
    for exe in bin_dir.iterdir():
        exe.chmod(0o755)
    monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ['PATH']}")
    monkeypatch.setenv("MARK", str(mark))
    monkeypatch.setattr(ci, "DOCKERD_LOG", tmp_path / "dockerd.log")
    monkeypatch.setattr(os, "geteuid", lambda: 0)
    return mark


def test_ensure_dockerd_starts_one_and_waits(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    mark = _stand_ins(tmp_path, monkeypatch, 'echo "$@"; sleep 0.3; touch "$MARK"; sleep 1')
    ci.ensure_dockerd(timeout=10)
    assert mark.exists()
    assert (tmp_path / "dockerd.log").read_text().split() == ["--iptables=false", "--bridge=none"]
    ci.ensure_dockerd(timeout=0)  # answering already: nothing started


def test_ensure_dockerd_reports_a_daemon_that_exits(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    _stand_ins(tmp_path, monkeypatch, "echo 'failed to start daemon: pid file found'; exit 1")
    with pytest.raises(ci.DockerUnavailable, match="exited with 1: failed to start daemon: pid file found"):
        ci.ensure_dockerd(timeout=10)


def test_ensure_dockerd_needs_root(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    _stand_ins(tmp_path, monkeypatch, 'touch "$MARK"')
    monkeypatch.setattr(os, "geteuid", lambda: 1000)
    with pytest.raises(ci.DockerUnavailable, match="only root"):
        ci.ensure_dockerd(timeout=10)
    assert not (tmp_path / "up").exists()


def test_a_build_step_that_does_not_end_is_cut_with_its_children_and_named(tmp_path: Path) -> None:
    """Before: debootstrap, pip and the import check had no timeout: a stalled mirror hung the session."""
    log = tmp_path / "build.log"
    child = tmp_path / "child.pid"
    started = time.monotonic()
    with pytest.raises(ci.ImageBuildError, match=r"^pip download did not finish within 1s \(log: "):
        ci._run_logged(["sh", "-c", f"sleep 30 & echo $! > {child}; echo fetching; wait"], log, "pip download",
                       timeout=1)
    assert time.monotonic() - started < 10 and "fetching" in log.read_text()
    proc = Path(f"/proc/{child.read_text().strip()}")

    def gone() -> bool:  # SIGKILL sent to the group: a loaded machine may still show it running a moment
        try:
            return (proc / "stat").read_text().split(")")[-1].split()[0] in ("Z", "X")
        except OSError:
            return True

    deadline = time.monotonic() + 5
    while not gone() and time.monotonic() < deadline:
        time.sleep(0.02)
    assert gone()


def test_a_cache_lock_held_too_long_is_a_build_error(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("DISTLAUNCH_IMAGE_CACHE", str(tmp_path))
    with (tmp_path / ".lock").open("w") as other:  # another session's build
        fcntl.flock(other, fcntl.LOCK_EX)
        with pytest.raises(ci.ImageBuildError, match=r"another build or import held .*lock for more than 1s"), \
                ci._cache_lock(timeout=1):
            pass
    with ci._cache_lock(timeout=1):  # released: taken at once
        pass


def test_a_docker_that_does_not_answer_makes_the_fixture_skip_or_fail_with_the_reason(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(ci, "ensure_dockerd", lambda: None)
    monkeypatch.setattr(containers, "ensure_dockerd", lambda: None)

    def hung(args: object, timeout: float = ci.DOCKER_SECONDS) -> object:
        raise subprocess.TimeoutExpired(["docker", "image", "inspect"], timeout)

    monkeypatch.setattr(ci, "_docker", hung)
    with pytest.raises(ci.ImageBuildError, match="docker image inspect did not answer within 30s"):
        ci.ensure_image()
    assert containers.docker_unavailable() == "docker image inspect did not answer within 30s"
