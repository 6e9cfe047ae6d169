"""One call per host at once, for the preflight, that a stop can leave.

The preflight's main thread waits on the hosts' threads; a stop signal before any task started
raises in that thread (supervise/stopsignals.py). ``ThreadPoolExecutor``'s own ``with`` would
then wait for every host's call, however long one hangs (a host whose python does not answer, a
lock a thread waits on forever), and the stop with it. Here an exception leaving the wait gives
the calls under way a bounded while (so that a channel one of them is opening is recorded and
closed with the rest), cancels the ones not started, and goes on.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from concurrent.futures import ThreadPoolExecutor
from concurrent.futures import wait as wait_futures
from typing import TypeVar

T = TypeVar("T")
R = TypeVar("R")

#: how long a stop (or a host's error) waits for the other hosts' calls under way
LEAVE_WAIT_S = 10.0
MAX_THREADS = 32


def each_host(fn: Callable[[T], R], items: Iterable[T], leave_wait: float = LEAVE_WAIT_S) -> list[R]:
    """``fn(item)`` for every item at once; the results in the items' order. The first error
    (or a stop raised in this thread) is raised once the others ended, or after ``leave_wait``."""
    todo = list(items)
    if not todo:
        return []
    pool = ThreadPoolExecutor(max_workers=min(MAX_THREADS, len(todo)), thread_name_prefix="host")
    try:
        futures = [pool.submit(fn, item) for item in todo]
        try:
            return [future.result() for future in futures]
        except BaseException:
            for future in futures:
                future.cancel()
            wait_futures(futures, timeout=leave_wait)
            raise
    finally:
        pool.shutdown(wait=False, cancel_futures=True)
