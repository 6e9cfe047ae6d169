"""The local run directory: everything a run leaves on the launcher's machine.

    <run dir>/events.jsonl      every event (DESIGN.md section 5), one per line, flushed as it comes
    <run dir>/logs/<slug>.log   each task's output, stdout and stderr interleaved as they arrived
    <run dir>/state.json        hosts, tasks, pids, ports and stream offsets: enough for `down`,
                                `status` and `attach` from another terminal
    <run dir>/hosts/<host>/     the host run dir of local hosts (agents write here)

Run dirs are private to their user (0700, files 0600): task output often holds paths, dataset
names or a token printed by accident, and login nodes are shared.

This module makes a run dir and writes it (``RunDir``) and names its files. Finding a run from a
RUN argument and reading its events back is ``launcher/runlookup.py``; its state.json as a typed
record is ``launcher/runstate.py``.
"""

from __future__ import annotations

import contextlib
import errno
import json
import os
import secrets
import threading
import time
from collections import deque
from collections.abc import Callable
from pathlib import Path
from typing import Any

from launcher.errors import UserError
from launcher.events import Event, LogEvent
from launcher.paths import LATEST_LINK, private_state_dir, runs_root
from launcher.privatedir import (
    DamagedFile,
    check_ancestry,
    owner_name,
    read_trusted_json,
)

PRIVATE_DIR = 0o700
PRIVATE_FILE = 0o600
EVENTS_FILE = "events.jsonl"
STATE_FILE = "state.json"
DOWN_MARKER = "down-requested"
#: the supervisor's output (supervise/daemon.py); `up` and `attach` relay it to their client
SUPERVISOR_LOG = "supervisor.log"
#: held by the run's supervisor for its life (flock): never two supervisors of one run
SUPERVISOR_LOCK = "supervisor.lock"
#: a run `up` submitted to Slurm: the batch script it submitted, and that script's own output
BATCH_SCRIPT = "job.sbatch"
BATCH_OUTPUT = "batch.out"
#: what the [notify] command printed (supervise/notify.py)
NOTIFY_LOG = "notify.log"
#: written (0600, holding the run id) when distlaunch makes a run dir: cleanup removes only what
#: distlaunch wrote, and a run dir outside the state root only when it carries this marker
RUN_MARKER = ".distlaunch-run"
#: captures of every task's stacks (``distlaunch stacks``' JSON and text), one pair per capture
STACKS_DIR = "stacks"
#: lines kept in memory while the run dir cannot be written (disk full), written once it can
PENDING_LINES = 100_000
_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
_APPEND_FLAGS = os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC
_NEW_FILE_FLAGS = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC


def private_opener(path: str, flags: int) -> int:
    """``open(..., opener=private_opener)``: files this module creates are 0600."""
    return os.open(path, flags, PRIVATE_FILE)


def make_private_dir(path: Path) -> None:
    """Create ``path`` (and parents) and make it 0700 whatever the umask or an earlier mode was."""
    path.mkdir(parents=True, exist_ok=True, mode=PRIVATE_DIR)
    os.chmod(path, PRIVATE_DIR)


def new_run_id(profile_name: str) -> str:
    """``<profile name>-<time>-<4 hex>``, the name made to fit ``paths.RUN_ID_RULE``."""
    stamp = time.strftime("%Y%m%d-%H%M%S")
    safe = "".join(c if (c.isascii() and c.isalnum()) or c in "-_" else "-" for c in profile_name)
    safe = safe.lstrip("-_")[:40] or "run"
    return f"{safe}-{stamp}-{secrets.token_hex(2)}"


class RunDir:
    """Writes (and reads back) one run's files. Writers are thread-safe."""

    def __init__(self, path: Path, run_id: str) -> None:
        self.path = path
        self.run_id = run_id
        self._events_file = path / EVENTS_FILE
        self._lock = threading.Lock()
        self._fds: dict[str, int] = {}  # file name -> fd opened for appending
        self._dir_fd: int | None = None  # the run dir, held: its files are reached through it, never by path
        #: (file, text) writes that failed and wait for space, oldest first
        self._pending: deque[tuple[Path, str]] = deque()  # (file, one or more whole lines)
        self._pending_lines = 0
        self._dropped = 0
        self._failing = False
        self._state_pending: dict[str, Any] | None = None  # a state.json not yet written (disk full)
        self._state_failing = False
        #: told once when writing starts failing and once when it works again
        self.on_problem: Callable[[str], None] = lambda _msg: None

    @classmethod
    def create(cls, run_id: str, path: Path | None = None) -> RunDir:
        target = Path(os.path.abspath((path if path is not None else runs_root() / run_id).expanduser()))
        target = target.parent.resolve() / target.name  # a link at the last component is refused, not followed
        private_state_dir("runs")
        check_ancestry(target, "run dir")  # no other user can rename it away and put theirs in its place
        target.parent.mkdir(parents=True, exist_ok=True, mode=PRIVATE_DIR)  # a new root only: never chmod a user's dir
        _make_run_dir(target, run_id)
        make_private_dir(target / "logs")
        rd = cls(target, run_id)
        latest = runs_root() / LATEST_LINK
        if path is None or target.parent == runs_root().resolve():
            try:
                if latest.is_symlink() or latest.exists():
                    latest.unlink()
                latest.symlink_to(target)
            except OSError:
                pass
        else:
            _link_into_root(run_id, target)
        return rd

    @classmethod
    def open(cls, path: Path) -> RunDir:
        state = read_state(path)
        return cls(path, str(state["run_id"]))

    # -- writing ------------------------------------------------------------------------------

    def append(self, event: Event, line: str | None = None) -> None:
        """Record ``event``; ``line`` is its JSON text when it arrived as such (not encoded again).

        A write that fails (a full disk, say) never reaches the caller: the job goes on, the
        lines wait in memory (up to ``PENDING_LINES``) and are written in order once it works.
        """
        self.append_many([(event, line)])

    def append_many(self, batch: list[tuple[Event, str | None]]) -> None:
        """Record a run of events (each with its JSON text or None) with one write per file."""
        if not batch:
            return
        events_text: list[str] = []
        logs: dict[Path, list[str]] = {}
        for event, line in batch:
            events_text.append(line if line is not None else event.to_json())
            if isinstance(event, LogEvent) and event.task:
                logs.setdefault(self.log_path(event.task), []).append(event.line)
        writes = [(self._events_file, "\n".join(events_text) + "\n")]
        writes.extend((path, "\n".join(lines) + "\n") for path, lines in logs.items())
        with self._lock:
            if self._pending:
                self._hold(writes)
                self._trim_pending()
                self._flush_pending()
                return
            for i, (target, text) in enumerate(writes):
                try:
                    self._write(target, text)
                except OSError as exc:
                    self._hold(writes[i:])
                    self._failed(target, exc)
                    return

    def _write(self, target: Path, text: str) -> None:
        """Append ``text`` whole or not at all: a failed write is cut back off, so a full disk
        never leaves half a line for the next one to be glued to."""
        name = os.path.relpath(target, self.path)
        fd = self._fds.get(name)
        if fd is None:
            fd = self._fds[name] = os.open(name, _APPEND_FLAGS, PRIVATE_FILE, dir_fd=self._held())
        data = text.encode("utf-8")
        written = 0
        try:
            while written < len(data):
                written += os.write(fd, data[written:])
        except OSError:
            if written:
                with contextlib.suppress(OSError):
                    os.ftruncate(fd, os.fstat(fd).st_size - written)
            raise

    def _held(self) -> int:
        """The run dir as a descriptor, opened once (not through a link) and kept: a folder swapped
        in at its path later is never written to."""
        if self._dir_fd is None:
            self._dir_fd = os.open(self.path, _DIR_FLAGS)
        return self._dir_fd

    def _flush_pending(self) -> None:
        while self._pending:
            target, text = self._pending[0]
            try:
                self._write(target, text)
            except OSError as exc:
                self._failed(target, exc)
                return
            self._pending.popleft()
            self._pending_lines -= text.count("\n")
        if self._failing:
            self._failing = False
            lost = f"; {self._dropped} older lines were dropped" if self._dropped else ""
            self.on_problem(f"run dir {self.path} is writable again; the held events are written{lost}")

    def _hold(self, writes: list[tuple[Path, str]]) -> None:
        self._pending.extend(writes)
        self._pending_lines += sum(text.count("\n") for _, text in writes)

    def _trim_pending(self) -> None:
        while self._pending_lines > PENDING_LINES and len(self._pending) > 1:
            _, text = self._pending.popleft()
            lines = text.count("\n")
            self._pending_lines -= lines
            self._dropped += lines

    def _failed(self, target: Path, exc: OSError) -> None:
        if self._failing:
            return
        self._failing = True
        what = "the disk is full" if exc.errno in (errno.ENOSPC, errno.EDQUOT) else exc.strerror or str(exc)
        self.on_problem(f"cannot write {target}: {what}; the job goes on and events wait in memory "
                        f"(free space under {self.path.parent})")

    def held_event_lines(self) -> list[str]:
        """The events.jsonl lines a failing disk holds in memory, oldest first (not in the file)."""
        with self._lock:
            return [line for path, text in self._pending if path == self._events_file
                    for line in text.splitlines() if line]

    def events_size(self) -> int:
        """The bytes of events.jsonl written so far (a client's history ends there)."""
        with self._lock:
            try:
                return self._events_file.stat().st_size
            except OSError:
                return 0

    def write_state(self, state: dict[str, Any]) -> None:
        """Replace state.json. A write that fails (a full disk) never reaches the caller: the
        last state is kept and written by the next call or by ``close``; the old file stays whole."""
        with self._lock:
            self._state_pending = state
            self._write_state_held()

    def _write_state_held(self) -> None:
        state = self._state_pending
        if state is None:
            return
        tmp = STATE_FILE + ".tmp"
        try:
            folder = self._held()
            with contextlib.suppress(FileNotFoundError):
                os.unlink(tmp, dir_fd=folder)  # made new below: never a link or file planted there
            fd = os.open(tmp, _NEW_FILE_FLAGS, PRIVATE_FILE, dir_fd=folder)
            with os.fdopen(fd, "w", encoding="utf-8") as fh:
                fh.write(json.dumps(state, indent=2, sort_keys=True))
            os.replace(tmp, STATE_FILE, src_dir_fd=folder, dst_dir_fd=folder)
        except OSError as exc:
            with contextlib.suppress(OSError):
                if self._dir_fd is not None:
                    os.unlink(tmp, dir_fd=self._dir_fd)
            if not self._state_failing:
                self._state_failing = True
                what = "the disk is full" if exc.errno in (errno.ENOSPC, errno.EDQUOT) else exc.strerror or str(exc)
                self.on_problem(f"cannot write {self.path / STATE_FILE}: {what}; it keeps the last state written "
                                "and is written again once it can")
            return
        self._state_pending = None
        if self._state_failing:
            self._state_failing = False
            self.on_problem(f"{self.path / STATE_FILE} is written again")

    def close(self) -> None:
        with self._lock:
            self._flush_pending()
            self._write_state_held()
            for fd in self._fds.values():
                with contextlib.suppress(OSError):
                    os.close(fd)
            self._fds.clear()
            if self._dir_fd is not None:
                with contextlib.suppress(OSError):
                    os.close(self._dir_fd)
                self._dir_fd = None

    def write_stacks(self, captured_at: float, as_json: str, as_text: str) -> str:
        """One capture of every task's stacks as ``stacks/<UTC time>.json`` and ``.txt`` (0600 files
        in a 0700 dir); the JSON file's path relative to the run dir."""
        stamp = time.strftime("%Y%m%dT%H%M%S", time.gmtime(captured_at)) + f".{int(captured_at * 1000) % 1000:03d}Z"
        folder = self.path / STACKS_DIR
        make_private_dir(folder)
        for suffix, text in ((".json", as_json), (".txt", as_text)):
            with open(folder / (stamp + suffix), "w", encoding="utf-8", opener=private_opener) as fh:
                fh.write(text)
        return f"{STACKS_DIR}/{stamp}.json"

    @property
    def events_path(self) -> Path:
        return self._events_file

    def log_path(self, task_id: str) -> Path:
        return self.path / "logs" / f"{task_id.replace(':', '-')}.log"


def _make_run_dir(target: Path, run_id: str) -> None:
    """Make ``target`` (new, or an empty dir of the user's) the run dir: 0700, with RUN_MARKER."""
    with contextlib.suppress(FileExistsError):
        os.mkdir(target, PRIVATE_DIR)
    try:
        fd = os.open(target, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC)
    except OSError as exc:
        why = "a symbolic link" if exc.errno == errno.ELOOP else exc.strerror
        raise UserError(f"{target}: cannot be a run dir ({why}); give a new or empty directory") from None
    try:
        st = os.fstat(fd)
        if st.st_uid != os.geteuid():
            raise UserError(f"{target}: owned by {owner_name(st.st_uid)}, not by you; give a new or empty "
                            "directory of yours as the run dir")
        os.fchmod(fd, PRIVATE_DIR)
        marker = os.open(RUN_MARKER, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW | os.O_CLOEXEC,
                         PRIVATE_FILE, dir_fd=fd)
        with os.fdopen(marker, "w", encoding="utf-8") as fh:
            fh.write(run_id + "\n")
    finally:
        os.close(fd)


def _link_into_root(run_id: str, target: Path) -> None:
    """A run kept outside the state root (``--run-dir``) gets a link there named by its id, so that
    ``distlaunch runs`` lists it and its id finds it."""
    link = runs_root() / run_id
    try:
        private_state_dir("runs")
        if not link.exists() and not link.is_symlink():
            link.symlink_to(target)
    except OSError:
        pass


def unlink_from_root(run_id: str, target: Path) -> None:
    """Remove the link ``_link_into_root`` made for ``target`` (a run removed from elsewhere)."""
    link = runs_root() / run_id
    with contextlib.suppress(OSError):
        if link.is_symlink() and Path(os.readlink(link)).resolve() == target.resolve():
            link.unlink()


def read_state(path: Path) -> dict[str, Any]:
    """A run's state.json, read only from a regular file of the user's that no one else can write
    (it names the ``python`` that `down`, `attach` and `stacks` run); one that is not UTF-8 JSON
    with a run id is one line saying so and what to do."""
    fix = (f"distlaunch cannot use this run: restore the file, or remove the run dir (`rm -r {path}`) once "
           "none of its tasks runs")
    try:
        data = read_trusted_json(path / STATE_FILE, "the run state")
    except FileNotFoundError:
        raise UserError(f"{path}: not a distlaunch run directory (no {STATE_FILE})") from None
    except DamagedFile as exc:
        raise UserError(f"{path / STATE_FILE}: unreadable run state ({exc.reason}); {fix}") from None
    if not isinstance(data, dict) or not isinstance(data.get("run_id"), str):
        raise UserError(f"{path / STATE_FILE}: unreadable run state (no run_id): not a distlaunch run's, "
                        f"or damaged; {fix}")
    return data
