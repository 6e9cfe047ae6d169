"""One worker thread per host for the supervisor's blocking host work (starts, stops, sweeps).

``concurrent.futures.ThreadPoolExecutor`` refuses new work once the interpreter has begun to
shut down ("cannot schedule new futures after interpreter shutdown"): a launcher whose main
thread was leaving (a second signal, a broken stdout) lost its teardown half way, and the tasks
ran on until their host agents' orphan grace. This worker takes work until it is shut down by
its owner and nothing else; its thread is a daemon, so it never holds the process at exit.
"""

from __future__ import annotations

import queue
import threading
from collections.abc import Callable
from concurrent.futures import Future
from typing import Any, TypeVar

T = TypeVar("T")


class HostWorker:
    """Runs the functions given to ``submit`` one after the other on its own thread."""

    def __init__(self, name: str) -> None:
        self._jobs: queue.SimpleQueue[tuple[Callable[[], Any], Future[Any]] | None] = queue.SimpleQueue()
        self._closed = False
        self._thread = threading.Thread(target=self._work, name=name, daemon=True)
        self._thread.start()

    def submit(self, fn: Callable[..., T], /, *args: Any) -> Future[T]:
        future: Future[T] = Future()
        if self._closed:
            future.set_exception(RuntimeError("the host worker was shut down"))
        else:
            self._jobs.put((lambda: fn(*args), future))
        return future

    def shutdown(self, wait: bool = False) -> None:
        """No new work; what was submitted is still done. ``wait``: until it is."""
        self._closed = True
        self._jobs.put(None)
        if wait and threading.current_thread() is not self._thread:
            self._thread.join()

    def _work(self) -> None:
        while True:
            job = self._jobs.get()
            if job is None:
                return
            fn, future = job
            if not future.set_running_or_notify_cancel():
                continue
            try:
                result = fn()
            except BaseException as exc:  # handed to whoever waits on the future, as an executor does
                future.set_exception(exc)
            else:
                future.set_result(result)
