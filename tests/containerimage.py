"""The Docker image the container tests run: Debian bookworm (minbase) with python3 and tensorflow-cpu.

``IMAGE`` (``distlaunch-test:tf2.21``) is built offline from Debian's packages and the configured
Python package index, never pulled from a registry::

    python -m tests.containerimage            # ensure it: seconds when present
    python -m tests.containerimage --rebuild  # build it again from the packages

How it is built (as root; progress lines on stderr):

1. ``debootstrap --variant=minbase --include=python3,python-is-python3,libstdc++6 bookworm`` into a
   temporary directory, from the Debian mirror this machine's apt uses (its sources, ``debian_mirror``).
2. The host's pip *downloads* the wheels (``pip download``, with the host's pip configuration: its
   find-links and indexes) for CPython 3.11 on manylinux/glibc 2.36, the ABI of bookworm's python3,
   whatever Python runs this module; nothing is compiled and nothing in the root runs the network.
3. In the root (``chroot``, no mounts), bookworm's python3 runs pip from its wheel and installs the
   wheels into ``/usr/local`` (``--no-index``): ``python3`` and ``python`` are ``/usr/bin`` ones, so they
   import TensorFlow whatever PATH a task brings; all of it is world-readable (umask 022), so a task
   run as any uid (``--user 65534:65534``) imports it too. Apt's lists and caches, docs, man pages, locales,
   TensorFlow's C++ headers (for building custom ops only) and the wheels are removed.
4. The root becomes a tarball in the cache (``$DISTLAUNCH_IMAGE_CACHE``, else ``~/.cache/distlaunch/test-image``),
   named by a hash of the recipe; ``docker import`` makes the image from it, labelled with that hash.

Later: the image is present with the recipe's label: nothing to do. The image is gone (``docker rmi``,
a daemon with a new data root) but the tarball is cached: one ``docker import`` (about ten seconds).

Where the image is made in CI: ``.ci/run`` starts dockerd and runs ``make container-image`` (this
module) before ``make test``, so the cold build (1-2 minutes) is a step of its own rather than the setup of
the first container test, which pytest's per-test timeout would cut short. The ``docker_image`` fixture
(tests/containers.py) calls ``ensure_dockerd`` and ``ensure_image`` all the same: there it is a check
of seconds, and on a developer's machine it builds the image where none was made (run this module
first there if the build would outlast the timeout).
"""

from __future__ import annotations

import argparse
import contextlib
import fcntl
import hashlib
import os
import platform
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

IMAGE = "distlaunch-test:tf2.21"
SUITE = "bookworm"
# bookworm's python3 is CPython 3.11 on glibc 2.36: the wheels must fit that, not the host's Python
IMAGE_PYTHON = (3, 11)
IMAGE_GLIBC = (2, 36)
DEFAULT_MIRROR = "http://deb.debian.org/debian"
DEB_PACKAGES = ("python3", "python-is-python3", "libstdc++6")
PIP_REQUIREMENTS = ("tensorflow-cpu==2.21.0", "psutil", "pip")
IMAGE_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
IMAGE_ENV = (("PATH", IMAGE_PATH), ("LANG", "C.UTF-8"))
# inside the root, after the install: what no task needs (paths relative to the root; globs)
PRUNE = (
    "var/cache/apt/*",
    "var/lib/apt/lists/*",
    "var/cache/debconf/*-old",
    "var/log/*",
    "usr/share/man/*",
    "usr/share/info/*",
    "usr/share/locale/*",
    "usr/share/doc/*/*",  # the copyright files stay (below)
    "usr/local/lib/python3.*/dist-packages/tensorflow/include",
    "root/.cache",
    "tmp/*",
    "dev/*",  # Docker mounts its own /dev, /etc/resolv.conf and /etc/hostname
    "etc/resolv.conf",
    "etc/hostname",
)
KEEP = ("copyright",)
# bump when the steps change in a way the constants above do not show
RECIPE_VERSION = 1
DOCKERD_ARGV = ("dockerd", "--iptables=false", "--bridge=none")
DOCKERD_LOG = Path("/tmp/distlaunch-dockerd.log")
DOCKERD_WAIT = 60.0
LABEL = "distlaunch.test-image.recipe"
# the longest each build step may take (a slow mirror or index: the cold build is 1-2 minutes here)
DEBOOTSTRAP_SECONDS = 900.0
PIP_SECONDS = 900.0
IMPORT_CHECK_SECONDS = 300.0
TAR_SECONDS = 600.0
IMPORT_SECONDS = 600.0
DOCKER_SECONDS = 30.0
# how long to wait for another session's build or import (the cache lock) before giving up
LOCK_WAIT_SECONDS = 1200.0


class DockerUnavailable(RuntimeError):
    """No Docker daemon answers here and none could be started; the message says why."""


class ImageBuildError(RuntimeError):
    """The test image could not be built or imported; the message names the step and its log."""


# ---------------------------------------------------------------------------------------------
# pure helpers (tests/unit/test_containerimage.py)


@dataclass(frozen=True)
class AptSource:
    uri: str
    suites: tuple[str, ...]
    components: tuple[str, ...]
    signed_by: str | None = None


def parse_one_line_sources(text: str) -> list[AptSource]:
    """``deb [opt=val ...] uri suite [component ...]`` lines (sources.list, *.list); deb-src skipped."""
    found = []
    for raw in text.splitlines():
        line = raw.split("#", 1)[0].strip()
        if not line:
            continue
        options: dict[str, str] = {}
        m = re.match(r"^(\S+)\s+\[([^\]]*)\]\s+(.*)$", line)
        if m:
            kind, opts, rest = m.groups()
            for opt in opts.split():
                key, _, value = opt.partition("=")
                options[key.lower()] = value
            fields = [kind, *rest.split()]
        else:
            fields = line.split()
        if len(fields) < 3 or fields[0] != "deb":
            continue
        found.append(AptSource(uri=fields[1], suites=(fields[2],), components=tuple(fields[3:]),
                               signed_by=options.get("signed-by")))
    return found


def parse_deb822_sources(text: str) -> list[AptSource]:
    """Stanzas of a deb822 ``*.sources`` file (Types, URIs, Suites, Components, Signed-By, Enabled)."""
    found = []
    stanzas: list[dict[str, str]] = [{}]
    key = None
    for raw in text.splitlines():
        if raw.startswith("#"):
            continue
        if not raw.strip():
            if stanzas[-1]:
                stanzas.append({})
            key = None
            continue
        if raw[0] in " \t":  # a continuation (an inline Signed-By key, a long list)
            if key is not None:
                stanzas[-1][key] += "\n" + raw.strip()
            continue
        name, sep, value = raw.partition(":")
        if not sep:
            continue
        key = name.strip().lower()
        stanzas[-1][key] = value.strip()
    for st in stanzas:
        if "deb" not in st.get("types", "").split() or st.get("enabled", "yes").lower() == "no":
            continue
        signed_by = st.get("signed-by")
        if signed_by is not None and "\n" in signed_by:  # an inline key: no file to hand debootstrap
            signed_by = None
        for uri in st.get("uris", "").split():
            found.append(AptSource(uri=uri, suites=tuple(st.get("suites", "").split()),
                                   components=tuple(st.get("components", "").split()), signed_by=signed_by))
    return found


def apt_sources(etc_apt: Path = Path("/etc/apt")) -> list[AptSource]:
    """This machine's apt sources, in apt's order: sources.list, then sources.list.d's *.list and *.sources."""
    files = [etc_apt / "sources.list"]
    parts = etc_apt / "sources.list.d"
    if parts.is_dir():
        files += sorted(p for p in parts.iterdir() if p.suffix in (".list", ".sources"))
    found: list[AptSource] = []
    for path in files:
        try:
            text = path.read_text(errors="replace")
        except OSError:
            continue
        found += parse_deb822_sources(text) if path.suffix == ".sources" else parse_one_line_sources(text)
    return found


def debian_mirror(sources: Iterable[AptSource], suite: str = SUITE) -> AptSource:
    """The first source that serves ``suite``'s main component; else deb.debian.org."""
    for src in sources:
        if suite in src.suites and (not src.components or "main" in src.components):
            return src
    return AptSource(uri=DEFAULT_MIRROR, suites=(suite,), components=("main",))


def wheel_platforms(glibc: tuple[int, int] = IMAGE_GLIBC, arch: str = "x86_64") -> list[str]:
    """Every manylinux tag a glibc ``glibc`` system takes, newest first, with the legacy aliases
    (manylinux2014 = 2.17, manylinux2010 = 2.12, manylinux1 = 2.5): ``pip download --platform``
    matches the tags it is given and no older ones."""
    major, minor = glibc
    tags = [f"manylinux_{major}_{m}_{arch}" for m in range(minor, 4, -1)]
    if minor >= 17:
        tags.append(f"manylinux2014_{arch}")
    if arch in ("x86_64", "i686"):  # the older aliases were defined for these only
        tags += [f"manylinux2010_{arch}"] * (minor >= 12) + [f"manylinux1_{arch}"]
    return tags


def pip_download_argv(python: str, dest: Path, requirements: Sequence[str] = PIP_REQUIREMENTS,
                      arch: str = "x86_64") -> list[str]:
    """The host pip's download of ``requirements`` as wheels for bookworm's CPython (not the host's)."""
    ver = "".join(map(str, IMAGE_PYTHON))
    argv = [python, "-m", "pip", "download", "--disable-pip-version-check", "--progress-bar", "off",
            "--dest", str(dest), "--only-binary=:all:", "--implementation", "cp",
            "--python-version", ".".join(map(str, IMAGE_PYTHON)), "--abi", f"cp{ver}"]
    for tag in wheel_platforms(arch=arch):
        argv += ["--platform", tag]
    return [*argv, *requirements]


def recipe_hash() -> str:
    """What the tarball and the image are made from, in 12 hex digits: the cache's key."""
    recipe = repr((RECIPE_VERSION, SUITE, IMAGE_PYTHON, IMAGE_GLIBC, DEB_PACKAGES, PIP_REQUIREMENTS,
                   IMAGE_ENV, PRUNE, platform.machine()))
    return hashlib.sha256(recipe.encode()).hexdigest()[:12]


def cache_dir() -> Path:
    env = os.environ.get("DISTLAUNCH_IMAGE_CACHE")
    return Path(env) if env else Path.home() / ".cache" / "distlaunch" / "test-image"


def tarball_path(directory: Path | None = None) -> Path:
    name = IMAGE.replace(":", "-").replace("/", "-")
    return (directory or cache_dir()) / f"{name}-{recipe_hash()}.tar.zst"


def import_changes() -> list[str]:
    return [*(f"ENV {k}={v}" for k, v in IMAGE_ENV), f"LABEL {LABEL}={recipe_hash()}", 'CMD ["python3"]']


# ---------------------------------------------------------------------------------------------
# Docker


def _docker(args: Sequence[str], timeout: float = DOCKER_SECONDS) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["docker", *args], capture_output=True, text=True, timeout=timeout,
                          stdin=subprocess.DEVNULL)


def docker_available() -> bool:
    """A docker client is here and a daemon answers it."""
    if shutil.which("docker") is None:
        return False
    try:
        return _docker(["info", "--format", "{{.ServerVersion}}"], timeout=15).returncode == 0
    except (OSError, subprocess.TimeoutExpired):
        return False


def ensure_dockerd(timeout: float = DOCKERD_WAIT) -> None:
    """Return once a Docker daemon answers. Where none does and we are root with dockerd installed,
    start ``dockerd --iptables=false --bridge=none`` (host networking only) in the background, its log
    in /tmp, and wait for it; it is left running. Raises DockerUnavailable with the reason otherwise."""
    if docker_available():
        return
    if shutil.which("docker") is None or shutil.which("dockerd") is None:
        raise DockerUnavailable("docker/dockerd not found (apt-get install docker.io)")
    if os.geteuid() != 0:
        raise DockerUnavailable("no Docker daemon answers and only root starts one")
    _log(f"starting {' '.join(DOCKERD_ARGV)} (log: {DOCKERD_LOG})")
    t0 = time.monotonic()
    with DOCKERD_LOG.open("ab") as log:
        proc = subprocess.Popen(DOCKERD_ARGV, stdin=subprocess.DEVNULL, stdout=log, stderr=log,
                                start_new_session=True)
    while time.monotonic() - t0 < timeout:
        if docker_available():
            _log(f"dockerd answers after {time.monotonic() - t0:.1f}s")
            return
        if proc.poll() is not None:
            if docker_available():  # another dockerd won the race for the socket
                return
            raise DockerUnavailable(f"dockerd exited with {proc.returncode}: {_tail(DOCKERD_LOG)}")
        time.sleep(0.5)
    raise DockerUnavailable(f"dockerd did not answer within {timeout:.0f}s: {_tail(DOCKERD_LOG)}")


def image_recipe(tag: str = IMAGE) -> str | None:
    """The recipe label of the image ``tag``; "" for an image without one; None where there is none."""
    res = _docker(["image", "inspect", "--format", f'{{{{index .Config.Labels "{LABEL}"}}}}', tag])
    if res.returncode != 0:
        return None
    value = res.stdout.strip()
    return "" if value == "<no value>" else value


def import_tarball(tarball: Path, tag: str = IMAGE, timeout: float = IMPORT_SECONDS) -> None:
    if shutil.which("zstd") is None:
        raise ImageBuildError(f"zstd not found, to read {tarball} (apt-get install zstd)")
    with _step(f"docker import {tarball.name} as {tag}"):
        argv = ["docker", "import"]
        for change in import_changes():
            argv += ["--change", change]
        with subprocess.Popen(["zstd", "-dcq", str(tarball)], stdout=subprocess.PIPE) as unzstd:
            try:
                res = subprocess.run([*argv, "-", tag], stdin=unzstd.stdout, capture_output=True, text=True,
                                     timeout=timeout)
            except subprocess.TimeoutExpired:
                unzstd.kill()
                raise ImageBuildError(f"docker import of {tarball} did not finish within {timeout:.0f}s") from None
            finally:
                assert unzstd.stdout is not None
                unzstd.stdout.close()
        if unzstd.returncode != 0 or res.returncode != 0:
            raise ImageBuildError(f"docker import of {tarball} failed: {res.stderr.strip()[-2000:]}")


# ---------------------------------------------------------------------------------------------
# the build


def _log(msg: str) -> None:
    print(f"[containerimage] {msg}", file=sys.stderr, flush=True)


@contextlib.contextmanager
def _step(what: str) -> Iterator[None]:
    _log(f"{what} ...")
    t0 = time.monotonic()
    yield
    _log(f"{what}: done in {time.monotonic() - t0:.1f}s")


def _tail(path: Path, lines: int = 15) -> str:
    try:
        return " | ".join(path.read_text(errors="replace").splitlines()[-lines:])
    except OSError:
        return ""


def _run_logged(argv: Sequence[str], log: Path, what: str, env: dict[str, str] | None = None,
                timeout: float = PIP_SECONDS) -> None:
    with log.open("ab") as out:
        out.write(f"\n$ {' '.join(argv)}\n".encode())
        out.flush()
        # its own group: a step cut short takes its children along (debootstrap's dpkg, chroot's pip)
        proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT,
                                umask=0o022, env=env, start_new_session=True)
        try:
            code = proc.wait(timeout)
        except BaseException as exc:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
            if isinstance(exc, subprocess.TimeoutExpired):
                raise ImageBuildError(f"{what} did not finish within {timeout:.0f}s (log: {log}): {_tail(log)}") \
                    from None
            raise
    if code != 0:
        raise ImageBuildError(f"{what} exited with {code} (log: {log}): {_tail(log)}")


def _prune(root: Path) -> None:
    for pattern in PRUNE:
        for path in root.glob(pattern):
            if path.name in KEEP:
                continue
            if path.is_dir() and not path.is_symlink():
                shutil.rmtree(path)
            else:
                path.unlink()


def build_tarball(dest: Path) -> None:
    """Build the image's root file system from the packages and write it to ``dest`` (.tar.zst)."""
    missing = [t for t in ("debootstrap", "chroot", "tar", "zstd") if shutil.which(t) is None]
    if missing:
        raise ImageBuildError(f"{', '.join(missing)} not found (apt-get install debootstrap zstd)")
    if os.geteuid() != 0:
        raise ImageBuildError("debootstrap and chroot need root")
    dest.parent.mkdir(parents=True, exist_ok=True)
    log = dest.parent / "build.log"
    log.write_bytes(b"")
    arch = platform.machine()
    mirror = debian_mirror(apt_sources())
    # under the cache dir: one file system with dest (a rename at the end), and not a tmpfs /tmp
    tmp = Path(tempfile.mkdtemp(prefix="build-", dir=dest.parent))
    partial = dest.with_name(dest.name + ".partial")
    try:
        root = tmp / "root"
        argv = ["debootstrap", "--variant=minbase", f"--include={','.join(DEB_PACKAGES)}", "--components=main"]
        if mirror.signed_by and Path(mirror.signed_by).is_file():
            argv.append(f"--keyring={mirror.signed_by}")
        with _step(f"debootstrap {SUITE} (minbase + {' '.join(DEB_PACKAGES)}) from {mirror.uri}"):
            _run_logged([*argv, SUITE, str(root), mirror.uri], log, "debootstrap", timeout=DEBOOTSTRAP_SECONDS)
        wheels = root / "tmp" / "wheels"
        with _step(f"pip download {' '.join(PIP_REQUIREMENTS)} (cp{IMAGE_PYTHON[0]}{IMAGE_PYTHON[1]}, {arch})"):
            _run_logged(pip_download_argv(sys.executable, wheels, arch=arch), log, "pip download")
        pip_wheel = next(wheels.glob("pip-*.whl"), None)
        if pip_wheel is None:
            raise ImageBuildError(f"pip download left no pip wheel in {wheels}")
        chroot_env = {"PATH": IMAGE_PATH, "HOME": "/root", "LANG": "C.UTF-8", "PIP_NO_CACHE_DIR": "1",
                      "PIP_CONFIG_FILE": os.devnull}
        with _step("pip install (in the root, offline, into /usr/local)"):
            _run_logged(["chroot", str(root), "/usr/bin/python3", f"/tmp/wheels/{pip_wheel.name}/pip", "install",
                         "--no-index", "--find-links", "/tmp/wheels", "--break-system-packages",
                         "--root-user-action=ignore", "--disable-pip-version-check", "--no-warn-script-location",
                         "--progress-bar", "off", *PIP_REQUIREMENTS],
                        log, "pip install in the root", env=chroot_env)
        with _step("check: python3 and python import tensorflow in the root"):
            _run_logged(["chroot", str(root), "python", "-c",
                         "import tensorflow as tf, psutil, numpy; print(tf.__version__, psutil.__version__)"],
                        log, "import check", env={**chroot_env, "TF_CPP_MIN_LOG_LEVEL": "2"},
                        timeout=IMPORT_CHECK_SECONDS)
        _prune(root)
        with _step(f"tar | zstd > {dest}"):
            with partial.open("wb") as out:
                tar = subprocess.Popen(["tar", "-C", str(root), "--numeric-owner", "-cf", "-", "."],
                                       stdout=subprocess.PIPE)
                try:
                    zstd = subprocess.run(["zstd", "-q", "-T0", "-3"], stdin=tar.stdout, stdout=out,
                                          timeout=TAR_SECONDS)
                except subprocess.TimeoutExpired:
                    tar.kill()
                    tar.wait()
                    raise ImageBuildError(f"tar | zstd of {root} did not finish within {TAR_SECONDS:.0f}s") from None
                finally:
                    assert tar.stdout is not None
                    tar.stdout.close()
                if tar.wait() != 0 or zstd.returncode != 0:
                    raise ImageBuildError(f"tar ({tar.returncode}) | zstd ({zstd.returncode}) of {root} failed")
            partial.replace(dest)
    finally:
        _remove_build_dir(tmp)
        partial.unlink(missing_ok=True)
    for old in dest.parent.glob(dest.name.replace(recipe_hash(), "*")):
        if old != dest:
            old.unlink()  # the tarballs of other recipes


def mounts_under(directory: Path, mountinfo: str) -> list[Path]:
    """Mount points at or below ``directory`` in a /proc/self/mountinfo text, deepest first."""
    found = []
    for line in mountinfo.splitlines():
        fields = line.split()
        if len(fields) < 5:
            continue
        # the kernel writes space, tab, newline and backslash in paths as octal escapes
        point = Path(re.sub(r"\\([0-7]{3})", lambda m: chr(int(m.group(1), 8)), fields[4]))
        if point == directory or directory in point.parents:
            found.append(point)
    return sorted(found, key=lambda p: len(p.parts), reverse=True)


def _remove_build_dir(tmp: Path) -> None:
    """Remove a build dir, but never through a mount: in a container debootstrap bind-mounts the host's
    /dev nodes (/dev/pts, /dev/shm among them) into the root, and a debootstrap killed midway leaves
    them there, where rmtree would delete the host's files. Detach what is left first; else keep it."""
    resolved = tmp.resolve()
    for point in mounts_under(resolved, Path("/proc/self/mountinfo").read_text()):
        subprocess.run(["umount", "-l", str(point)], capture_output=True)
    left = mounts_under(resolved, Path("/proc/self/mountinfo").read_text())
    if left:
        _log(f"left {tmp} in place: still mounted there: {', '.join(map(str, left))}")
        return
    shutil.rmtree(tmp, ignore_errors=True)


@contextlib.contextmanager
def _cache_lock(timeout: float = LOCK_WAIT_SECONDS) -> Iterator[None]:
    """One build or import at a time per cache dir (two pytest sessions, a make step beside one);
    ImageBuildError when another holds it longer than ``timeout`` (a build that hangs)."""
    directory = cache_dir()
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / ".lock"
    deadline = time.monotonic() + timeout
    with path.open("w") as f:
        while True:
            try:
                fcntl.flock(f, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                if time.monotonic() >= deadline:
                    raise ImageBuildError(f"another build or import held {path} for more than {timeout:.0f}s; "
                                          "wait for it, or end it") from None
                time.sleep(0.5)
        yield


def ensure_image(rebuild: bool = False) -> str:
    """The test image's tag, once the image is present: imported from the cached tarball, or built
    (minutes) where there is none or ``rebuild``. Needs a daemon (``ensure_dockerd``). Every step is
    bounded: one that does not end in time is an ImageBuildError naming it."""
    try:
        return _ensure_image(rebuild)
    except subprocess.TimeoutExpired as exc:  # a docker query that did not answer
        argv = exc.cmd if isinstance(exc.cmd, list) else [str(exc.cmd)]
        raise ImageBuildError(f"{' '.join(map(str, argv))} did not answer within {exc.timeout:.0f}s") from None


def _ensure_image(rebuild: bool) -> str:
    want = recipe_hash()
    if not rebuild and image_recipe() == want:
        return IMAGE
    with _cache_lock():
        if not rebuild and image_recipe() == want:  # made while we waited for the lock
            return IMAGE
        tarball = tarball_path()
        t0 = time.monotonic()
        if rebuild or not tarball.exists():
            build_tarball(tarball)
        replaced = _docker(["image", "inspect", "--format", "{{.Id}}", IMAGE]).stdout.strip()
        import_tarball(tarball)
        current = _docker(["image", "inspect", "--format", "{{.Id}}", IMAGE]).stdout.strip()
        if replaced and replaced != current:  # the image it replaced, now untagged (kept while a container has it)
            _docker(["image", "rm", replaced])
        size = _docker(["image", "inspect", "--format", "{{.Size}}", IMAGE]).stdout.strip()
        mib = f"{int(size) / 2**20:.0f} MiB" if size.isdigit() else "size unknown"
        _log(f"{IMAGE} ready in {time.monotonic() - t0:.1f}s ({mib}; tarball {tarball.stat().st_size / 2**20:.0f} MiB)")
    return IMAGE


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tests.containerimage", description=__doc__.split("\n")[0])
    parser.add_argument("--rebuild", action="store_true", help="build the tarball again and re-import it")
    args = parser.parse_args(argv)
    try:
        ensure_dockerd()
        print(ensure_image(rebuild=args.rebuild))
    except (DockerUnavailable, ImageBuildError) as e:
        print(f"containerimage: {e}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
