"""The record of what a run ran: the profile as read, the model it resolved to, code and versions.

    <run dir>/profile.toml     the profile's text as it was read when the run started
    <run dir>/resolved.json    the model after defaults, --set and ${env:...} (secrets masked),
                               the run's --set keys and command arguments, the git commit of the
                               profile's folder and whether it had changes, each host's versions

`attach` and every restart use this record, never the file on disk, which may have been edited
for the next experiment while this run goes on.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import os
import subprocess
from pathlib import Path
from typing import Any

from launcher.model import Overrides, Profile
from launcher.plan import MASK, is_secret
from launcher.privatedir import DamagedFile, read_trusted_json, read_trusted_text
from launcher.profile.overrides import mask_secrets
from launcher.profile.reader import load_profile
from launcher.rundir import private_opener
from launcher.runstate import RunState

PROFILE_FILE = "profile.toml"
RESOLVED_FILE = "resolved.json"


def write_record(run_dir: Path, profile: Profile, versions: dict[str, str]) -> None:
    """Write profile.toml and resolved.json into ``run_dir`` (both 0600)."""
    with open(run_dir / PROFILE_FILE, "w", encoding="utf-8", opener=private_opener) as fh:
        fh.write(profile.text)
    record = {
        "profile_path": str(profile.path),
        "overrides": {"set": list(profile.overrides.sets), "args": list(profile.overrides.args)},
        "profile": resolved_model(profile),
        "source": git_state(profile.sync.source_dir(profile.directory) if profile.sync else profile.directory),
        "versions": versions,
    }
    text = mask_secrets(json.dumps(record, indent=2, sort_keys=True, default=str), set(profile.secrets))
    with open(run_dir / RESOLVED_FILE, "w", encoding="utf-8", opener=private_opener) as fh:
        fh.write(text + "\n")


def resolved_model(profile: Profile) -> dict[str, Any]:
    """The typed profile as plain data, secret-looking env values masked."""
    data = dataclasses.asdict(profile)
    for name in ("text", "overrides", "secrets"):
        data.pop(name, None)
    return _mask_envs(data)


def _mask_envs(node: Any) -> Any:
    if isinstance(node, dict):
        return {k: ({n: MASK if is_secret(n) else v for n, v in val.items()}
                    if k == "env" and isinstance(val, dict) else _mask_envs(val))
                for k, val in node.items()}
    if isinstance(node, list | tuple):
        return [_mask_envs(v) for v in node]
    return node


def git_state(folder: Path) -> dict[str, Any] | None:
    """The commit and dirty state of the repository ``folder`` is in; None outside one."""
    def git(*args: str) -> str | None:
        try:
            done = subprocess.run(["git", "-C", str(folder), *args], capture_output=True, text=True, timeout=10)
        except (OSError, subprocess.TimeoutExpired):
            return None
        return done.stdout.strip() if done.returncode == 0 else None

    commit = git("rev-parse", "HEAD")
    if commit is None:
        return None
    status = git("status", "--porcelain", "--untracked-files=no")
    return {"commit": commit, "dirty": bool(status), "folder": str(folder)}


def record_placement(run_dir: Path, placement: dict[str, dict[str, Any]], moves: list[dict[str, Any]]) -> None:
    """Keep in resolved.json where each task runs now (``placement``: task -> host, address, port)
    and the moves that led there (lost or drained hosts), written whole (0600). A record that is
    not a regular file of the user's (a FIFO: never waited on), not UTF-8 JSON or not an object is
    UserError, one line, and left as it is."""
    path = run_dir / RESOLVED_FILE
    try:
        record = read_trusted_json(path, "the run's record", fix="restore it or remove it", runs=False)
    except FileNotFoundError:
        return
    if not isinstance(record, dict):
        raise DamagedFile(f"{path}: the run's record is not a JSON object; restore it or remove it",
                          "not a JSON object")
    record["placement"] = placement
    record["moves"] = moves
    tmp = path.with_name(path.name + ".tmp")
    with contextlib.suppress(FileNotFoundError):
        tmp.unlink()  # made new below: never a link or a FIFO left there
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
    with open(tmp, "w", encoding="utf-8", opener=lambda p, _f: os.open(p, flags, 0o600)) as fh:
        fh.write(json.dumps(record, indent=2, sort_keys=True) + "\n")
    tmp.replace(path)


def load_recorded_profile(run_dir: Path, state: RunState) -> Profile:
    """The profile a run started with; runs recorded before the record existed read the file."""
    path = Path(str(state.profile))
    try:  # its commands and python run again: only from a file of the user's no one else can write
        text = read_trusted_text(run_dir / PROFILE_FILE, "the run's recorded profile",
                                 fix="restore it, or stop the run with `distlaunch down`")
    except FileNotFoundError:
        return load_profile(path)
    return load_profile(path, Overrides(tuple(state.overrides_set), tuple(state.overrides_args)), text=text)
