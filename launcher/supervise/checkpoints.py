"""Checkpoints the launcher keeps: one checkpoint for every task that restarts together.

Each host may have its own disk: the default outputs dir is per host, and a worker killed under
MultiWorkerMirrored restarts its whole group, where worker:0 would resume from its checkpoint and
worker:1 from nothing (a collective mismatch, a crash loop). So the supervisor keeps a record of
the checkpoints tasks announce (``checkpoint`` events: the ``CheckpointBook``, kept in state.json),
and before a group restarts or a task moves, ``CheckpointKeeper.before_start`` picks the newest
checkpoint of the group's source (``source_of``: the task that saves, else the task itself) that
every member that reads it (``restores``) can get: it sees the files where it reads (the same host,
or shared storage), or they can be pushed to it from the source's host or from the launcher's
copy. It puts it where each member reads: the same directory as the member's host names it
(``target_directory``), the files moved in from a temp dir and the ``checkpoint`` state file
written last, so a member reads the old one or the new one and never half of one. Where none
survives, the members' state files are parked and all start from scratch together; either way one
line says from which step (a notice to the clients, and a line in the source task's log).

Where storage is per host (a token written in the checkpoint's directory is not seen from the
other hosts), each new checkpoint of a source task is copied off its host as it is written, to
the launcher's run dir and on to the spares (``launcher/supervise/ckptcopies.py``); the record
itself is ``launcher/supervise/ckptbook.py``'s, and who saves, where each task reads and the
shell lines run on the hosts are ``launcher/supervise/ckptplaces.py``'s.
"""

from __future__ import annotations

import base64
import secrets
import shlex
import threading
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any, Protocol

from launcher import events as ev
from launcher.events import Event
from launcher.model import Plan
from launcher.remote.session import HostSession
from launcher.rundir import RunDir
from launcher.supervise.ckptbook import STATE_FILE, Checkpoint, CheckpointBook, checkpoint_of, fixed_names
from launcher.supervise.ckptcopies import CheckpointCopier, tar_files
from launcher.supervise.ckptplaces import (
    TAR_FAILED,
    exists_command,
    kept_off_host,
    park_command,
    pull_command,
    push_command,
    restores,
    root_of,
    saves,
    source_of,
    state_text,
    target_directory,
    task_directory,
)
from launcher.supervise.lifecycle import TaskRuntime

__all__ = ["Checkpoint", "CheckpointBook", "CheckpointKeeper", "checkpoint_of"]

#: seconds one copy (or push) may take
COPY_SECONDS = 600.0
#: the start of the line the keeper writes in a task's log
SAY_PREFIX = "distlaunch: "
#: how long a restart waits for the copy of a leaving host's last checkpoint (``_await_copy``)
COPY_WAIT_SECONDS = 60.0


def _plural(items: Sequence[str]) -> str:
    return ", ".join(items)


class KeeperOwner(Protocol):
    """What the keeper uses of the supervisor."""

    @property
    def run_id(self) -> str: ...
    @property
    def rundir(self) -> RunDir: ...
    @property
    def sessions(self) -> dict[str, HostSession]: ...
    @property
    def tasks(self) -> Mapping[str, TaskRuntime]: ...
    def call(self, fn: Callable[[], None]) -> None: ...
    def publish(self, event: Event, line: str | None = None) -> None: ...
    def notice(self, message: str) -> None: ...
    def write_state(self) -> None: ...
    def reachable(self, host: str) -> bool: ...
    def in_job(self, host: str) -> bool: ...
    def spare_hosts(self) -> tuple[str, ...]: ...
    @property
    def plan(self) -> Plan: ...


class CheckpointKeeper:
    """The book of checkpoints, their copies off their hosts, and their placement before a start."""

    def __init__(self, sup: KeeperOwner, book: CheckpointBook | None = None) -> None:
        self.sup = sup
        self.book = book or CheckpointBook()
        self.lock = threading.Lock()
        #: (host, directory) -> True when every other host sees that directory's files (shared storage)
        self.shared: dict[tuple[str, str], bool] = {}
        #: the launcher's copies a restart is putting in place: the copier prunes them later, not now
        self.pinned: set[str] = set()
        profile = sup.plan.profile
        self.copier = CheckpointCopier(self, profile.checkpoint_copies_kept, profile.checkpoint_copy_bandwidth,
                                       share=profile.checkpoint_copy_percent / 100)

    # -- the record ---------------------------------------------------------------------------------

    def on_event(self, event: ev.CheckpointEvent) -> None:
        """A task announced a complete checkpoint (on the loop): record it; copy it off its host
        when it is a source's and storage is per host."""
        rt = self.sup.tasks.get(str(event.task))
        if rt is None or not event.directory:
            return
        cp = checkpoint_of(event, rt.spec.host)
        with self.lock:
            new = self.book.add(cp)
        self.sup.write_state()  # `attach` keeps the record
        if new is not None:  # one save told twice is copied once
            self._offer(cp)

    def _offer(self, cp: Checkpoint) -> None:
        """To the copier, where a copy off its host is worth having: a source's, several hosts."""
        if len(self.sup.sessions) >= 2 and kept_off_host(cp.task, self.sup.tasks, self.sup.plan.profile.strategy):
            # a host that left the job (drained) saved its last: copied now, not after the copier's rest
            self.copier.offer(cp, urgent=not self.sup.in_job(cp.host))

    def link_back(self, host: str) -> None:
        """On the loop: ``host``'s link came back. The newest checkpoint of each task there whose
        copy off it a dropped link cut short (or which was written while the link was down) is
        copied now, not only at the task's next save (which may be far off, or never come)."""
        with self.lock:
            waiting = [cp for task in self.book.by_task if (cp := self.book.newest(task)) is not None
                       and cp.host == host and cp.copy is None and self.shared.get((cp.host, cp.directory)) is False]
        for cp in waiting:
            self._offer(cp)

    def to_json(self) -> dict[str, list[dict[str, Any]]]:
        with self.lock:
            return self.book.to_json()

    def close(self) -> None:
        self.copier.close()

    # -- copies off the host ------------------------------------------------------------------------

    def pull(self, cp: Checkpoint) -> bytes:
        session = self.sup.sessions[cp.host]
        result = session.host.run(pull_command(cp), timeout=COPY_SECONDS)
        if not result.ok or TAR_FAILED in result.stderr:
            said = result.stderr.replace(TAR_FAILED, "").strip()
            raise OSError(f"tar on host {cp.host} failed: {said[-200:] or result.exit_code}")
        return base64.b64decode(result.stdout)

    def is_shared(self, cp: Checkpoint) -> bool:
        """Does every other host of the job see ``cp``'s directory (as it names it) with the same
        files? A token written there on ``cp``'s host, looked for from the others."""
        key = (cp.host, cp.directory)
        known = self.shared.get(key)
        if known is None:
            others = [h for h in self.sup.sessions if h != cp.host and self.sup.in_job(h)]  # not a lost host
            apart = [h for h in others if not self.sees(cp.host, cp.directory, h)]
            known = not apart
            self.shared[key] = known
            if apart:
                self.sup.notice(f"checkpoints in {cp.directory} on {cp.host} are per host (not seen from "
                                f"{', '.join(apart)}): distlaunch copies them to the launcher's machine and "
                                "on to whoever restarts")
            else:
                self.sup.notice(f"checkpoints in {cp.directory} on {cp.host} are shared by every host")
        return known

    def sees(self, host: str, directory: str, other: str) -> bool:
        """Does ``other`` see a token written in ``directory`` on ``host`` (where ``other`` names it)?"""
        source, target = self.sup.sessions[host], self.sup.sessions[other]
        there = target_directory(directory, source, target)
        name = f".distlaunch-token-{secrets.token_hex(6)}"
        token = shlex.quote(f"{directory}/{name}")
        if not source.host.run(f"mkdir -p {shlex.quote(directory)} && : > {token}", timeout=30).ok:
            return False
        try:
            return target.host.run(f"test -f {shlex.quote(f'{there}/{name}')}", timeout=30).ok
        finally:
            source.host.run(f"rm -f {token}", timeout=30)

    # -- before a start -----------------------------------------------------------------------------

    def _has_files(self, host: str, directory: str, cp: Checkpoint) -> bool:
        """Does ``host`` (which answers) see every file of ``cp`` in ``directory``?"""
        if host not in self.sup.sessions or not self.sup.reachable(host):
            return False
        try:
            return self.sup.sessions[host].host.run(exists_command(cp, directory), timeout=30).ok
        except Exception:  # the host went quiet: it does not see them now
            return False

    def _has_copy(self, cp: Checkpoint) -> bool:
        """Is the launcher's copy there, and whole (a fixed-name save pulled as the next one cut it
        has another size)?"""
        if cp.copy is None or not all((Path(cp.copy) / f).is_file() for f in cp.files):
            return False
        return not fixed_names(cp) or sum((Path(cp.copy) / f).stat().st_size for f in cp.files) == cp.nbytes

    def where(self, cp: Checkpoint, host: str, task: str | None = None) -> str:
        """Where ``task`` (None: a task of ``cp``'s own folder) on ``host`` reads ``cp``: its folder
        as ``host`` names it, and the task's own where the folder is one per task."""
        directory = cp.directory
        if task is not None and task != cp.task and self._per_task(cp):
            directory = self._task_folder(cp, task)
        if cp.host in self.sup.sessions and host in self.sup.sessions:
            return target_directory(directory, self.sup.sessions[cp.host], self.sup.sessions[host])
        return directory

    def _ways(self, cp: Checkpoint, members: Sequence[TaskRuntime], newest: bool) -> dict[str, str] | None:
        """How each member gets ``cp`` (task -> "there": it sees the files where it reads; "point":
        it sees them, and its state file must name this older one; "host" / "copy": pushed from
        the source host / the launcher's copy), or None when one member cannot get it."""
        ways: dict[str, str] = {}
        # files of fixed names a later save wrote over are that save's, wherever they are: this
        # one is only in the launcher's copy
        over = self._written_over(cp)
        on_source: bool | None = False if over else None
        for rt in members:
            # a spare the copier pushed to holds files of the same names from another checkpoint
            # (Keras' backups and fixed-name saves write the same names each time): there only when
            # this very one was pushed
            pushed = self.copier.on_spares.get((rt.spec.host, cp.task))
            stale = rt.spec.host != cp.host and pushed is not None and all(c.order != cp.order for c in pushed)
            if over:  # what a spare was last given is this one; else the later save's files are there
                stale = not (rt.spec.host != cp.host and pushed and pushed[-1].order == cp.order)
            if self._own_folder(cp, rt):
                # a folder per task: the member's own files there are this save's only when it
                # announced this very save there (the same step and epoch); else the source's go in
                stale = not self._saved_alike(cp, rt)
            if not stale and self._has_files(rt.spec.host, self.where(cp, rt.spec.host, rt.spec.task_id), cp):
                # same host, or storage the hosts share: the member reads the very files
                ways[rt.spec.task_id] = "there" if newest else "point"
                continue
            if on_source is None:
                on_source = self._has_files(cp.host, cp.directory, cp)
            if on_source:
                ways[rt.spec.task_id] = "host"
            elif self._has_copy(cp):
                ways[rt.spec.task_id] = "copy"
            else:
                return None
        return ways

    def _written_over(self, cp: Checkpoint) -> list[Checkpoint]:
        """The later saves of ``cp``'s task that wrote files of the same names in its folder (a
        Keras backup or a fixed-name ``ModelCheckpoint`` rewrites its files every time)."""
        if STATE_FILE in cp.files:
            return []  # TensorFlow's numbered prefixes: a later save writes files of other names
        with self.lock:
            later = [c for c in self.book.history(cp.task) if c.order > cp.order]
        return [c for c in later if c.host == cp.host and c.directory == cp.directory and set(c.files) & set(cp.files)]

    def _task_folder(self, cp: Checkpoint, task: str) -> str:
        """``cp``'s folder with ``task`` named in place of its own, as ``cp``'s host names it."""
        source = self.sup.sessions.get(cp.host)
        return task_directory(cp.directory, cp.task, task, root_of(cp.directory, source) if source else "")

    def _per_task(self, cp: Checkpoint) -> bool:
        """Is ``cp``'s folder one of a folder per task? Only where another task announced a save in
        the folder that names it (a folder every member reads may name the task that writes it)."""
        with self.lock:
            theirs = [(t, c) for t, cps in self.book.by_task.items() if t != cp.task for c in cps]
        for task, c in theirs:
            folder = self._task_folder(cp, task)
            if folder == cp.directory:
                continue
            if c.host in self.sup.sessions and cp.host in self.sup.sessions:
                folder = target_directory(folder, self.sup.sessions[cp.host], self.sup.sessions[c.host])
            if c.directory == folder:
                return True
        return False

    def _own_folder(self, cp: Checkpoint, rt: TaskRuntime) -> bool:
        """Does ``rt`` read a folder of its own, not ``cp``'s (a folder per task)?"""
        return self.where(cp, cp.host, rt.spec.task_id) != self.where(cp, cp.host)

    def _saved_alike(self, cp: Checkpoint, rt: TaskRuntime) -> bool:
        """Was ``rt``'s own last save in the folder it reads one of ``cp``'s step and epoch, with
        the same files (a later save of fixed names wrote over it)?"""
        where = self.where(cp, rt.spec.host, rt.spec.task_id)
        with self.lock:
            own = [c for c in self.book.history(rt.spec.task_id) if c.host == rt.spec.host and c.directory == where]
        last = own[0] if own else None
        return last is not None and (last.step, last.epoch, sorted(last.files)) == (cp.step, cp.epoch, sorted(cp.files))

    def before_start(self, members: Sequence[TaskRuntime]) -> None:
        """Put one checkpoint where every member restores from, before they start (on a restart's
        thread). Members' hosts are where they start now (a move already re-planned them)."""
        if not members:
            return
        source = source_of([rt.spec.task_id for rt in members], self.sup.tasks)
        members = [rt for rt in members if restores(rt.spec.task_id, source, self.sup.plan.profile.strategy)]
        group = [rt.spec.task_id for rt in members]
        with self.lock:
            history = self.book.history(source)
            others = {t: self.book.newest(t) for t in group}
        if not history and not any(others.values()):
            # nothing to align; said where the source is the one that saves, so that a user whose
            # job goes back to step 0 knows why (not of a ParameterServer worker or ps, which keep no state)
            if group and saves(source, self.sup.tasks, self.sup.plan.profile.strategy):
                verb = "starts" if len(group) == 1 else "start"
                self._say(f"no checkpoint of {source} seen yet: {_plural(group)} {verb} again from step 0, "
                          "unless the script restores one itself", source)
            return
        self._await_copy(history[0] if history else None)
        # every copy a candidate may be read from is pinned before one is chosen: the choice asks
        # the hosts, and meanwhile the copier may land a newer copy and prune older ones
        with self.lock:
            pins = {c.copy for c in history if c.copy is not None} - self.pinned
            self.pinned |= pins
        try:
            chosen: tuple[Checkpoint, dict[str, str]] | None = None
            for i, candidate in enumerate(history):
                ways = self._ways(candidate, members, newest=i == 0)
                if ways is not None:
                    chosen = (candidate, ways)
                    break
            if chosen is None:
                self._from_scratch(members, source, history)
                return
            cp, ways = chosen
            placed = self._place(cp, ways, members, others)
            self._forget_written_over(cp, ways)
        finally:
            with self.lock:
                self.pinned -= pins
        copies = [f"{rt.spec.host}:{self.where(cp, rt.spec.host, rt.spec.task_id)}" for rt in members
                  if ways[rt.spec.task_id] in ("host", "copy")]
        if copies:
            self.restate(cp, copies, only_newest=False)
        newest = history[0]
        words = f"resuming {_plural(group)} from {cp.label} (checkpoint of {source}"
        words += f", put in place for {_plural(placed)})" if placed else ")"
        if newest is not cp:
            words += f"; {newest.label} of {source} did not survive host {newest.host}: {cp.label} is older"
        behind = [f"{t} had {c.label}" for t, c in others.items()  # the source's is said above
                  if t != source and c is not None and c.order[:2] > cp.order[:2]]  # a later step, not a later time
        if behind:
            words += f"; goes back for {_plural(behind)}"
        self._say(words, source)

    def _await_copy(self, newest: Checkpoint | None) -> None:
        """The newest checkpoint of a host that left the job (a drain: its tasks saved as they
        stopped) is read from the launcher's copy only: where that copy is still under way or
        waiting for the copier, the start waits for it (``COPY_WAIT_SECONDS`` at most) instead of
        going back to an older one and redoing steps."""
        if newest is None or newest.copy is not None or self.sup.reachable(newest.host):
            return
        if not self.copier.is_pending(newest):
            return  # never offered (storage the hosts share), or its copy failed: nothing to wait for
        self.copier.hurry()
        if not self.copier.wait_copied(newest, 1.0):
            self._say(f"waiting for {newest.label} of {newest.task} to be copied off host {newest.host} "
                      "before the restart", newest.task)
            self.copier.wait_copied(newest, COPY_WAIT_SECONDS)

    def _forget_written_over(self, cp: Checkpoint, ways: dict[str, str]) -> None:
        """``cp`` went back into its own folder over later saves of the same names (one cut short,
        or never copied off): those saves are gone, and must not be taken for what is there now."""
        if ways.get(cp.task) not in ("host", "copy"):
            return
        over = self._written_over(cp)
        with self.lock:  # the copier sets a record's copy under this lock
            gone = [c for c in over if c.copy is None]
            self.book.forget(gone)
        if gone:
            self.sup.write_state()

    def _place(self, cp: Checkpoint, ways: dict[str, str], members: Sequence[TaskRuntime],
               others: dict[str, Checkpoint | None]) -> list[str]:
        """Put ``cp`` where each member reads, as ``ways`` says; the members it was copied for."""
        placed: list[str] = []
        for rt in members:
            host, where, way = rt.spec.host, self.where(cp, rt.spec.host, rt.spec.task_id), ways[rt.spec.task_id]
            mine = others.get(rt.spec.task_id)
            if mine is not None and mine.host == host and mine.directory != where and mine.order > cp.order:
                # a newer checkpoint of its own elsewhere: parked, so it does not resume alone from it
                self.sup.sessions[host].host.run(park_command(mine.directory), timeout=30)
            if way == "there":
                continue
            if way == "point":
                self.point(cp, host, where)
            else:
                self.push(cp, host, where, from_host=way == "host")
                placed.append(f"{rt.spec.task_id} on {host}")
        return placed

    def point(self, cp: Checkpoint, host: str, directory: str) -> None:
        """The state file in ``directory`` on ``host`` names ``cp`` (an older one than it named)."""
        state = state_text(cp)
        if state is None:
            return  # no TensorFlow state file to write: the files themselves are what is read
        result = self.sup.sessions[host].host.run(push_command(directory, [], state), timeout=60, stdin=b"")
        if not result.ok:
            raise OSError(f"the checkpoint state file in {directory} on host {host} could not be written: "
                          f"{result.stderr.strip()[-200:] or result.exit_code}")

    def push(self, cp: Checkpoint, host: str, directory: str, from_host: bool) -> None:
        """Write ``cp`` into ``directory`` on ``host``: files from a temp dir, the state file last."""
        if from_host:
            data = self.pull(cp)
        elif cp.copy is not None:
            data = tar_files(Path(cp.copy), cp.files)
        else:
            raise OSError(f"checkpoint {cp.label} of {cp.task} is nowhere to copy from")
        result = self.sup.sessions[host].host.run(push_command(directory, cp.files, state_text(cp)),
                                                  timeout=COPY_SECONDS, stdin=data)
        if not result.ok:
            raise OSError(f"checkpoint {cp.label} of {cp.task} could not be put in {directory} on host {host}: "
                          f"{result.stderr.strip()[-200:] or result.exit_code}")

    def _from_scratch(self, members: Sequence[TaskRuntime], source: str, history: list[Checkpoint]) -> None:
        """No checkpoint of the source survives: no member resumes alone from one of its own (nor
        from a fixed-name save cut short, whose files are parked too)."""
        for rt in members:
            host = rt.spec.host
            mine = self.book.newest(rt.spec.task_id)
            dirs = {mine.directory if mine is not None else ""}
            if history and history[0].host in self.sup.sessions:
                dirs.add(self.where(history[0], host, rt.spec.task_id))
            names = [STATE_FILE, *(f for c in (mine, history[0] if history else None)
                                   if c is not None and fixed_names(c) for f in c.files)]
            for d in sorted(x for x in dirs if x):
                if self.sup.reachable(host):
                    self.sup.sessions[host].host.run(park_command(d, sorted(set(names))), timeout=30)
        lost = f"host {history[0].host}" if history else "anywhere"
        self._say(f"resuming from step 0: no checkpoint of {source} survived {lost}; "
                  f"{_plural([rt.spec.task_id for rt in members])} start from scratch together", source)

    def restate(self, cp: Checkpoint, copies: list[str], only_newest: bool) -> None:
        """Publish ``cp``'s ``checkpoint`` event again (its own ``ts``) with where its copies are, for
        the dashboard and ``status``. A copy is said only of the task's newest checkpoint (a slow copy
        of an older one is not news); a placement always (a restart resumes from that one)."""
        sup = self.sup

        def restate() -> None:
            with self.lock:
                newest = self.book.newest(cp.task)
            if only_newest and newest is not cp:
                return
            sup.publish(ev.checkpoint_event(sup.run_id, cp.task, cp.directory, step=cp.step, epoch=cp.epoch,
                                            files=cp.files, nbytes=cp.nbytes, api=cp.api, host=cp.host,
                                            ts=cp.ts, copies=copies))
        sup.call(restate)

    def _say(self, words: str, task: str) -> None:
        """One line: to every client now, and in the source task's log (``distlaunch: ...``), where
        ``logs``, the dashboard's log pane and events.jsonl keep it. Not a ``job`` event: the job's
        state does not change (it is Restarting), and a job event is a change of state."""
        sup = self.sup
        sup.notice(words)
        sup.call(lambda: sup.publish(ev.log_event(sup.run_id, task, "stderr", SAY_PREFIX + words)))
