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
itself is ``launcher/supervise/ckptbook.py``'s.
"""

from __future__ import annotations

import base64
import secrets
import shlex
import threading
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any, Protocol

from launcher import events as ev
from launcher.events import Event
from launcher.model import Plan
from launcher.remote.session import HostSession
from launcher.rundir import RunDir
from launcher.supervise.ckptbook import STATE_FILE, Checkpoint, CheckpointBook, checkpoint_of
from launcher.supervise.ckptcopies import CheckpointCopier, tar_files
from launcher.supervise.lifecycle import TaskRuntime
from launcher.supervise.policy import deciding_task

__all__ = ["Checkpoint", "CheckpointBook", "CheckpointKeeper", "checkpoint_of"]

#: seconds one copy (or push) may take
COPY_SECONDS = 600.0
#: the start of the line the keeper writes in a task's log
SAY_PREFIX = "distlaunch: "


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
        if directory == a or directory.startswith(a + "/"):
            return b + directory[len(a):]
    return directory


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


def park_command(directory: str) -> str:
    d = shlex.quote(directory)
    parked = f"{d}/{STATE_FILE}.distlaunch-parked-{int(time.time())}"
    return f"if [ -f {d}/{STATE_FILE} ]; then mv -f {d}/{STATE_FILE} {parked}; fi"


def exists_command(cp: Checkpoint, directory: str | None = None) -> str:
    """Exit 0 where every file of ``cp`` is in ``directory`` (default: where it was written)."""
    where = cp.directory if directory is None else directory
    return " && ".join(f"test -f {shlex.quote(where + '/' + f)}" for f in cp.files) or "false"


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
        self.copier = CheckpointCopier(self, profile.checkpoint_copies_kept, profile.checkpoint_copy_bandwidth)

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
        if new is None or len(self.sup.sessions) < 2:  # one save told twice is copied once
            return
        if kept_off_host(cp.task, self.sup.tasks, self.sup.plan.profile.strategy):
            self.copier.offer(cp)

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
        return cp.copy is not None and all((Path(cp.copy) / f).is_file() for f in cp.files)

    def where(self, cp: Checkpoint, host: str) -> str:
        if cp.host in self.sup.sessions and host in self.sup.sessions:
            return target_directory(cp.directory, self.sup.sessions[cp.host], self.sup.sessions[host])
        return cp.directory

    def _ways(self, cp: Checkpoint, members: Sequence[TaskRuntime], newest: bool) -> dict[str, str] | None:
        """How each member gets ``cp`` (task -> "there": it sees the files where it reads; "point":
        it sees them, and its state file must name this older one; "host" / "copy": pushed from
        the source host / the launcher's copy), or None when one member cannot get it."""
        ways: dict[str, str] = {}
        on_source: bool | None = None
        for rt in members:
            # a spare the copier pushed to holds files of the same names from another checkpoint
            # (Keras' backups and fixed-name saves write the same names each time): there only when
            # this very one was pushed
            pushed = self.copier.on_spares.get((rt.spec.host, cp.task))
            stale = rt.spec.host != cp.host and pushed is not None and all(c.order != cp.order for c in pushed)
            if not stale and self._has_files(rt.spec.host, self.where(cp, rt.spec.host), cp):
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
            return  # no checkpoint was ever announced: nothing to align
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
        finally:
            with self.lock:
                self.pinned -= pins
        copies = [f"{rt.spec.host}:{self.where(cp, rt.spec.host)}" for rt in members
                  if ways[rt.spec.task_id] in ("host", "copy")]
        if copies:
            self.restate(cp, copies, only_newest=False)
        newest = history[0]
        words = f"resuming {_plural(group)} from {cp.label} (checkpoint of {source}"
        words += f", put in place for {_plural(placed)})" if placed else ")"
        if newest is not cp:
            words += f"; {newest.label} of {source} did not survive host {newest.host}: {cp.label} is older"
        behind = [f"{t} had {c.label}" for t, c in others.items()
                  if t != source and c is not None and c.order > cp.order]  # the source's is said above
        if behind:
            words += f"; goes back for {_plural(behind)}"
        self._say(words, source)

    def _place(self, cp: Checkpoint, ways: dict[str, str], members: Sequence[TaskRuntime],
               others: dict[str, Checkpoint | None]) -> list[str]:
        """Put ``cp`` where each member reads, as ``ways`` says; the members it was copied for."""
        placed: list[str] = []
        for rt in members:
            host, where, way = rt.spec.host, self.where(cp, rt.spec.host), ways[rt.spec.task_id]
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
        """No checkpoint of the source survives: no member resumes alone from one of its own."""
        for rt in members:
            host = rt.spec.host
            mine = self.book.newest(rt.spec.task_id)
            dirs = {mine.directory if mine is not None else ""}
            if history and history[0].host in self.sup.sessions:
                dirs.add(target_directory(history[0].directory, self.sup.sessions[history[0].host],
                                          self.sup.sessions[host]))
            for d in sorted(x for x in dirs if x):
                if self.sup.reachable(host):
                    self.sup.sessions[host].host.run(park_command(d), timeout=30)
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
