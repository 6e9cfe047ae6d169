"""A planned stop loses nothing (issue 54 §5): SIGTERM during Keras ``fit`` saves, then exits.

``distlaunch drain``, a preemption notice and a restart's stop send a task SIGTERM and give it its
grace. Unhandled, SIGTERM ends the process wherever it is, and the move redoes every step since
the last checkpoint. Where the script trains with Keras ``fit`` and a ``BackupAndRestore`` that
saves by batches (``save_freq=N``), autolog's callback takes SIGTERM instead: at the next batch
end it has every such backup save that batch (tf_keras resumes at the next batch; Keras 3
restores epochs only, so it resumes at the start of that epoch with these weights, as after its
own batch saves) and exits 143, as SIGTERM would, without ``on_train_end`` (which deletes the
backup). A group of MultiWorkerMirrored workers saves together: the workers agree on one batch
through TensorFlow's coordination service (``launcher/autolog/groupstop.py``), every worker of
the group saves at it and exits 143, including those that got no SIGTERM (a group restarts
whole, so they would be stopped next). It stays out of the way where SIGTERM is not its to take:
a handler the script or TensorFlow installed (``PreemptionCheckpointHandler``, tf_keras'
``save_before_preemption``), a ``fit`` off the main thread, a MultiWorkerMirrored group without a
coordination service, or ParameterServer training (its workers hold no model of their own).
Stdlib-only, Python >= 3.9.
"""
from __future__ import annotations

import threading
from typing import Any, Dict, List, Optional, Tuple

from launcher.autolog import groupstop
from launcher.autolog import recorder as autolog

#: the exit code of a task that stopped on SIGTERM (as the signal itself would give)
EXIT_CODE = 128 + 15


def _is_backup(callback: Any) -> bool:
    return any(cls.__name__ == "BackupAndRestore" for cls in type(callback).__mro__)


def _saves_by_batch(callback: Any) -> bool:
    freq = getattr(callback, "save_freq", "epoch")
    return isinstance(freq, int) and not isinstance(freq, bool) and freq > 0


def _strategy_names(model: Any) -> str:
    """The class names of the model's strategy and its bases (``tf.distribute.MultiWorkerMirroredStrategy``
    is ``CollectiveAllReduceStrategy``; its V1 and experimental forms are subclasses)."""
    strategy = getattr(model, "distribute_strategy", None)
    return " ".join(c.__name__ for c in type(strategy).__mro__) if strategy is not None else ""


class FitStop:
    """SIGTERM taken for one ``fit``: asked at the signal, carried out at the next batch end (the
    one the group agreed on, for a MultiWorkerMirrored group)."""

    def __init__(self) -> None:
        self.backups: List[Any] = []
        self.asked = False
        #: batches this fit finished: the same count on every worker of a group in lock step
        self.done = 0
        self.group: Optional[groupstop.GroupStop] = None
        self._proposed = False
        self._installed = False
        self._previous: Any = None

    def begin(self, callbacks: List[Any], model: Any) -> None:
        self.backups = [c for c in callbacks if _is_backup(c) and _saves_by_batch(c)]
        self.done = 0
        if not self.backups or threading.current_thread() is not threading.main_thread():
            return
        names = _strategy_names(model)
        if "ParameterServer" in names:
            return
        if "CollectiveAllReduce" in names or "MultiWorker" in names:
            me, workers = groupstop.worker_ids()
            if workers > 1:
                if not groupstop.service_running():
                    return  # no way to agree on a step: a lone stop would hang the peers' save
                self.group = _GROUPS.setdefault((me, workers), groupstop.GroupStop(me, workers))
        import signal

        if signal.getsignal(signal.SIGTERM) is not signal.SIG_DFL:
            self.group = None
            return  # the script's own handler, or TensorFlow's: theirs to act on
        if self.group is not None:
            self.group.watch()
        self._previous = signal.signal(signal.SIGTERM, self._on_signal)
        self._installed = True

    def _on_signal(self, signum: int, frame: Optional[Any]) -> None:
        self.asked = True  # a handler only sets a flag: the save happens at the batch end

    def batch_end(self, batch: int) -> None:
        self.done += 1
        group = self.group
        if group is None:
            if self.asked:
                self._save_and_exit(batch, "a stop asked by SIGTERM")
            return
        if group.due(self.done):
            self._save_and_exit(batch, f"a stop the workers agreed on, after batch {self.done} of this fit")
        if self.asked and not self._proposed and not group.agreed.is_set():
            self._proposed = True
            if not group.propose(self.done):
                autolog.flush("a stop asked by SIGTERM, which the peers did not acknowledge")
                self.end()
                raise SystemExit(EXIT_CODE)

    def _save_and_exit(self, batch: int, why: str) -> None:
        for backup in self.backups:
            save = getattr(backup, "_backup", None)  # tf_keras: the epoch and this batch, resumed after it
            if save is not None and getattr(backup, "_training_state", None) is not None:
                save(epoch=getattr(backup, "_current_epoch", 0), batch=batch)
            elif getattr(backup, "_save_model", None) is not None:  # Keras 3
                backup._save_model()
        autolog.flush(why)
        self.end()
        raise SystemExit(EXIT_CODE)

    def after_fit(self) -> None:
        """``fit`` ended. A SIGTERM it took that no batch end acted on (it came in the last batch, or
        in the epoch's end) is acted on now, and so is a stop the group agreed on for a batch this
        fit never reached: exit 143, as the signal would have; a stop is never swallowed."""
        self.end()  # first: a SIGTERM from here on takes its old course, none falls between
        if self.asked or (self.group is not None and self.group.agreed.is_set()):
            autolog.flush("a stop asked by SIGTERM as the fit ended")
            raise SystemExit(EXIT_CODE)

    def end(self) -> None:
        if self._installed:
            import signal

            self._installed = False
            signal.signal(signal.SIGTERM, self._previous if self._previous is not None else signal.SIG_DFL)


#: one agreement per process and group: its watcher outlives a fit (a second fit reuses it)
_GROUPS: Dict[Tuple[int, int], groupstop.GroupStop] = {}
