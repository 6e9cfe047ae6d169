"""Issue 49, item 5, the folder itself: ``{outputs}/profile/<run id>/<UTC>`` is made level by level
by directory descriptor; a symbolic link at any level, a folder of another user's, or outputs that
others can write are refused in one line, and nothing is made where a link points."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from launcher.privatedir import UnsafePath
from launcher.tfprofiler.place import make_capture_folder, write_new_file

NAMES = ["profile", "r1", "20260131T120000Z"]


def test_each_level_is_made_private(tmp_path: Path) -> None:
    outputs = tmp_path / "outputs"
    folder = make_capture_folder(outputs, NAMES)
    assert folder == outputs.joinpath(*NAMES)
    for level in (outputs / "profile", outputs / "profile" / "r1", folder):
        assert level.is_dir() and not level.is_symlink()
        assert level.stat().st_mode & 0o077 == 0
    assert make_capture_folder(outputs, NAMES) == folder  # a second capture in the same second: the same folder


@pytest.mark.parametrize("level", [1, 2, 3])
def test_a_link_at_any_level_is_refused_and_never_followed(tmp_path: Path, level: int) -> None:
    outputs = tmp_path / "outputs"
    outputs.mkdir()
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    link = outputs.joinpath(*NAMES[:level])
    link.parent.mkdir(parents=True, exist_ok=True)
    os.symlink(elsewhere, link)
    with pytest.raises(UnsafePath, match=f"^{link}: a symbolic link; ") as caught:
        make_capture_folder(outputs, NAMES)
    assert "\n" not in str(caught.value)
    assert list(elsewhere.iterdir()) == []


def test_outputs_others_may_write_are_refused(tmp_path: Path) -> None:
    outputs = tmp_path / "shared"
    outputs.mkdir()
    outputs.chmod(0o1777)
    with pytest.raises(UnsafePath, match=r"writable by group and others \(mode 1777\).*chmod go-w"):
        make_capture_folder(outputs, NAMES)
    assert list(outputs.iterdir()) == []


def test_a_level_another_user_owns_is_refused(tmp_path: Path) -> None:
    if os.geteuid() != 0:
        pytest.skip("needs root to give a folder to another user")
    outputs = tmp_path / "outputs"
    (outputs / "profile").mkdir(parents=True)
    os.chown(outputs / "profile", 65534, 65534)
    with pytest.raises(UnsafePath, match=r"owned by .*uid 65534.*not by you"):
        make_capture_folder(outputs, NAMES)
    assert list((outputs / "profile").iterdir()) == []


def test_a_run_id_is_one_level(tmp_path: Path) -> None:
    for bad in ("../x", "..", "a/b", ""):
        with pytest.raises(UnsafePath):
            make_capture_folder(tmp_path / "outputs", ["profile", bad, "t"])
    assert not (tmp_path / "x").exists()


def test_a_new_file_never_goes_over_one_or_through_a_link(tmp_path: Path) -> None:
    folder = make_capture_folder(tmp_path / "outputs", NAMES)
    assert write_new_file(folder, ["plugins", "profile", "1", "a.xplane.pb"], b"first")
    assert not write_new_file(folder, ["plugins", "profile", "1", "a.xplane.pb"], b"second")
    assert (folder / "plugins" / "profile" / "1" / "a.xplane.pb").read_bytes() == b"first"
    os.symlink(tmp_path / "victim", folder / "plugins" / "profile" / "1" / "b.xplane.pb")
    assert not write_new_file(folder, ["plugins", "profile", "1", "b.xplane.pb"], b"through")
    assert not (tmp_path / "victim").exists()


def test_group_write_is_refused_unless_the_group_is_the_users_own(tmp_path: Path) -> None:
    """umask 002 under a user private group (Debian's and Red Hat's default) gives 0775 outputs: the
    group is the user alone, so they are kept; a group with other members, or another group, is not."""
    import grp
    import pwd

    from launcher.privatedir import private_group

    me = pwd.getpwuid(os.geteuid())
    own = grp.getgrgid(me.pw_gid)
    outputs = tmp_path / "outputs"
    outputs.mkdir()
    outputs.chmod(0o775)
    if own.gr_name == me.pw_name and set(own.gr_mem) <= {me.pw_name}:
        assert private_group(me.pw_gid)
        assert make_capture_folder(outputs, NAMES) == outputs.joinpath(*NAMES)
    if os.geteuid() != 0:
        return
    shared = next(g for g in grp.getgrall() if g.gr_gid != me.pw_gid)
    assert not private_group(shared.gr_gid)
    other = tmp_path / "other-group"
    other.mkdir()
    os.chown(other, 0, shared.gr_gid)
    other.chmod(0o775)
    with pytest.raises(UnsafePath, match=r"writable by group \(mode 0775\).*chmod go-w"):
        make_capture_folder(other, NAMES)
