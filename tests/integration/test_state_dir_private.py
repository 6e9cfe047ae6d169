"""The state dir and the agent archive cached there are private whatever the umask (issue 59, item
3). Before, under umask 002 the state dir and ``cache/`` were 0775 and the archive 0664: a member
of the user's primary group replaced the cached agent, and the owner's next `up` and `check` ran
it (and would have uploaded it to every host). A kept archive is used only when it is a private
file of the user's holding exactly the sources it is named after."""

from __future__ import annotations

import io
import os
import stat
import subprocess
import sys
import zipfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from launcher.remote import agentpack
from tests.integration.jobtools import REPO
from tests.integration.otheruser import OTHER_UID, as_other, require_other_user, shared_tmp

_BUILD = "from launcher.remote.agentpack import build_agent_zipapp as b; import sys; sys.stdout.buffer.write(b())"


def _build(home: Path, umask: int = 0o002) -> bytes:
    """The agent archive as a fresh launcher process under ``umask`` builds (or takes from the cache) it."""
    done = subprocess.run([sys.executable, "-c", _BUILD], capture_output=True, timeout=60, cwd=REPO,
                          env={**os.environ, "DISTLAUNCH_HOME": str(home), "PYTHONPATH": str(REPO)},
                          preexec_fn=lambda: os.umask(umask) and None)
    assert done.returncode == 0, done.stderr
    return done.stdout


def _mode(path: Path) -> int:
    return stat.S_IMODE(os.lstat(path).st_mode)


@pytest.fixture
def shared() -> Iterator[Path]:
    require_other_user()
    with shared_tmp() as folder:
        yield folder


def test_the_state_dir_and_cache_are_private_under_umask_002(tmp_path: Path) -> None:
    home = tmp_path / "state" / "distlaunch"
    built = _build(home)
    kept = next((home / "cache").glob("agent-*.pyz"))
    assert (_mode(home), _mode(home / "cache"), _mode(kept)) == (0o700, 0o700, 0o600)
    assert kept.read_bytes() == built


def test_a_cached_agent_a_group_member_put_there_is_never_run(shared: Path) -> None:
    home = shared / "state"
    _build(home)
    kept = next((home / "cache").glob("agent-*.pyz"))
    # the state dir as a group shared with uid 65534 left it (0770, umask 002): they swap the archive
    for folder in (home, home / "cache"):
        os.chown(folder, -1, OTHER_UID)
        folder.chmod(0o770)
    as_other('printf "PK evil" > "$F.new" && chmod 666 "$F.new" && mv -f "$F.new" "$F"', F=str(kept))
    assert kept.stat().st_uid == OTHER_UID
    again = _build(home)
    assert b"evil" not in again and agentpack._holds(again, agentpack.agent_sources())
    assert kept.read_bytes() == again
    assert kept.stat().st_uid == os.geteuid() and _mode(kept) == 0o600 and _mode(home / "cache") == 0o700


def test_a_cached_archive_of_ours_that_others_may_write_or_that_differs_is_built_again(tmp_path: Path) -> None:
    home = tmp_path / "state"
    _build(home)
    kept = next((home / "cache").glob("agent-*.pyz"))
    kept.chmod(0o664)
    again = _build(home)
    assert agentpack._holds(again, agentpack.agent_sources()) and _mode(kept) == 0o600
    # whole, private and ours, but not the sources it is named after (an edited module inside)
    files = agentpack.with_bytecode(agentpack.agent_sources())
    files["launcher/agent/hostagent.py"] += b"\nimport os; os.system('touch /tmp/pwned')\n"
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w") as archive:
        for name in sorted(files):
            archive.writestr(name, files[name])
    kept.write_bytes(buffer.getvalue())
    kept.chmod(0o600)
    again = _build(home)
    assert b"pwned" not in again and agentpack._holds(again, agentpack.agent_sources())
