"""Autolog: step, loss and placement from unmodified TensorFlow programs.

The agent puts a ``sitecustomize`` (``launcher/autolog/startup.py``, packed as
``distlaunch_site/sitecustomize.py`` in the zipapp) on the task's ``PYTHONPATH``; it installs
the import hook of ``launcher.autolog.hook`` and nothing else. When the task itself imports
``tensorflow``, ``keras`` or ``tf_keras``, the hook runs ``launcher.autolog.patches`` against
the module just loaded, which imports this module: the state, the reporter and the step
reader thread. A task that never imports TensorFlow pays for one finder on ``sys.meta_path``.

What it reports goes out like ``report.report()`` (``@distlaunch {json}`` lines, rate
limited), marked ``"source": "autolog"`` so that the agent lets an explicit ``report()`` or a
``[metrics]`` regex win for the same name. ``flush`` reads once more where training ends and at
the exit: a job shorter than the read interval still ends with its last step and loss.

Any exception inside the instrumentation prints one warning line on stderr and turns autolog
off for the rest of the task: it never breaks the script. A read that has other ways to go
(the TF1 global step: ``get_global_step()``, the GLOBAL_STEP collection, the name
``global_step``; a TF1 train op's loss fetched alongside it) is the exception: what finally
failed is said once per process (``degraded``), autolog staying on.

Stdlib-only at import and Python >= 3.9.
"""

from __future__ import annotations

import atexit
import math
import numbers
import os
import sys
import threading
import time
import weakref
from collections import deque
from typing import Any, Callable, Dict, List, Optional, Sequence

from launcher import report
from launcher.autolog.steptime import clock
from launcher.protocol.metricnames import STEP_IS_CALLS

#: agent -> task: seconds between optimizer reads (the profile's ``sample_interval``)
INTERVAL_ENV = "DISTLAUNCH_SAMPLE_INTERVAL"
#: overrides INTERVAL_ENV for autolog's reads only (e.g. a profile's env, for fast tiny steps)
OWN_INTERVAL_ENV = "DISTLAUNCH_AUTOLOG_INTERVAL"
DEFAULT_READ_INTERVAL_S = 1.0
LOSS_SLOTS = 64
SOURCE = "autolog"


class _State:
    def __init__(self) -> None:
        self.on = True
        self.warned = False
        self.lock = threading.Lock()
        self.patched: set = set()
        self.degraded: set = set()  # the ways of reading already said to have failed


_state = _State()


def active() -> bool:
    return _state.on


def fail(where: str, exc: BaseException) -> None:
    """Turn autolog off after an internal error, saying so once on the task's stderr."""
    _state.on = False
    with _state.lock:
        if _state.warned:
            return
        _state.warned = True
    try:
        sys.stderr.write("distlaunch autolog: %s failed (%s: %s); autolog is off for this task, "
                         "the script runs on unchanged\n" % (where, type(exc).__name__, exc))
        sys.stderr.flush()
    except Exception:
        pass


def degraded(what: str, exc: BaseException, once: Optional[str] = None) -> None:
    """Say once per process (per ``once``, default ``what``) that one way of reading failed;
    autolog stays on (others go on)."""
    key = what if once is None else once
    with _state.lock:
        if key in _state.degraded:
            return
        _state.degraded.add(key)
    try:
        sys.stderr.write("distlaunch autolog: could not %s (%s: %s); autolog goes on without it\n"
                         % (what, type(exc).__name__, exc))
        sys.stderr.flush()
    except Exception:
        pass


def guarded(where: str, fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
    """``fn(*args)``, or None after turning autolog off if it raised."""
    if not _state.on:
        return None
    try:
        return fn(*args, **kwargs)
    except Exception as exc:
        fail(where, exc)
        return None


def _read_interval() -> float:
    try:
        value = float(os.environ.get(OWN_INTERVAL_ENV) or os.environ.get(INTERVAL_ENV) or DEFAULT_READ_INTERVAL_S)
    except ValueError:
        return DEFAULT_READ_INTERVAL_S
    return value if math.isfinite(value) and value > 0 else DEFAULT_READ_INTERVAL_S


# -- what is reported ----------------------------------------------------------------------------

reporter = report._MetricReporter(report._interval_from_env(), source=SOURCE)


_newest_step = [-1]


def note(step: Any = None, loss: Any = None, values: Optional[Dict[str, Any]] = None,
         now: bool = False, final: bool = False) -> None:
    """Store the newest values (references, converted at emit) and emit when due. ``final``: the
    step the script ends with (the exit's reading), sent even where it is below one sent before."""
    r = reporter
    if isinstance(step, numbers.Integral):
        # sources disagree by a step or two (a summary written for the step just run, a global
        # step read after it): the line carries the newest step known, never an older one; but a
        # counter may go back for good (Keras 3's iterations under ParameterServerStrategy: two
        # workers' read-then-assign increments overwrite each other), and the end is what it says
        if step < _newest_step[0] and not final:
            step = None
        else:
            _newest_step[0] = int(step)
    if step is not None:
        r.step = step
    if loss is not None:
        r.loss = loss
    if values:
        r.values.update(values)
    r.pending = True
    if now or time.monotonic() - r.last_emit >= r.min_interval:
        r.emit()


def placement(variables: Sequence[Any]) -> None:
    report.report_placement(variables, source=SOURCE)


# -- the reader thread ---------------------------------------------------------------------------


class StepReader:
    """Reads step (and a train step's loss) at the sampling interval, off the training thread.

    Sources register here: optimizers (their ``iterations``), the newest result of a function
    that trains (a tensor, or a ``RemoteValue`` read only once it is done) and callables that
    give a step (a TF1 graph's global step); where none gives a step, the train calls counted so
    far are the step, sent with ``STEP_IS_CALLS``. Each tick reads them and notes what changed.
    """

    def __init__(self) -> None:
        self.interval = _read_interval()
        self.optimizers: "weakref.WeakSet[Any]" = weakref.WeakSet()
        self.step_sources: List[Callable[[], Optional[int]]] = []
        # the newest train-step results, newest last: a RemoteValue is read only once done, and
        # while a coordinator keeps scheduling, the newest one is still queued
        self.loss_slots: "deque[tuple[Any, Callable[[Any], Optional[float]]]]" = deque(maxlen=LOSS_SLOTS)
        self.tick_hooks: List[Callable[[], None]] = []
        self.step_now: Optional[int] = None  # the step this tick read
        self.steps_are_calls = False  # whether it is the train calls' count
        #: a tf.function or a coordinator's schedule trained here: where nothing gives a step, their
        #: calls are the step (a TF1 session's runs are not: its global step goes out from its runs)
        self.counts_calls = False
        self._thread: Optional[threading.Thread] = None
        self._last_step: Optional[int] = None
        self._last_loss_ref: Any = None
        self._lock = threading.Lock()
        #: one reading at a time (a tick, a flush), whatever thread asks, and the thread in it
        self._reading = threading.Lock()
        self._reading_in: Optional[int] = None
        self._exit = (threading.Event(), threading.Event())  # the last reading asked for, done
        #: the reader thread's own CPU seconds and ticks so far, updated after each tick (what
        #: the reader costs the task, read by benchmarks/autolog_overhead.py)
        self.cpu_s = 0.0
        self.ticks = 0

    def add_optimizer(self, optimizer: Any) -> None:
        try:
            self.optimizers.add(optimizer)
        except TypeError:  # not weak-referenceable: skip rather than keep it alive
            return
        self.start()

    def offer_loss(self, value: Any, read: Callable[[Any], Optional[float]]) -> None:
        """Keep a reference to a train-step result (a few slots, no work on the training thread)."""
        self.loss_slots.append((value, read))

    def start(self) -> None:
        with self._lock:
            if self._thread is not None:
                return
            self._thread = threading.Thread(target=self._run, name="distlaunch-autolog", daemon=True)
            self._thread.start()

    def _run(self) -> None:
        asked, done = self._exit
        while _state.on:
            if asked.wait(self.interval):  # the interpreter exits: the last reading, on this thread
                flush("exit", EXIT_FLUSH_TIMEOUT_S, at_exit=True)
                done.set()
                return
            self.reading(-1, guarded, "step reader", self.tick)
            self.ticks += 1
            self.cpu_s = time.thread_time()  # this thread's CPU since it started

    def reading(self, timeout: float, fn: Callable[..., Any], *args: Any) -> bool:
        """``fn(*args)`` alone among ticks and flushes, after waiting ``timeout`` s at most (-1: for
        good) for the one under way; False if it did not run (nor inside this thread's own: a
        session the garbage collector closes during a tick)."""
        me = threading.get_ident()
        if self._reading_in == me or not self._reading.acquire(timeout=timeout):
            return False
        self._reading_in = me
        try:
            fn(*args)
        finally:
            self._reading_in = None
            self._reading.release()
        return True

    def read_step(self) -> Optional[int]:
        best: Optional[int] = None
        for optimizer in list(self.optimizers):
            step = _int_of(getattr(optimizer, "iterations", None))
            if step is not None and (best is None or step > best):
                best = step
        for source in list(self.step_sources):
            step = source()
            if step is not None and (best is None or step > best):
                best = step
        self.steps_are_calls = best is None and self.counts_calls and clock.calls > 0  # no step variable
        return clock.calls if self.steps_are_calls else best

    def tick(self, final: bool = False) -> None:
        """One reading; ``final``: the exit's, whose step is sent as the one the script ended with."""
        step = self.step_now = self.read_step()  # once a tick: the hooks read it here
        for hook in list(self.tick_hooks):
            hook()
        if self.steps_are_calls:  # on whatever goes out with this step (a split, a loss)
            reporter.values[STEP_IS_CALLS] = 1
        loss: Optional[float] = None
        for value, read in reversed(list(self.loss_slots)):
            if value is self._last_loss_ref:
                break  # nothing newer is readable yet
            loss = read(value)
            if loss is not None:
                self._last_loss_ref = value
                break
        if step is not None and (step != self._last_step or (final and step != _newest_step[0])):
            self._last_step = step
            note(step=step, loss=loss, now=True, final=final)
        elif loss is not None:
            note(loss=loss, now=True)


reader = StepReader()


# -- the last reading ----------------------------------------------------------------------------

#: the longest the exit waits for the last reading (a parameter server gone): then it goes on
EXIT_FLUSH_TIMEOUT_S = 5.0
#: the longest a flush where training ends waits for a tick under way
FLUSH_WAIT_S = 2.0
#: a coordinator's join flushes while flushes take at most this share of the time
JOIN_FLUSH_SHARE = 0.05
#: run by the exit's flush after the reader's reads (a TF1 session never closed)
exit_reads: List[Callable[[], None]] = []
#: the process that loaded autolog (a forked child never reads), whether it exited, the next join flush
_flushes = {"pid": os.getpid(), "exited": False, "join": 0.0}


def flush(where: str, wait_s: float = FLUSH_WAIT_S, at_exit: bool = False) -> bool:
    """Read the step and the newest loss once more and send them now, with the split if pending:
    where training ends (Keras ``fit``, a coordinator's ``join``, a TF1 session's close) and at the
    exit, so that a job ending between two ticks sends the numbers it ended with. On the calling
    thread, one reading at a time; True if it ran. Never raises: a failure is said once, autolog
    staying on, and let go unsaid at the exit (TensorFlow may be partly torn down)."""
    return _state.on and reader.reading(wait_s, _read_last, where, at_exit)


def _read_last(where: str, at_exit: bool) -> None:
    read: Callable[[], None] = (lambda: reader.tick(final=True)) if at_exit else reader.tick
    for part in [read, *(exit_reads if at_exit else ()), reporter.emit]:  # emit: what is pending
        try:
            part()
        except Exception as exc:
            if not at_exit:
                degraded("read the last step and loss at %s" % where, exc, once="flush")


def flush_after_join() -> None:
    """Flush unless flushes would take over ``JOIN_FLUSH_SHARE`` of the time (the exit sends the rest)."""
    started = time.monotonic()
    if started >= _flushes["join"]:
        flush("a coordinator's join")
        ended = time.monotonic()
        _flushes["join"] = ended + (ended - started) / JOIN_FLUSH_SHARE


def _flush_at_exit() -> None:
    """The last reading, by the reader thread (a new thread may not start at exit), waited for
    ``EXIT_FLUSH_TIMEOUT_S`` at most: an exit never hangs on it. No reader: nothing trained, what
    is pending goes out unread."""
    if _flushes["exited"] or os.getpid() != _flushes["pid"] or not _state.on:
        return
    _flushes["exited"] = True
    thread = reader._thread
    try:
        if thread is None:
            reporter.emit()
        elif thread.is_alive():
            reader._exit[0].set()
            reader._exit[1].wait(EXIT_FLUSH_TIMEOUT_S)
    except Exception:
        pass


atexit.register(_flush_at_exit)


def _int_of(value: Any) -> Optional[int]:
    if value is None:
        return None
    try:
        # a variable's __float__ reads it with one op; its .numpy() (report._to_float) takes a
        # name scope and two (read, identity): from the reader thread, while the training thread
        # runs, ~0.3 ms of CPU against ~0.5 ms, the most of a tick
        number: Optional[float] = float(value)
    except Exception:
        number = report._to_float(value)
    return int(number) if number is not None and math.isfinite(number) else None
