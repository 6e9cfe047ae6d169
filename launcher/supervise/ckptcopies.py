"""Copies of checkpoints off their host: to the launcher's machine, and on to the spares.

Where a source task's checkpoints are per host (``CheckpointKeeper.is_shared`` says), each new one
is copied, on a thread of its own, as it is written:

- to the launcher's run dir, ``checkpoints/<task>/<step>/`` (``extract_complete``: a temp dir and
  a rename), the newest ``checkpoint_copies_kept`` kept;
- then from that copy to each spare that answers and does not see the source's directory, into the
  directory the task would read there (``push_command``: a temp dir inside it, the files moved in,
  the ``checkpoint`` state file last), so a task moved there resumes from its own disk even when
  the launcher's machine is slow to reach or gone. The spare keeps the newest
  ``checkpoint_copies_kept`` of them too (older files removed).

A copy is complete or absent: a link that drops mid-way or a disk that fills leaves the temp dir,
which is removed (and, on a spare, removed again before the next push), never a half checkpoint
that a state file names. Each failure is one line and the job goes on; the next checkpoint is
copied whole again (a copy never resumes a half transfer: it is redone). Only the newest queued
checkpoint of a task is copied: a slow link skips the ones it could not keep up with.

``checkpoint_copy_bandwidth`` bounds the average rate: after each transfer of ``n`` bytes that
took ``t`` seconds, the copier waits ``n / bandwidth - t`` before the next one, so it never takes
more than that share of the links the training uses too.
"""

from __future__ import annotations

import contextlib
import io
import os
import queue
import secrets
import shlex
import shutil
import tarfile
import threading
import time
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path
from typing import Any, Protocol

from launcher.profile.sizes import show_size
from launcher.supervise.ckptbook import Checkpoint, CheckpointBook, fixed_names

#: the folder of the run dir the copies live in
COPIES_DIR = "checkpoints"
#: how a copy on the launcher's machine is named in a ``checkpoint`` event's ``copies``
LAUNCHER = "launcher"
#: the largest checkpoint copied through the supervisor (it holds a copy in memory while it moves)
COPY_LIMIT_BYTES = 1 << 30


def copy_name(cp: Checkpoint) -> str:
    """The folder of ``cp``'s copy under the task's: its step, else its epoch, else when it was told."""
    if cp.step is not None:
        return str(cp.step)
    return f"epoch-{cp.epoch}" if cp.epoch is not None else f"at-{cp.ts:.3f}"


def tar_files(root: Path, files: Iterable[str]) -> bytes:
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as tar:
        for name in files:
            tar.add(str(root / name), arcname=name, recursive=False)
    return buf.getvalue()


def extract_complete(data: bytes, files: Sequence[str], dest: Path) -> None:
    """Extract the tar ``data`` holding exactly ``files`` into ``dest``, complete or not at all:
    into a temp dir beside it, renamed into place once every file is there. Raises ValueError
    (nothing left behind) when the archive lacks a file or holds anything else."""
    dest.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    tmp = dest.parent / f".{dest.name}.tmp-{secrets.token_hex(4)}"
    try:
        tmp.mkdir(mode=0o700)
        wanted = set(files)
        seen: set[str] = set()
        with tarfile.open(fileobj=io.BytesIO(data), mode="r:") as tar:
            for member in tar:
                name = os.path.normpath(member.name)
                if name not in wanted or not member.isfile() or name.startswith(("/", "..")):
                    raise ValueError(f"unexpected entry {member.name!r} in a checkpoint copy")
                src = tar.extractfile(member)
                if src is None:
                    raise ValueError(f"unreadable entry {member.name!r}")
                out = tmp / name
                out.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
                with open(out, "wb") as f:
                    shutil.copyfileobj(src, f)
                    f.flush()
                    os.fsync(f.fileno())
                seen.add(name)
        missing = wanted - seen
        if missing:
            raise ValueError(f"the copy lacks {', '.join(sorted(missing))}")
        if dest.exists():
            shutil.rmtree(dest)
        os.rename(tmp, dest)
    finally:
        if tmp.exists():
            shutil.rmtree(tmp, ignore_errors=True)


def remove_command(directory: str, files: Sequence[str], keep: Sequence[str]) -> str:
    """Remove ``files`` from ``directory`` except those in ``keep`` (files the newer ones share)."""
    gone = [f for f in files if f not in set(keep)]
    if not gone:
        return "true"
    return f"cd {shlex.quote(directory)} && rm -f -- " + " ".join(shlex.quote(f) for f in gone)


#: the share of the time the copier may spend copying (``checkpoint_copy_percent``'s default):
#: after a checkpoint's copies took t seconds (the pull and the pushes), it rests (1 / share - 1) t
#: before the next, so copies cost the training hosts (their sshd, tar, a core of the launcher's
#: machine) at most this share of the time however often checkpoints come; a checkpoint saved
#: meanwhile waits, and only the newest is copied then
COPY_TIME_SHARE = 0.05
#: the longest rest: a copy that took minutes (a slow link) does not hold the next one for hours
REST_MAX_SECONDS = 60.0


class Pacer:
    """The average rate cap: ``pause_after`` a transfer says how long to pause before the next;
    and the copier's share of the time: ``rest_after`` a checkpoint's copies."""

    def __init__(self, bytes_per_s: int, sleep: Callable[[float], None] = time.sleep,
                 share: float = COPY_TIME_SHARE) -> None:
        self.bytes_per_s = bytes_per_s
        self.sleep = sleep
        self.share = share

    def rest_after(self, busy: float) -> float:
        """Rest so that ``busy`` seconds of copying stay ``share`` of the time; the rest."""
        rest = min(busy * (1 / self.share - 1), REST_MAX_SECONDS) if 0 < self.share < 1 else 0.0
        if rest > 0:
            self.sleep(rest)
        return rest

    def pause_after(self, nbytes: int, seconds: float) -> float:
        """Pause so that ``nbytes`` in ``seconds`` plus the pause stays under the cap; the pause."""
        if self.bytes_per_s <= 0:
            return 0.0
        pause = max(0.0, nbytes / self.bytes_per_s - seconds)
        if pause > 0:
            self.sleep(pause)
        return pause


class CopySource(Protocol):
    """What the copier uses of the keeper (``launcher/supervise/checkpoints.py``'s ``CheckpointKeeper``)."""

    sup: Any
    book: CheckpointBook
    lock: threading.Lock
    #: copies a restart is reading from: never pruned meanwhile (under ``lock``)
    pinned: set[str]

    def is_shared(self, cp: Checkpoint) -> bool: ...
    def sees(self, host: str, directory: str, other: str) -> bool: ...
    def pull(self, cp: Checkpoint) -> bytes: ...
    def push(self, cp: Checkpoint, host: str, directory: str, from_host: bool) -> None: ...
    def where(self, cp: Checkpoint, host: str) -> str: ...
    def restate(self, cp: Checkpoint, copies: list[str], only_newest: bool) -> None: ...


class CheckpointCopier:
    """The copy thread of one keeper: a queue of checkpoints, copied to the launcher, then to spares."""

    def __init__(self, keeper: CopySource, kept: int, bytes_per_s: int,
                 sleep: Callable[[float], None] | None = None, share: float = COPY_TIME_SHARE) -> None:
        self.keeper = keeper
        self.kept = max(1, kept)
        keeper.book.keep = max(keeper.book.keep, self.kept + 1)  # every kept copy's record stays to prune it
        #: set by ``hurry``: a rest (the time share) ends at once, the copy that waited goes now
        self._wake = threading.Event()
        self.pacer = Pacer(bytes_per_s, sleep if sleep is not None else self._rest, share)
        self._queue: queue.Queue[Checkpoint | None] = queue.Queue()
        #: checkpoints offered and not yet copied or passed over (``wait_copied`` waits on it)
        self._pending: list[Checkpoint] = []
        self._settled = threading.Condition()
        self._thread: threading.Thread | None = None
        self._copied_once = self._failed_last = self._said_too_big = False
        #: (spare, task) -> checkpoints put on that spare, newest last
        self.on_spares: dict[tuple[str, str], list[Checkpoint]] = {}
        self._spare_failed: set[str] = set()
        #: (host, directory, spare) -> the spare sees that directory's files (a disk they share)
        self._sees: dict[tuple[str, str, str], bool] = {}

    def offer(self, cp: Checkpoint, urgent: bool = False) -> None:
        """Copy ``cp`` when the copier comes to it; ``urgent`` (its host is leaving the job): now,
        without the rest the time share would make it wait."""
        if self._thread is None:
            self._thread = threading.Thread(target=self._loop, name="checkpoint-copies", daemon=True)
            self._thread.start()
        with self._settled:
            self._pending.append(cp)
        self._queue.put(cp)
        if urgent:
            self.hurry()

    def hurry(self) -> None:
        """End the copier's rest now (a checkpoint that must not wait for it)."""
        self._wake.set()

    def wait_copied(self, cp: Checkpoint, timeout: float) -> bool:
        """Wait (at most ``timeout`` s) until ``cp`` is copied, or the copier is done with it
        otherwise (failed, passed over for a newer one); whether it has a copy."""
        deadline = time.monotonic() + timeout
        with self._settled:
            while cp.copy is None and any(c is cp for c in self._pending):
                left = deadline - time.monotonic()
                if left <= 0:
                    break
                self._settled.wait(left)
        return cp.copy is not None

    def is_pending(self, cp: Checkpoint) -> bool:
        """Offered, and neither copied nor done with yet."""
        with self._settled:
            return cp.copy is None and any(c is cp for c in self._pending)

    def _rest(self, seconds: float) -> None:
        self._wake.wait(seconds)
        self._wake.clear()

    def _settle(self, cp: Checkpoint) -> None:
        with self._settled:
            self._pending = [c for c in self._pending if c is not cp]
            self._settled.notify_all()

    def close(self) -> None:
        if self._thread is not None:
            self._queue.put(None)

    def _loop(self) -> None:
        while True:
            cp = self._queue.get()
            if cp is None:
                return
            while not self._queue.empty():  # only the newest matters: older ones queued are skipped
                later = self._queue.get()
                if later is None:
                    return
                if later.task == cp.task:
                    self._settle(cp)
                    cp = later
                else:
                    self._copy_guarded(cp)
                    cp = later
            self._copy_guarded(cp)

    def _copy_guarded(self, cp: Checkpoint) -> None:
        """One copy; whatever it meets (a host cut mid-way), the thread goes on with the next one."""
        try:
            self.copy_one(cp)
        except Exception as exc:
            self.keeper.sup.notice(f"checkpoint {cp.label} of {cp.task} not copied on: {exc}; "
                                   "the next checkpoint is copied again")
        finally:
            self._settle(cp)

    # -- to the launcher --------------------------------------------------------------------------

    def copy_one(self, cp: Checkpoint) -> None:
        """Copy ``cp`` to the launcher's run dir, then on to the spares; one line per failure."""
        keeper, sup = self.keeper, self.keeper.sup
        with keeper.lock:
            if cp.copy is not None:  # copied already (offered again: a link that came back, a save told twice)
                return
        try:
            if keeper.is_shared(cp):
                return
            if cp.nbytes is not None and cp.nbytes > COPY_LIMIT_BYTES:
                if not self._said_too_big:
                    self._said_too_big = True
                    sup.notice(f"checkpoint {cp.label} of {cp.task} is {cp.nbytes} bytes, over the "
                               f"{COPY_LIMIT_BYTES >> 20} MiB distlaunch copies off a host: not copied; a "
                               "restart elsewhere cannot resume from it (put outputs on shared storage)")
                return
            began = time.monotonic()
            data = keeper.pull(cp)
            slug = cp.task.replace(":", "-")
            dest = sup.rundir.path / COPIES_DIR / slug / copy_name(cp)
            extract_complete(data, cp.files, dest)
            seconds = time.monotonic() - began
            if fixed_names(cp) and sum((dest / f).stat().st_size for f in cp.files) != cp.nbytes:
                shutil.rmtree(dest, ignore_errors=True)
                raise OSError("its files were being written over by the next save as they were read")
        except Exception as exc:  # a dropped link, a full disk: no copy; the next checkpoint tries again
            self._failed_last = True
            sup.notice(f"checkpoint {cp.label} of {cp.task} not copied off host {cp.host}: {exc}")
            return
        with keeper.lock:
            if all(c is not cp for c in keeper.book.history(cp.task)):
                shutil.rmtree(dest, ignore_errors=True)  # forgotten meanwhile (written over): a copy of nothing
                return
            cp.copy, cp.copy_seconds = str(dest), seconds
            for older in keeper.book.history(cp.task)[self.kept:]:
                if older.copy is not None and older.copy != cp.copy and older.copy not in keeper.pinned:
                    shutil.rmtree(older.copy, ignore_errors=True)
                    older.copy = None
        if not self._copied_once or self._failed_last:  # the first copy and a copy after a failure are said
            sup.notice(f"checkpoint {cp.label} of {cp.task} copied off host {cp.host} to {dest} "
                       f"({show_size(len(data))} in {seconds:.2f} s); the newest {self.kept} are kept")
        self._copied_once, self._failed_last = True, False
        with self._settled:  # a restart waiting for this copy goes on now, not after the pushes and the rest
            self._settled.notify_all()
        sup.call(sup.write_state)
        self.pacer.pause_after(len(data), seconds)
        placed, pushing = self.to_spares(cp, len(data))
        keeper.restate(cp, [f"{LAUNCHER}:{dest}", *placed], only_newest=True)
        self.pacer.rest_after(seconds + pushing)

    # -- to the spares ----------------------------------------------------------------------------

    def spares(self, cp: Checkpoint) -> list[str]:
        """The spares ``cp`` is pushed to: ready (they answer, still spares) and without the source's
        directory on a disk they share with it."""
        sup = self.keeper.sup
        ready = [h for h in sup.spare_hosts() if h != cp.host and h in sup.sessions and sup.reachable(h)]
        if cp.host not in sup.sessions:
            return ready
        for h in ready:
            if (cp.host, cp.directory, h) not in self._sees:
                try:
                    self._sees[(cp.host, cp.directory, h)] = self.keeper.sees(cp.host, cp.directory, h)
                except Exception:  # the source or the spare went quiet: asked again next time
                    continue
        return [h for h in ready if self._sees.get((cp.host, cp.directory, h)) is False]

    def to_spares(self, cp: Checkpoint, nbytes: int) -> tuple[list[str], float]:
        """Push the launcher's copy of ``cp`` to each spare; where it now is (``host:directory``),
        and the seconds the pushes that succeeded took (the copier's rest counts them)."""
        keeper, sup = self.keeper, self.keeper.sup
        placed: list[str] = []
        pushing = 0.0
        for spare in self.spares(cp):
            if spare not in sup.spare_hosts():  # a move or a grow took it while the last push went
                continue
            directory = keeper.where(cp, spare)
            began = time.monotonic()
            try:
                keeper.push(cp, spare, directory, from_host=False)
            except Exception as exc:  # a full disk, a dropped link: that spare has the older ones still
                if spare not in self._spare_failed:
                    sup.notice(f"checkpoint {cp.label} of {cp.task} not copied to spare {spare}: {exc}; "
                               "the job goes on (a task moved there resumes from the launcher's copy)")
                self._spare_failed.add(spare)
                continue
            if spare in self._spare_failed:
                self._spare_failed.discard(spare)
                sup.notice(f"checkpoint {cp.label} of {cp.task} copied to spare {spare} again")
            placed.append(f"{spare}:{directory}")
            self._forget_older(spare, cp, directory)
            pushing += time.monotonic() - began
            self.pacer.pause_after(nbytes, time.monotonic() - began)
        return placed, pushing

    def _forget_older(self, spare: str, cp: Checkpoint, directory: str) -> None:
        """Keep the newest ``kept`` checkpoints of the task on ``spare``; remove the older ones' files."""
        kept = [c for c in self.on_spares.get((spare, cp.task), []) if c.order != cp.order]
        kept.append(cp)
        drop, kept = kept[:-self.kept], kept[-self.kept:]
        self.on_spares[(spare, cp.task)] = kept
        session = self.keeper.sup.sessions[spare]
        keep = [f for c in kept for f in c.files]
        for older in drop:
            with contextlib.suppress(Exception):  # else removed with the run's outputs
                session.host.run(remove_command(directory, older.files, keep), timeout=60)

