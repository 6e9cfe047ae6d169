"""The MultiWorkerMirrored workers of one Keras ``fit`` agree on the batch to save at and stop after.

A drain or a preemption notice sends SIGTERM to some workers of a group, at moments that differ.
A save under MultiWorkerMirroredStrategy is made by every worker at the same batch (the backups
run collectives), and a worker that stops alone leaves its peers waiting in the next step's
all-reduce: a worker cannot take a stop of its own. The workers agree through TensorFlow's
coordination service, which MultiWorkerMirroredStrategy starts (its key-value store is shared by
the group, and a key may be inserted once):

1. every worker watches the key ``distlaunch/stop_after`` on a thread of its own; when the key
   appears it keeps the batch count it holds and acknowledges (``distlaunch/stop_ack/<id>``);
2. the first worker to take SIGTERM, at its next batch end (``done`` batches of this fit), inserts
   ``done + 1`` and waits until every worker has acknowledged before it trains that batch. No
   worker can finish batch ``done + 1`` without it, and each check happens after a finished
   batch, so every worker sees the key before it passes that batch: each saves at ``done + 1``
   and stops (the way TensorFlow's own ``PreemptionCheckpointHandler`` agrees);
3. a worker whose insert fails (a peer's came first) goes on until its watcher hands it the step.

The key dies with the group: the coordination service is the leader task's, and a restart is a
new service. Stdlib-only at import, Python >= 3.9.
"""

from __future__ import annotations

import json
import os
import threading
import time
from typing import Any, Optional

STOP_KEY = "distlaunch/stop_after"
ACK_KEY = "distlaunch/stop_ack/"
#: how long the first worker waits, in all, for the key's insert and every peer's acknowledgement
#: before it stops without a save: below the default grace (10 s), so a SIGKILL never comes first
AGREE_S = 8.0
#: the watcher asks for the key this long at a time, so it can end with the fit's process
WATCH_MS = 1000


def worker_ids() -> tuple[int, int]:
    """This task's id among the group's workers (chief first) and their number, from TF_CONFIG."""
    try:
        config = json.loads(os.environ.get("TF_CONFIG") or "{}")
    except ValueError:
        return 0, 1
    cluster = config.get("cluster") or {}
    chiefs, workers = len(cluster.get("chief") or []), len(cluster.get("worker") or [])
    task = config.get("task") or {}
    kind, index = task.get("type"), int(task.get("index") or 0)
    me = index if kind == "chief" else chiefs + index
    return me, chiefs + workers


def _context() -> Any:
    from tensorflow.python.eager import context  # imported only once TensorFlow runs a fit

    return context.context()


def service_running() -> bool:
    """Does this process take part in a coordination service (whose store the workers share)?"""
    try:
        return bool(_context().coordination_service)
    except Exception:  # an older or a different TensorFlow: no agreement possible
        return False


class GroupStop:
    """One worker's side of the agreement; ``due`` is asked at each batch end."""

    def __init__(self, me: int, workers: int) -> None:
        self.me = me
        self.workers = workers
        #: the batch count (of this fit) after which the group saves and stops, once agreed
        self.target: Optional[int] = None
        self.agreed = threading.Event()
        self._watcher: Optional[threading.Thread] = None

    def watch(self) -> None:
        """Start watching the key (once per process: the key is the group's, not one fit's)."""
        if self._watcher is not None:
            return
        self._watcher = threading.Thread(target=self._wait_for_key, name="distlaunch-group-stop", daemon=True)
        self._watcher.start()

    def _wait_for_key(self) -> None:
        try:
            ctx = _context()
        except Exception:
            return
        while True:
            try:
                value = ctx.get_config_key_value(STOP_KEY, WATCH_MS)  # a bounded ask, asked again
                break
            except Exception as exc:
                if type(exc).__name__ != "DeadlineExceededError":
                    return  # the service went away (the job ended): nothing to agree
        try:
            self.target = int(value)
            self.agreed.set()
            ctx.set_config_key_value(f"{ACK_KEY}{self.me}", "1")
        except Exception:
            return

    def propose(self, done: int) -> bool:
        """This worker took SIGTERM after ``done`` batches: ask the group to stop after the next.
        False when the group could not be told (the caller stops without a save)."""
        ctx = _context()
        deadline = time.monotonic() + AGREE_S
        outcome: list[Optional[BaseException]] = []

        def insert() -> None:  # the insert has no deadline of its own: a service gone would hang it
            try:
                ctx.set_config_key_value(STOP_KEY, str(done + 1))
                outcome.append(None)
            except Exception as exc:
                outcome.append(exc)

        inserter = threading.Thread(target=insert, name="distlaunch-group-stop-insert", daemon=True)
        inserter.start()
        inserter.join(AGREE_S)
        if not outcome:
            return False  # the service did not answer: stop without a save
        if outcome[0] is not None:  # TensorFlow's errors, named without importing them
            # inserted already: a peer's SIGTERM came first, and the watcher hands this worker its step
            return type(outcome[0]).__name__ == "AlreadyExistsError"
        try:
            for peer in range(self.workers):
                left_ms = int((deadline - time.monotonic()) * 1000)
                if left_ms <= 0:
                    return False
                ctx.get_config_key_value(f"{ACK_KEY}{peer}", left_ms)
        except Exception:  # a peer that never answered: no save the group can make
            return False
        return True

    def due(self, done: int) -> bool:
        return self.agreed.is_set() and self.target == done
