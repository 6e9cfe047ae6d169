"""The record of the checkpoints tasks announced: one ``Checkpoint`` each, a ``CheckpointBook`` per run.

A plain record, kept in state.json (``attach`` takes it over): where each checkpoint was written
(host, directory as that host names it, files), its step or epoch, and where the launcher's copy
of it is. What is done with it is ``launcher/supervise/checkpoints.py``'s (placement before a
start) and ``launcher/supervise/ckptcopies.py``'s (copies off the host).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from launcher import events as ev

#: checkpoints remembered per task (newest last)
KEEP_RECORDS = 4
#: TensorFlow's state file beside the prefixes (it names the newest)
STATE_FILE = "checkpoint"
#: two lines of one checkpoint (autolog's and the script's own) come this close together at most
ONE_SAVE_SECONDS = 10.0


@dataclass
class Checkpoint:
    """One complete checkpoint a task announced; ``copy``: the launcher's complete copy of it."""

    task: str
    host: str
    directory: str
    files: list[str]
    step: int | None = None
    epoch: int | None = None
    nbytes: int | None = None
    api: str = ""
    ts: float = 0.0
    copy: str | None = None
    #: seconds the last copy off its host took
    copy_seconds: float | None = None

    def to_json(self) -> dict[str, Any]:
        return {"task": self.task, "host": self.host, "directory": self.directory, "files": list(self.files),
                "step": self.step, "epoch": self.epoch, "bytes": self.nbytes, "api": self.api, "ts": self.ts,
                "copy": self.copy, "copy_seconds": self.copy_seconds}

    @classmethod
    def from_json(cls, d: Mapping[str, Any]) -> Checkpoint:
        return cls(str(d["task"]), str(d["host"]), str(d["directory"]), [str(f) for f in d.get("files") or []],
                   _opt_int(d.get("step")), _opt_int(d.get("epoch")), _opt_int(d.get("bytes")),
                   str(d.get("api") or ""), float(d.get("ts") or 0.0),
                   None if d.get("copy") is None else str(d["copy"]),
                   None if d.get("copy_seconds") is None else float(d["copy_seconds"]))

    @property
    def label(self) -> str:
        return f"step {self.step}" if self.step is not None else f"epoch {self.epoch}"

    @property
    def order(self) -> tuple[int, int, float]:
        return (self.step if self.step is not None else -1, self.epoch if self.epoch is not None else -1, self.ts)


def _one_save(a: Checkpoint, b: Checkpoint) -> bool:
    """``a`` and ``b`` tell of one save (a Keras backup that rewrites its files each epoch is a new
    save each time: its epoch differs)."""
    if a.step is None and a.epoch is None and b.step is None and b.epoch is None:
        return False  # two saves of fixed names, neither numbered: each its own, each copied
    # the state file is listed by one teller and not the other, as it wrote it during the call or not
    same_place = a.directory == b.directory and set(a.files) - {STATE_FILE} == set(b.files) - {STATE_FILE}
    steps_agree = a.step is None or b.step is None or a.step == b.step
    epochs_agree = a.epoch is None or b.epoch is None or a.epoch == b.epoch
    return same_place and steps_agree and epochs_agree and abs(a.ts - b.ts) <= ONE_SAVE_SECONDS


def _opt_int(value: Any) -> int | None:
    return None if value is None else int(value)


class CheckpointBook:
    """The checkpoints each task announced, newest last (a plain record: state.json keeps it)."""

    def __init__(self, by_task: Mapping[str, list[Checkpoint]] | None = None) -> None:
        self.by_task: dict[str, list[Checkpoint]] = {t: list(c) for t, c in (by_task or {}).items()}
        #: records kept per task: more than the copies kept, or a copy would outlive its record unpruned
        self.keep = KEEP_RECORDS

    def add(self, cp: Checkpoint) -> Checkpoint | None:
        """Record ``cp``; the same checkpoint told twice (autolog's line for a save and the script's
        own: one directory, the same files, no step or epoch that differs, told within
        ``ONE_SAVE_SECONDS``) is one record, completed in place (what a copy thread
        holds stays the record). The new record, or None where it was one already kept."""
        listed = self.by_task.get(cp.task, [])
        same = next((c for c in listed if _one_save(c, cp)), None)
        if same is not None:
            same.step = cp.step if cp.step is not None else same.step
            same.epoch = cp.epoch if cp.epoch is not None else same.epoch
            same.nbytes = cp.nbytes if cp.nbytes is not None else same.nbytes
            same.api = cp.api or same.api
            same.files = sorted(set(same.files) | set(cp.files))
            listed.sort(key=lambda c: c.order)
            return None
        kept = [c for c in listed if not (c.directory == cp.directory and c.order == cp.order)]
        kept.append(cp)
        kept.sort(key=lambda c: c.order)
        newest, older = kept[-self.keep:], kept[:-self.keep]
        copied = [c for c in older if c.copy is not None]
        if copied and all(c.copy is None for c in newest):
            # saves come faster than the copier copies (every epoch of a fast fit): the newest copy
            # is kept with its record, else a restart that finds the newer ones gone (written over,
            # deleted as the task stopped) would have nothing to resume from
            newest = [copied[-1], *newest]
        self.by_task[cp.task] = newest
        return cp

    def forget(self, gone: Sequence[Checkpoint]) -> None:
        """Drop the records of ``gone`` (saves whose files are no longer anywhere)."""
        for cp in gone:
            listed = self.by_task.get(cp.task, [])
            self.by_task[cp.task] = [c for c in listed if c is not cp]

    def newest(self, task: str) -> Checkpoint | None:
        kept = self.by_task.get(task)
        return kept[-1] if kept else None

    def history(self, task: str) -> list[Checkpoint]:
        """The task's checkpoints, newest first."""
        return list(reversed(self.by_task.get(task, [])))

    def to_json(self) -> dict[str, list[dict[str, Any]]]:
        return {t: [c.to_json() for c in cps] for t, cps in self.by_task.items()}

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> CheckpointBook:
        return cls({str(t): [Checkpoint.from_json(c) for c in cps] for t, cps in data.items()})


def fixed_names(cp: Checkpoint) -> bool:
    """Are ``cp``'s files of names the next save writes over (a Keras backup, a ``.weights.h5``),
    with the size they had when announced? TensorFlow's numbered prefixes (a state file among the
    files) are never rewritten."""
    return cp.nbytes is not None and bool(cp.files) and STATE_FILE not in cp.files


def checkpoint_of(event: ev.CheckpointEvent, host: str) -> Checkpoint:
    return Checkpoint(str(event.task), event.host or host, event.directory, list(event.files), event.step,
                      event.epoch, event.bytes, event.api, event.ts)
