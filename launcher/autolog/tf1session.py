"""TF1 sessions: step, placement, the loss of the train op a ``Session.run`` runs, and values.

Imported only by ``launcher.autolog.patches`` once TensorFlow has been imported; imports nothing
of TensorFlow itself (``install`` gets the module). Session-era scripts often run
``sess.run([train_op, global_step])`` and never fetch the loss: it is computed for the
gradients all the same, so autolog fetches it alongside, at most once per read interval.

- ``tf.compat.v1.train.Optimizer`` remembers each train op's loss (``launcher.autolog.trainloss``);
- ``BaseSession.run``: the global step and placement as before (``launcher.autolog.global_step``);
  when the fetches hold a remembered train op, its loss is that step's loss: read from the result
  when the script fetches it too, else fetched as ``[fetches, loss]``, whose first item TF builds
  exactly as it builds the result of ``fetches`` alone (lists, tuples, namedtuples, dicts), so the
  script gets what it asked for. Only when the ops the loss needs beyond the train op's are a few
  stateless ones on the train op's devices (checked once per train op): the added fetch then runs
  nothing the step would not, and an error of that run is the step's own. Anything else that goes
  wrong is said once (``degraded``) and the plain call runs: a failure before any op ran;
- a scalar float tensor fetched alone after a train op ran (``sess.run(cross_entropy,
  feed_dict=validation)``) is a value under its tensor's name, not the loss: at once when no train
  op ran for ``quiet_s()``, else when no train op follows it before the session closes or the
  process exits; at most ``MAX_VALUE_NAMES`` names.

Every run walks its fetches for a remembered train op (about 1 us for ``[train_op, step]``,
against 60 us or more for TensorFlow's own ``Session.run`` of a trivial graph); everything else
waits for the read interval.

Stdlib-only at import, Python >= 3.9.
"""

from __future__ import annotations

import atexit
import functools
import threading
import time
import weakref
from typing import Any, Callable, Optional, Set, Tuple

from launcher.autolog import recorder as autolog
from launcher.autolog import trainloss
from launcher.autolog.global_step import read_global_step
from launcher.autolog.recorder import guarded, note, reader
from launcher.autolog.steptime import clock

stepwatch_now = time.perf_counter
_this_run = threading.local()

#: lone scalars reported as values: this many tensor names per process, the first ones
MAX_VALUE_NAMES = 8


def quiet_s() -> float:
    """How long without a train op before a lone scalar is taken as a value right away."""
    return max(2.0, 5 * reader.interval)


# -- Session.run ---------------------------------------------------------------------------------


class _SessionWatch:
    def __init__(self) -> None:
        self.next_read = 0.0  # the step and placement: on any run
        self.next_loss = 0.0  # the loss: on a run of a train op
        self.placed = False
        self.trained = 0  # runs of a remembered train op
        self.last_train = 0.0
        #: a lone scalar fetched soon after a train op: a value unless a train op follows
        self.pending: Optional[Tuple[str, Any]] = None
        #: the last train run's (train op, fetches, result): its loss is read at the close or exit
        self.last_run: Optional[Tuple[Any, Any, Any]] = None


class _Look:
    """What one ``Session.run`` holds for autolog, found before it runs."""

    __slots__ = ("added", "due", "lone", "loss", "train_op", "value", "watch")

    def __init__(self, watch: _SessionWatch, due: bool) -> None:
        self.watch = watch
        self.due = due
        self.train_op: Any = None
        self.loss: Any = None  # the train op's loss, when its value is wanted from this run
        self.added = False  # whether the loss is fetched by autolog (else by the script)
        self.value: Any = None
        self.lone: Optional[str] = None  # the name of a lone scalar fetched


_sessions: "weakref.WeakKeyDictionary[Any, _SessionWatch]" = weakref.WeakKeyDictionary()
_value_names: "Set[str]" = set()


def _look(session: Any, fetches: Any, now: float) -> Optional[_Look]:
    watch = _sessions.get(session)
    if watch is None:
        watch = _sessions[session] = _SessionWatch()
    graph = session.graph
    entry = trainloss.graphs.get(graph)
    train_op = trainloss.train_op_in(fetches, entry) if entry is not None and len(entry.by_op) else None
    if train_op is not None:  # this thread's run (queue runners run beside it)
        _this_run.trains = (watch, train_op)
    look: Optional[_Look] = None
    if now >= watch.next_read:
        look = _Look(watch, True)
    if train_op is not None:
        watch.trained += 1
        watch.last_train = now
        watch.pending = None
        if now >= watch.next_loss and entry is not None:
            look = look or _Look(watch, False)
            look.train_op = train_op
            trainloss.quietly(trainloss.ADD_LOSS, _choose_loss, look, entry, graph, fetches)
    elif watch.trained:
        lone = _callers(fetches)
        if _is_scalar_float(lone) and trainloss.graph_tensor(lone) is graph:
            look = look or _Look(watch, False)
            look.lone = lone.name[:-2] if lone.name.endswith(":0") else lone.name
    return look


def _callers(fetches: Any) -> Any:
    """The script's own part of the fetches: a ``MonitoredSession`` runs ``{"caller": fetches}``
    and its hooks' fetches beside (``_HookedSession.run``), its result is ``result["caller"]``."""
    return fetches["caller"] if type(fetches) is dict and "caller" in fetches else fetches


def _choose_loss(look: _Look, entry: trainloss.GraphLosses, graph: Any, fetches: Any) -> None:
    ref = entry.by_op.get(look.train_op)
    loss = ref() if ref is not None else None
    if loss is None or loss.graph is not graph:
        return
    if trainloss.fetches_loss(fetches, loss):
        look.loss = loss
    else:
        look.loss = trainloss.loss_to_add(entry, look.train_op, graph)
        look.added = look.loss is not None


def _is_scalar_float(value: Any) -> bool:
    if not isinstance(value, trainloss.types["Tensor"]):
        return False
    return bool(getattr(value.dtype, "is_floating", False)) and value.shape.rank == 0


def _run_adding_loss(original: Callable[..., Any], session: Any, fetches: Any, feed_dict: Any,
                     options: Any, run_metadata: Any, look: _Look) -> Any:
    """``fetches``' result, the loss's value kept in ``look``; the plain call if the fetch failed."""
    try:
        both = original(session, [fetches, look.loss], feed_dict, options, run_metadata)
    except trainloss.types["OpError"]:
        raise  # the step ran and failed: its error, as the script would have had it
    except Exception as exc:  # built before anything ran: never again for this train op
        autolog.degraded(trainloss.ADD_LOSS, exc)
        entry = trainloss.graphs.get(session.graph)
        if entry is not None:
            entry.addable[look.train_op] = False
        look.loss = None
        return original(session, fetches, feed_dict, options, run_metadata)
    look.value = both[1]
    return both[0]


def _after(tf: Any, run: Callable[..., Any], session: Any, fetches: Any, result: Any, look: _Look,
           now: float) -> None:
    watch = look.watch
    loss: Any = None
    if look.loss is not None:
        watch.next_loss = now + reader.interval
        loss = look.value if look.added else trainloss.quietly(
            trainloss.ADD_LOSS, trainloss.value_of, fetches, result, look.loss)
    if look.lone is not None:
        _lone_scalar(watch, look.lone, _callers(result), now)
    if not look.due:
        if loss is not None:
            note(loss=loss)
        return
    watch.next_read = now + reader.interval
    if not watch.placed:
        watch.placed = True
        try:
            variables = session.graph.get_collection(tf.compat.v1.GraphKeys.GLOBAL_VARIABLES)
            if variables:
                autolog.placement(list(variables))
        except Exception as exc:
            autolog.degraded("report the placement of a TF1 graph's variables", exc)
    step = read_global_step(tf, run, session)
    if loss is None and look.lone is None:
        try:
            loss = _fetched_loss(fetches, result)
        except Exception as exc:
            autolog.degraded("read the loss from Session.run's fetches", exc)
    if step is not None or loss is not None:
        note(step=step, loss=loss)


def _lone_scalar(watch: _SessionWatch, name: str, result: Any, now: float) -> None:
    if name not in _value_names and len(_value_names) >= MAX_VALUE_NAMES:
        return
    if now - watch.last_train >= quiet_s():
        _note_value(name, result)
    else:
        watch.pending = (name, result)


def _note_value(name: str, value: Any, step: Any = None) -> None:
    if name in _value_names or len(_value_names) < MAX_VALUE_NAMES:
        _value_names.add(name)
        note(step=step, values={name: value}, now=True)


def _named_loss(fetch: Any) -> bool:
    return not isinstance(fetch, (dict, list, tuple)) and "loss" in str(getattr(fetch, "name", "") or "").lower()


def _fetched_loss(fetches: Any, result: Any) -> Optional[float]:
    """The value of a fetched scalar whose tensor name says loss (``.../loss:0``), if any: the
    loss of a train op that no optimizer built (``tf.gradients`` and ``assign_sub``)."""
    value = trainloss.find(fetches, result, _named_loss, 0)
    try:
        return None if value is None else float(value)
    except (TypeError, ValueError):
        return None


def _last_loss(session: Any, last_run: Optional[Tuple[Any, Any, Any]]) -> Any:
    """The loss of the last train run if the script fetched it (what autolog added was noted)."""
    if last_run is None:
        return None
    train_op, fetches, result = last_run
    entry = trainloss.graphs.get(session.graph)
    ref = entry.by_op.get(train_op) if entry is not None else None
    loss = ref() if ref is not None else None
    if loss is None or not trainloss.fetches_loss(fetches, loss):
        return None
    return trainloss.value_of(fetches, result, loss)


def _last_session_read(tf: Any, run: Any, session: Any) -> None:
    """The global step read once more and the last train run's loss, noted (at close or exit)."""
    watch = _sessions.get(session)
    pending = watch.pending if watch is not None else None
    last_run = watch.last_run if watch is not None else None
    if watch is not None:
        watch.pending = watch.last_run = None
    step = None
    if run is not None and not getattr(session, "_closed", False):
        step = read_global_step(tf, run, session)
    loss = trainloss.quietly("read the loss of a TF1 session's last run", _last_loss, session, last_run)
    if pending is not None:
        note(loss=loss)
        _note_value(pending[0], pending[1], step)
    elif step is not None or loss is not None:
        note(step=step, loss=loss)


def _final_session_read(tf: Any, run: Any, session: Any) -> None:
    _last_session_read(tf, run, session)
    autolog.flush("Session.close")  # with the split, sent now


def _sessions_at_exit(tf: Any, run: Any) -> None:
    for session, watch in list(_sessions.items()):
        if watch.last_run is not None:
            _last_session_read(tf, run, session)


def _values_at_exit() -> None:
    """A lone scalar fetched after the last train op of a session the script never closed."""
    if not autolog._state.on:
        return
    for watch in list(_sessions.values()):
        if watch.pending is not None:
            pending, watch.pending = watch.pending, None
            guarded("values at exit", _note_value, pending[0], pending[1])


def install(tf: Any, wrap: Callable[[Any, str, Callable[..., Any]], None], module: Callable[[str], Any]) -> None:
    """Patch TF1's ``Optimizer`` and ``BaseSession`` (``wrap``: patches' method wrapper)."""
    trainloss.types.update(Tensor=tf.Tensor, Operation=tf.Operation, OpError=tf.errors.OpError)
    trainloss.patch_optimizer(getattr(module("tensorflow.python.training.optimizer"), "Optimizer", None), wrap)
    cls = getattr(module("tensorflow.python.client.session"), "BaseSession", None)
    run_original = getattr(cls, "__dict__", {}).get("run")  # the global step's reads at close
    run_original = getattr(run_original, "__wrapped__", run_original)

    def make_run(original: Callable[..., Any]) -> Callable[..., Any]:
        def run(self: Any, fetches: Any, feed_dict: Any = None, options: Any = None,
                run_metadata: Any = None) -> Any:
            if not autolog._state.on:
                return original(self, fetches, feed_dict, options, run_metadata)
            now = time.monotonic()
            _this_run.trains = None
            look = guarded("Session.run", _look, self, fetches, now)
            trains = _this_run.trains
            started = stepwatch_now()
            if look is not None and look.added:
                result = _run_adding_loss(original, self, fetches, feed_dict, options, run_metadata, look)
            else:
                result = original(self, fetches, feed_dict, options, run_metadata)
            if trains is not None:  # a train op's run: a step, timed; the reader thread turns them into shares
                clock.call_done(started, stepwatch_now())
                trains[0].last_run = (trains[1], fetches, result)
                if reader._thread is None:
                    reader.start()
            if look is not None and autolog._state.on:
                guarded("Session.run", _after, tf, original, self, fetches, result, look, now)
            return result
        return run

    wrap(cls, "run", make_run)

    def make_close(original: Callable[..., Any]) -> Callable[..., Any]:
        def close(self: Any) -> Any:
            # the steps since the last read would be lost with the session: read once more
            if autolog._state.on and _sessions.get(self) is not None:
                guarded("Session.close", _final_session_read, tf, run_original, self)
            return original(self)
        return close

    wrap(cls, "close", make_close)
    atexit.register(_values_at_exit)
    autolog.exit_reads.append(functools.partial(_sessions_at_exit, tf, run_original))
