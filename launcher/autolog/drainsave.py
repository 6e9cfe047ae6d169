"""A planned stop loses nothing (issue 54 §5): SIGTERM during Keras ``fit`` saves, then exits.

``distlaunch drain``, a preemption notice and a restart's stop send a task SIGTERM and give it its
grace. Unhandled, SIGTERM ends the process wherever it is, and the move redoes every step since
the last checkpoint. Where the script trains with Keras ``fit`` and a ``BackupAndRestore`` that
saves by batches (``save_freq=N``), autolog's callback takes SIGTERM instead: at the next batch
end it has every such backup save that batch (tf_keras resumes at the next batch; Keras 3
restores epochs only, so it resumes at the start of that epoch with these weights, as after its
own batch saves) and exits 143, as SIGTERM would, without ``on_train_end`` (which deletes the
backup). It stays out of the way where SIGTERM is not its to take: a handler the script or
TensorFlow installed (``PreemptionCheckpointHandler``, tf_keras' ``save_before_preemption``), a
``fit`` off the main thread, a job of more than one MultiWorkerMirrored worker (the workers must
stop at the same step: that is what ``PreemptionCheckpointHandler`` agrees on), or
ParameterServer training. Stdlib-only, Python >= 3.9.
"""

from __future__ import annotations

import json
import os
import threading
from typing import Any, List, Optional

from launcher.autolog import recorder as autolog

#: the exit code of a task that stopped on SIGTERM (as the signal itself would give)
EXIT_CODE = 128 + 15


def _is_backup(callback: Any) -> bool:
    return any(cls.__name__ == "BackupAndRestore" for cls in type(callback).__mro__)


def _saves_by_batch(callback: Any) -> bool:
    freq = getattr(callback, "save_freq", "epoch")
    return isinstance(freq, int) and not isinstance(freq, bool) and freq > 0


def _workers_in_tf_config() -> int:
    try:
        cluster = json.loads(os.environ.get("TF_CONFIG") or "{}").get("cluster") or {}
    except ValueError:
        return 1
    return len(cluster.get("chief") or []) + len(cluster.get("worker") or [])


def _may_stop_alone(model: Any) -> bool:
    """Can this process stop at a batch end of its own choosing (no peer waits in a collective)?"""
    strategy = getattr(model, "distribute_strategy", None)
    name = type(strategy).__name__ if strategy is not None else ""
    if "ParameterServer" in name:
        return False
    return not ("MultiWorker" in name and _workers_in_tf_config() > 1)


class FitStop:
    """SIGTERM taken for one ``fit``: asked at the signal, carried out at the next batch end."""

    def __init__(self) -> None:
        self.backups: List[Any] = []
        self.asked = False
        self._installed = False
        self._previous: Any = None

    def begin(self, callbacks: List[Any], model: Any) -> None:
        self.backups = [c for c in callbacks if _is_backup(c) and _saves_by_batch(c)]
        if not self.backups or threading.current_thread() is not threading.main_thread():
            return
        if not _may_stop_alone(model):
            return
        import signal

        if signal.getsignal(signal.SIGTERM) is not signal.SIG_DFL:
            return  # the script's own handler, or TensorFlow's: theirs to act on
        self._previous = signal.signal(signal.SIGTERM, self._on_signal)
        self._installed = True

    def _on_signal(self, signum: int, frame: Optional[Any]) -> None:
        self.asked = True  # a handler only sets a flag: the save happens at the batch end

    def batch_end(self, batch: int) -> None:
        if not self.asked:
            return
        for backup in self.backups:
            save = getattr(backup, "_backup", None)  # tf_keras: the epoch and this batch, resumed after it
            if save is not None and getattr(backup, "_training_state", None) is not None:
                save(epoch=getattr(backup, "_current_epoch", 0), batch=batch)
            elif getattr(backup, "_save_model", None) is not None:  # Keras 3
                backup._save_model()
        autolog.flush("a stop asked by SIGTERM")
        self.end()
        raise SystemExit(EXIT_CODE)

    def end(self) -> None:
        if self._installed:
            import signal

            self._installed = False
            signal.signal(signal.SIGTERM, self._previous if self._previous is not None else signal.SIG_DFL)
