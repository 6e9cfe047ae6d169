"""Another local user for security tests: uid 65534 (nobody), reached with setpriv as root, and a
shared folder like /tmp (world-writable, sticky) where that user can plant things.

Without root (or setpriv) the tests skip with the reason; under DISTLAUNCH_REQUIRE_SSHD=1 (CI)
they fail instead, as the other tests of real parts do.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

OTHER_UID = 65534
_SETPRIV = ["setpriv", f"--reuid={OTHER_UID}", f"--regid={OTHER_UID}", "--clear-groups"]


def require_other_user() -> None:
    """Skip (or, in CI, fail) where no second uid can be used."""
    why = None
    if os.geteuid() != 0:
        why = "needs root to act as a second user (uid 65534)"
    elif shutil.which("setpriv") is None:
        why = "needs setpriv (util-linux) to act as a second user"
    if why is not None:
        if os.environ.get("DISTLAUNCH_REQUIRE_SSHD") == "1":
            pytest.fail(f"DISTLAUNCH_REQUIRE_SSHD=1 but this test {why}")
        pytest.skip(why)


def as_other(script: str, **env: str) -> None:
    """Run the shell ``script`` as the other user (``env`` added to its environment)."""
    done = subprocess.run([*_SETPRIV, "/bin/sh", "-ec", script], capture_output=True, text=True, timeout=30,
                          env={"PATH": "/usr/bin:/bin", **env}, cwd="/")
    assert done.returncode == 0, f"as uid {OTHER_UID}: {script!r} failed: {done.stderr}"


@contextmanager
def shared_tmp() -> Iterator[Path]:
    """A fresh folder like /tmp: mode 1777, under /tmp (pytest's tmp_path is 0700: no one else
    could reach into it)."""
    folder = Path(tempfile.mkdtemp(prefix="dl-shared-", dir="/tmp"))
    try:
        os.chmod(folder, 0o1777)
        yield folder
    finally:
        shutil.rmtree(folder, ignore_errors=True)
