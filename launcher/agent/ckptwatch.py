"""The profile's ``checkpoint_dir``: a directory of checkpoints autolog cannot see (a script that
writes its own files), watched by the agent's sample loop, one ``checkpoint`` event (api
``watched``) for each new complete checkpoint.

One scan per sample pass: a ``listdir`` and a ``stat`` per entry, nothing read. What counts as
one checkpoint:

- a TensorFlow prefix: ``P.index`` with every shard ``P.data-NNNNN-of-MMMMM`` it names (TensorFlow
  writes the index last), with ``P.meta`` where there is one and the ``checkpoint`` state file;
- any other entry (a file, or a folder with everything under it): once it is settled, unchanged in
  size and time over two scans. Temporary names (a leading ``.``, ``.tmp``/``.temp``/``.part``
  endings, ``_temp`` folders) are not checkpoints.

At the first scan, the newest complete checkpoint already there is reported (what a restart would
resume from); after that each new or rewritten one, once. The step is the number a name ends in
(``ckpt-300``) when it lies between the task's step at the scan before and its step now (a name
numbered by step, as CheckpointManager's ``checkpoint_number`` or Keras' ``{epoch}``-free names
give); else the task's newest step when the checkpoint was seen (the agent's view of its metric
events), None where it reported none.

Stdlib-only, Python >= 3.9 (runs on hosts from the agent zipapp).
"""

from __future__ import annotations

import os
import re
import time
from typing import Callable, Dict, List, Optional, Tuple

from launcher import events

API = "watched"
STATE_FILE = "checkpoint"
_NUMBERED = re.compile(r"[-_.](\d+)$")
_SHARD = re.compile(r"^(?P<prefix>.+)\.data-(?P<part>\d+)-of-(?P<count>\d+)$")
_TEMPORARY = (".tmp", ".temp", ".part", "_temp", ".partial", ".lock")
#: at the first scan, an entry unchanged this long is taken as settled (written before the task)
SETTLED_S = 2.0
#: the most entries of a folder checkpoint summed per scan (a huge tree is not walked every second)
MAX_FOLDER_FILES = 10000

#: what a checkpoint is on disk now: (size, newest mtime) of its files
Look = Tuple[int, float]


class CheckpointWatch:
    """One task's watched directory; ``scan()`` returns the events of what is new since the last scan."""

    def __init__(self, run: str, task: str, host: str, directory: str,
                 step: Callable[[], Optional[int]] = lambda: None) -> None:
        self.run, self.task, self.host, self.directory = run, task, host, directory
        self._step = step
        self._reported: Dict[str, Look] = {}  # unit name -> how it looked when reported
        self._pending: Dict[str, Look] = {}  # unit name -> how it looked at the last scan (not settled)
        self._first = True
        self._step_before: Optional[int] = None  # the task's step at the scan before this one

    def scan(self, final: bool = False) -> List[events.CheckpointEvent]:
        """The events of what is new; ``final``: the task ended, what is there is settled."""
        step_now = self._step()
        try:
            return self._scan(final, step_now)
        finally:
            self._step_before = step_now

    def _scan(self, final: bool, step_now: Optional[int]) -> List[events.CheckpointEvent]:
        try:
            names = os.listdir(self.directory)
        except OSError:
            return []  # not there yet (the script makes it)
        units = _units(self.directory, names)
        looks = {unit: _look(self.directory, files) for unit, (files, _prefix) in units.items()}
        if self._first:  # what was there before the task started: only the newest complete one
            self._first = False
            self._reported = {unit: look for unit, look in looks.items() if look is not None}
            settled = time.time() - SETTLED_S
            old = [(look[1], unit) for unit, look in self._reported.items() if units[unit][1] or look[1] < settled]
            return [self._event(max(old)[1], units, names, step_now)] if old else []
        out = []
        for unit, look in sorted(looks.items(), key=lambda item: item[1][1] if item[1] else 0.0):
            if look is None or self._reported.get(unit) == look:
                continue
            # a TF prefix whose index and shards are all there is complete; anything else once settled
            if not units[unit][1] and self._pending.get(unit) != look and not final:
                self._pending[unit] = look
                continue
            self._pending.pop(unit, None)
            self._reported[unit] = look
            out.append(self._event(unit, units, names, step_now))
        return out

    def _event(self, unit: str, units: Dict[str, Tuple[List[str], bool]], names: List[str],
               step_now: Optional[int]) -> events.CheckpointEvent:
        files, prefix = units[unit]
        look = self._reported[unit]
        listed = files + ([STATE_FILE] if prefix and STATE_FILE in names else [])
        return events.checkpoint_event(self.run, self.task, self.directory, step=self._step_of(unit, step_now),
                                       files=sorted(listed),
                                       nbytes=look[0], api=API, host=self.host, ts=time.time())


    def _step_of(self, unit: str, step_now: Optional[int]) -> Optional[int]:
        """The number the name ends in where it is a step of this window, else the task's step now."""
        found = _NUMBERED.search(os.path.splitext(unit)[0] if not _NUMBERED.search(unit) else unit)
        if found is not None and step_now is not None and self._step_before is not None:
            number = int(found.group(1))
            if self._step_before < number <= step_now:
                return number
        return step_now


def _temporary(name: str) -> bool:
    return name.startswith(".") or name == STATE_FILE or any(name.endswith(t) or t + "." in name for t in _TEMPORARY)


def _units(directory: str, names: List[str]) -> Dict[str, Tuple[List[str], bool]]:
    """Checkpoint name -> (its files, whether it is a complete TF prefix)."""
    present = set(names)
    units: Dict[str, Tuple[List[str], bool]] = {}
    claimed = set()
    for name in names:
        if not name.endswith(".index"):
            continue
        prefix = name[: -len(".index")]
        shards = [n for n in names if n.startswith(prefix + ".data-") and _SHARD.match(n)]
        counts = {int(_SHARD.match(n).group("count")) for n in shards}  # type: ignore[union-attr]
        claimed.update([*shards, name, prefix + ".meta"])
        if len(counts) != 1 or len(shards) != counts.pop():
            continue  # shards still being written
        units[prefix] = ([name, *shards] + ([prefix + ".meta"] if prefix + ".meta" in present else []), True)
    for name in names:
        if name in claimed or _temporary(name) or _SHARD.match(name):
            continue
        units[name] = ([name], False)
    return units


def _look(directory: str, files: List[str]) -> Optional[Look]:
    size, newest, seen = 0, 0.0, 0
    for name in files:
        path = os.path.join(directory, name)
        try:
            st = os.stat(path)
        except OSError:
            return None
        if os.path.isdir(path):
            for root, _dirs, inner in os.walk(path):
                for leaf in inner:
                    seen += 1
                    if seen > MAX_FOLDER_FILES:
                        return size, newest
                    try:
                        sub = os.stat(os.path.join(root, leaf))
                    except OSError:
                        return None
                    size += sub.st_size
                    newest = max(newest, sub.st_mtime)
            newest = max(newest, st.st_mtime)
            continue
        size += st.st_size
        newest = max(newest, st.st_mtime)
    return size, newest


def watched_directory(workdir: str, checkpoint_dir: str) -> str:
    """The profile's checkpoint_dir on the host: relative to the task's workdir, ``~`` expanded."""
    return os.path.normpath(os.path.join(workdir or "/", os.path.expanduser(checkpoint_dir)))
