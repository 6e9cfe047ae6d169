"""Where a new run dir may go (``up --run-dir``): a new folder, or an empty one of the user's that
is not a symlink, whose every folder above is the user's or root's and no one else's to write
(launcher/privatedir.py: ``check_ancestry``). distlaunch makes it private and, on `prune`,
removes it: never a folder holding other files, never one another user could swap away."""

from __future__ import annotations

import os
import stat
from pathlib import Path

from launcher.errors import UserError
from launcher.privatedir import check_ancestry, owner_name


def check_new_run_dir(path: Path) -> None:
    """``up --run-dir``: a new directory, or an empty one of the user's that is not a symlink.
    distlaunch makes it private and, on `prune`, removes it: never a folder holding other files."""
    try:
        check_ancestry(os.path.abspath(path), "run dir")
    except UserError as exc:
        raise UserError(f"--run-dir {exc}") from None
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        return
    fix = "give a new or empty directory (distlaunch makes it 0700 and `prune` removes it)"
    if stat.S_ISLNK(st.st_mode):
        raise UserError(f"--run-dir {path}: a symbolic link (to {os.readlink(path)}); {fix}, not a link")
    if not stat.S_ISDIR(st.st_mode):
        raise UserError(f"--run-dir {path}: not a directory; {fix}")
    if st.st_uid != os.geteuid():
        raise UserError(f"--run-dir {path}: owned by {owner_name(st.st_uid)}, not by you; {fix} of yours")
    try:
        entries = sorted(os.listdir(path))
    except OSError as exc:
        raise UserError(f"--run-dir {path}: cannot be read ({exc.strerror}); {fix}") from None
    if entries:
        raise UserError(f"--run-dir {path}: not empty ({len(entries)} entries, e.g. {entries[0]!r}); {fix}, "
                        "e.g. a new folder under it")
