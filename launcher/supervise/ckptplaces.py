"""Where a checkpoint is read, and the shell commands that move it between hosts.

Who saves what a group restores (``source_of``, ``saves``, ``restores``, ``kept_off_host``); the
directory a task reads on another host (``target_directory``: the same place under the same
root) or in a folder per task (``task_directory``); and the commands the keeper runs on the hosts
(``pull_command``, ``push_command``, ``park_command``, ``exists_command``), each a POSIX shell
line that leaves a checkpoint whole or as it was. ``launcher/supervise/checkpoints.py`` decides
with them.
"""

from __future__ import annotations

import re
import shlex
import time
from collections.abc import Iterable, Sequence

from launcher.remote.session import HostSession
from launcher.supervise.ckptbook import STATE_FILE, Checkpoint, fixed_names
from launcher.supervise.policy import deciding_task


def source_of(group: Sequence[str], tasks: Iterable[str]) -> str:
    """The task whose checkpoint everyone in ``group`` resumes from: the one that saves, chief:0
    (PSS, MWMS with a chief), else the first worker (MWMS, BackupAndRestore's chief; after a
    shrink the first worker left), else a lone task's own."""
    decider = deciding_task(tasks)
    if decider is not None and (decider in group or len(group) > 1):
        return decider
    return group[0]


def kept_off_host(task: str, tasks: Iterable[str], strategy: str) -> bool:
    """Are ``task``'s checkpoints the ones a group resumes from (so worth a copy off their host)?
    The saver's (chief:0, else the first worker); under strategy custom every task's (each restarts
    alone)."""
    return strategy == "custom" or task == deciding_task(tasks)


def saves(task: str, tasks: Iterable[str], strategy: str) -> bool:
    """Does ``task`` save the checkpoints its group restores from? The deciding task (chief:0,
    else the first worker); under strategy custom, every worker and chief (each restarts alone)."""
    if strategy == "custom":
        return task.split(":")[0] in ("chief", "worker")
    return task == deciding_task(tasks)


def restores(task: str, source: str, strategy: str) -> bool:
    """Does ``task`` read ``source``'s checkpoint when it starts? Itself; under MultiWorkerMirrored
    every worker and the chief (one model, replicated); under ParameterServer only the chief
    (workers and ps get their variables from it)."""
    if task == source:
        return True
    return strategy == "multi_worker_mirrored" and task.split(":")[0] in ("chief", "worker")


def target_directory(directory: str, source: HostSession, target: HostSession) -> str:
    """``directory`` of ``source`` as ``target`` names it: the same place under the same root (the
    outputs dir, a path a host ``env`` variable names on both hosts) where ``directory`` is under
    one of the source's roots, else the same path."""
    pairs = [(source.outputs_dir, target.outputs_dir)]
    pairs += [(v, target.config.env.get(k, "")) for k, v in source.config.env.items()]
    roots = sorted({(a.rstrip("/"), b.rstrip("/")) for a, b in pairs
                    if a.startswith("/") and b.startswith("/") and a.rstrip("/") and b.rstrip("/")},
                   key=lambda p: -len(p[0]))
    for a, b in roots:
        if _under(directory, a):
            return b + directory[len(a):]
    return directory


def _under(directory: str, root: str) -> bool:
    return directory == root or directory.startswith(root + "/")


def task_directory(directory: str, source: str, member: str, root: str = "") -> str:
    """``directory``, which ``source`` wrote, as ``member`` names its own where the path below
    ``root`` (the host's outputs dir, or a path its ``env`` names) names the source task (a folder
    per task on shared storage: ``backup-worker-0``, ``worker_0``, ``worker0``): the member's role
    and index in their place; else the same path (every member reads one folder, as each host
    names it)."""
    role, _, index = source.partition(":")
    their_role, _, their_index = member.partition(":")
    if source == member or not index.isdigit() or not their_index.isdigit():
        return directory
    root = root.rstrip("/")
    if root and directory == root:
        return directory
    root = root if root and _under(directory, root) else ""
    pattern = re.compile(rf"(?<![A-Za-z0-9]){re.escape(role)}([-_:]?){index}(?![0-9])")
    return root + pattern.sub(lambda m: f"{their_role}{m.group(1)}{their_index}", directory[len(root):])


def root_of(directory: str, host: HostSession) -> str:
    """The longest of ``host``'s roots (its outputs dir, the absolute paths its ``env`` names) that
    ``directory`` is under; "" where none."""
    roots = [r.rstrip("/") for r in (host.outputs_dir, *host.config.env.values()) if r.startswith("/")]
    return max((r for r in roots if r and _under(directory, r)), key=len, default="")


def state_text(cp: Checkpoint) -> str | None:
    """The ``checkpoint`` state file naming ``cp`` (relative, as CheckpointManager writes it), or
    None where ``cp`` has no TensorFlow index file (its own state file, if any, is copied as is)."""
    prefixes = sorted(f[: -len(".index")] for f in cp.files if f.endswith(".index"))
    if not prefixes:
        return None
    prefix = prefixes[-1]
    return f'model_checkpoint_path: "{prefix}"\nall_model_checkpoint_paths: "{prefix}"\n'


#: what the pull says on stderr when its tar failed (the pipe's status is base64's)
TAR_FAILED = "distlaunch-tar-failed"


def pull_command(cp: Checkpoint) -> str:
    names = " ".join(shlex.quote(f) for f in cp.files)
    # at the lowest CPU priority: the host's tasks train meanwhile. A pipe's status is base64's, and
    # sh has no pipefail: a tar that failed (a file gone, or rewritten as it was read) says so on stderr
    return (f"cd {shlex.quote(cp.directory)} && {{ nice -n 19 tar -cf - -- {names} || echo {TAR_FAILED} >&2; }}"
            " | nice -n 19 base64")


def push_command(directory: str, files: Sequence[str], state: str | None) -> str:
    """Extract the tar on stdin into a temp dir inside ``directory``, move the files in, and write
    the ``checkpoint`` state file last (a rename: the moment the new checkpoint counts)."""
    d = shlex.quote(directory)
    data = [f for f in files if f != STATE_FILE]
    moves = " && ".join(f'mkdir -p "$(dirname {d}/{q})" && mv -f "$t"/{q} {d}/{q}'
                        for q in map(shlex.quote, data)) or "true"
    if state is not None:
        last = f'printf %s {shlex.quote(state)} > "$t/.state" && mv -f "$t/.state" {d}/{STATE_FILE}'
    elif STATE_FILE in files:
        last = f'mv -f "$t"/{STATE_FILE} {d}/{STATE_FILE}'
    else:
        last = "true"
    extract = 'tar -xf - -C "$t"' if files else "true"  # no files: only the state file
    # a push cut short left its temp dir: removed once old, never another push's under way
    return (f"set -e; mkdir -p {d}; find {d} -maxdepth 1 -name '.distlaunch-in.*' -mmin +10 -exec rm -rf {{}} +; "
            f"t=$(mktemp -d {d}/.distlaunch-in.XXXXXX); "
            f"trap 'rm -rf \"$t\"' EXIT; {extract}; {moves}; {last}")


def park_command(directory: str, files: Sequence[str] = (STATE_FILE,)) -> str:
    """Rename ``files`` in ``directory`` (where there) to ``NAME.distlaunch-parked-<time>``: the
    ``checkpoint`` state file, so TensorFlow finds none; a fixed-name save's files, so Keras does not."""
    d = shlex.quote(directory)
    stamp = int(time.time())
    return "; ".join(f"if [ -f {d}/{q} ]; then mv -f {d}/{q} {d}/{q}.distlaunch-parked-{stamp}; fi"
                     for q in map(shlex.quote, files)) + "; true"


def exists_command(cp: Checkpoint, directory: str | None = None) -> str:
    """Exit 0 where every file of ``cp`` is in ``directory`` (default: where it was written). Files
    of fixed names (a Keras backup, a ``.weights.h5``: no state file among them) are rewritten in
    place by the next save: they must also still have the size announced, or they are a save cut
    short (a task stopped as it wrote), which a restart would read and fail on again and again."""
    where = cp.directory if directory is None else directory
    paths = [shlex.quote(where + "/" + f) for f in cp.files]
    command = " && ".join(f"test -f {p}" for p in paths) or "false"
    if paths and fixed_names(cp):
        command += (f" && s=0 && for n in $(stat -c %s -- {' '.join(paths)}); do s=$((s + n)); done"
                    f" && [ \"$s\" = {int(cp.nbytes or 0)} ]")
    return command
