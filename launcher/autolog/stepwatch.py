"""The TensorFlow side of the step-time split (``launcher.autolog.steptime`` says what is measured).

Installed by ``patches`` once TensorFlow is imported. Three kinds of patch, each guarded (an
error turns the split off, never the script):

- ``gen_dataset_ops.iterator_get_next`` / ``_as_optional`` and ``collective_ops.all_reduce_v2`` /
  ``all_gather_v2``: eagerly, two clock reads around the op; while a function is traced, two
  ``Timestamp`` ops around the op and an ``AssignAddVariableOp`` of their difference into one
  float64 resource per part on this task's CPU. Not inside XLA clusters (no Timestamp there) nor
  in functions a ParameterServerStrategy coordinator sends to workers (the resource would be
  the coordinator's);
- the coordinator's ``ClusterCoordinator.schedule`` and ``join`` (time blocked) and each
  worker thread's ``_process_closure`` (closures finished per worker, and their latency);
- step markers for a profiler capture: while a capture runs (``trace.enabled()``, one C call),
  each train call is a ``TraceMe("train", step_num=N)``, which TensorFlow's step analysis needs.
"""

from __future__ import annotations

import functools
import itertools
import os
import threading
import time
import weakref
from typing import Any, Callable, Dict, Tuple

from launcher.autolog import profilersafety, steptime
from launcher.autolog import recorder as autolog
from launcher.autolog.steptime import clock

_now = steptime._now
_tf: Dict[str, Any] = {}
#: (part, id of the train function) -> (shared name, eager handle, weak reference to the function)
_accumulators: Dict[Tuple[str, int], Tuple[str, Any, Any]] = {}
_step_numbers = itertools.count()
#: the attribute of a train function that holds its timed twin (None: it has none)
TWIN_ATTR = "_distlaunch_timed_twin"
#: "0" turns the split off for a process (the profile's env); on by default
ENABLE_ENV = "DISTLAUNCH_STEP_TIME"


def enabled() -> bool:
    return os.environ.get(ENABLE_ENV, "1").strip().lower() not in ("0", "false", "no", "off")


def install(module: Callable[[str], Any], wrap: Callable[..., None]) -> None:
    start_profiler_server(module)
    if not enabled():
        clock.on = False
        return
    ops = module("tensorflow.python.framework.ops")
    gen_dataset = module("tensorflow.python.ops.gen_dataset_ops")
    collective = module("tensorflow.python.ops.collective_ops")
    _tf.update(
        ops=ops, context=module("tensorflow.python.eager.context"),
        dtypes=module("tensorflow.python.framework.dtypes"),
        constant=module("tensorflow.python.framework.constant_op"),
        resource=module("tensorflow.python.ops.gen_resource_variable_ops"),
        logging=module("tensorflow.python.ops.gen_logging_ops"),
        flow=module("tensorflow.python.ops.control_flow_util"),
        strategy=module("tensorflow.python.distribute.distribute_lib"),
        trace=module("tensorflow.python.profiler.trace"),
        save=module("tensorflow.python.saved_model.save_context"))
    if any(v is None for v in _tf.values()):
        clock.on = False
        return
    for name in ("iterator_get_next", "iterator_get_next_as_optional"):
        _replace(gen_dataset, name, "input")
    for name in ("all_reduce_v2", "all_gather_v2"):
        _replace(collective, name, "peers")
    coordinator = module("tensorflow.python.distribute.coordinator.cluster_coordinator")
    wrap(getattr(coordinator, "ClusterCoordinator", None), "join", _timed_join)
    wrap(getattr(coordinator, "Worker", None), "_process_closure", _timed_closure)
    remote = module("tensorflow.python.distribute.coordinator.values")
    wrap(getattr(remote, "RemoteValueImpl", None), "_wait_and_maybe_error", _timed_join)  # fetch() waits
    autolog.reader.tick_hooks.append(_tick)


def start_profiler_server(module: Callable[[str], Any]) -> None:
    """TensorFlow's profiler server on the port the plan gave this task, started only once a
    capture asks for it (``steptime.PROFILER_WANTED`` appears in the task's dir: `distlaunch profile`
    makes it), never by default: it answers anyone who reaches the port."""
    port = os.environ.pop(steptime.PROFILER_PORT_ENV, None)  # not for the task's own children
    stacks = os.environ.get("DISTLAUNCH_STACKS_FILE")
    if not port or not stacks:
        return
    try:  # whether a capture would crash this task (a collective leader elsewhere): from the start
        profilersafety.watch(module)
    except Exception as exc:
        autolog.degraded("tell whether a profiler capture is safe here", exc)
    wanted = os.path.join(os.path.dirname(stacks), steptime.PROFILER_WANTED)
    threading.Thread(target=_serve_when_asked, args=(module, int(port), wanted), name="distlaunch-profiler",
                     daemon=True).start()


def _serve_when_asked(module: Callable[[str], Any], port: int, wanted: str) -> None:
    while not os.path.exists(wanted):
        time.sleep(0.5)
    try:
        module("tensorflow.python.profiler.profiler_v2").start_server(port)
    except Exception as exc:  # the port taken meanwhile, a TensorFlow without it: no captures
        autolog.degraded("start the profiler server on port %s" % port, exc)


def _replace(owner: Any, name: str, part: str) -> None:
    original = getattr(owner, name, None) if owner is not None else None
    if original is None or getattr(original, "_distlaunch_wrapped", False):
        return
    wrapper = functools.wraps(original)(_timed_op(original, part))
    wrapper._distlaunch_wrapped = True  # type: ignore[attr-defined]
    setattr(owner, name, wrapper)


def _timed_op(original: Callable[..., Any], part: str) -> Callable[..., Any]:
    def timed(*args: Any, **kwargs: Any) -> Any:
        if not (clock.on and autolog._state.on):
            return original(*args, **kwargs)
        if _tf["context"].executing_eagerly():
            if part != "input" or not steptime.between_calls():
                return original(*args, **kwargs)
            started = _now()
            try:
                return original(*args, **kwargs)
            finally:  # a Python loop's own iterator, between its train calls
                clock.eager_input_s += _now() - started
        owner = steptime.calling.__dict__.get("fn")
        if owner is None or not steptime.calling.__dict__.get("timing") or not _traceable(part):
            return original(*args, **kwargs)
        try:
            first = _stamp(args[0] if part == "peers" and args else None)
        except Exception as exc:
            _off("timing %s in a traced function" % part, exc)
            return original(*args, **kwargs)
        ops = _tf["ops"]
        with ops.control_dependencies([first]):
            result = original(*args, **kwargs)
        try:
            outputs = result if isinstance(result, (list, tuple)) else [result]
            last = _stamp(outputs)
            _add(_accumulator(part, owner), last, first)
        except Exception as exc:
            _off("timing %s in a traced function" % part, exc)
        return result
    return timed


def _traceable(part: str) -> bool:
    """Whether Timestamp ops may go into the graph being built: not a TF1 graph, not XLA, not a
    function a ParameterServerStrategy coordinator sends to workers, not a strategy with several
    local devices (the Timestamps, stateful ops, are run in program order: one device's stamp
    after its all-reduce would hold the next device's, which that all-reduce waits for)."""
    ops = _tf["ops"]
    if not ops.executing_eagerly_outside_functions():  # a TF1 graph: nothing would initialise ours
        return False
    if _tf["flow"].GraphOrParentsInXlaContext(ops.get_default_graph()):
        return False
    if _tf["save"].in_save_context():
        return False
    strategy = _tf["strategy"]
    if not strategy.has_strategy():
        return True
    current = strategy.get_strategy()
    if "ParameterServer" in type(current).__name__:
        return False
    devices = getattr(current.extended, "worker_devices", None) or ()
    return len(devices) <= 1


def _stamp(after: Any) -> Any:
    ops = _tf["ops"]
    deps = [t for t in (after if isinstance(after, (list, tuple)) else [after]) if t is not None]
    with ops.colocate_with(None, ignore_existing=True), ops.device(None), ops.control_dependencies(deps):
        return _tf["logging"].timestamp()


def _add(name: str, last: Any, first: Any) -> None:
    """Add ``last - first`` to the resource ``name``, found by its shared name inside the function:
    the function captures nothing of ours (a SavedModel of it saves as before)."""
    ops, dtypes, resource = _tf["ops"], _tf["dtypes"], _tf["resource"]
    with ops.colocate_with(None, ignore_existing=True), ops.device("/device:CPU:0"):
        handle = resource.var_handle_op(dtype=dtypes.float64, shape=[], shared_name=name)
        resource.assign_add_variable_op(handle, last - first)


def _accumulator(part: str, owner: Any) -> str:
    """The shared name of ``part``'s float64 resource for the train function ``owner`` (created
    eagerly on this task's CPU, outside any strategy's variable creators); the reader thread sums
    those of the functions known to train (an evaluation's input is no step's input)."""
    key = (part, id(owner))
    found = _accumulators.get(key)
    if found is not None:
        return str(found[0])
    name = "distlaunch_step_%s_%d_%d" % (part, os.getpid(), len(_accumulators))
    ops, dtypes, resource = _tf["ops"], _tf["dtypes"], _tf["resource"]
    with ops.init_scope(), ops.device("/device:CPU:0"):
        handle = resource.var_handle_op(dtype=dtypes.float64, shape=[], shared_name=name)
        resource.assign_variable_op(handle, _tf["constant"].constant(0.0, dtype=dtypes.float64))
    _accumulators[key] = (name, handle, weakref.ref(owner))
    clock.graph_reads[part] = functools.partial(_read_part, part)
    return name


def _read_part(part: str) -> float:
    """Seconds so far in ``part`` inside the functions that train."""
    dtypes, resource = _tf["dtypes"], _tf["resource"]
    total = 0.0
    for (kind, _), (_, handle, owner) in list(_accumulators.items()):
        fn = owner()
        if kind == part and fn is not None and fn.__dict__.get(steptime.TRAIN_MARK) is not None:
            total += float(resource.read_variable_op(handle, dtypes.float64))
    return total


def _off(what: str, exc: BaseException) -> None:
    clock.on = False
    autolog.degraded(what, exc, once="step time")


# -- train calls (called by patches' wrappers) ----------------------------------------------------


def function_call(fn: Any, original: Callable[..., Any], args: Any, kwargs: Any) -> Any:
    """A call of the train function ``fn``: counted; one in ``clock.every`` (every one for long
    steps) timed and run by ``fn``'s timed twin, a clone traced with the Timestamp ops, whose
    shares stand for every call's (the ops, and TensorFlow switching between the two functions,
    cost more than 1 % of steps of a few hundred microseconds if every call paid them)."""
    if not clock.on:  # counted still: the steps where nothing else gives one
        clock.calls += 1
        return original(fn, *args, **kwargs)
    if clock.skip() and not _tf["trace"].enabled():  # counted; one in `every` goes on, and each
        return original(fn, *args, **kwargs)  # while a profiler capture runs (its step markers)
    twin = _twin(fn)
    if twin is None:
        return train_call(lambda: original(fn, *args, **kwargs), True, counted=True)
    calling = steptime.calling.__dict__
    calling["timing"] = True
    traced = fn.__dict__.get(TWIN_ATTR + "_traced", False)
    try:  # its first call traces it: no step's time (as the function's own first call)
        return train_call(lambda: original(twin, *args, **kwargs), traced, timed=traced, counted=True)
    finally:
        calling["timing"] = False
        fn.__dict__[TWIN_ATTR + "_traced"] = True


def _twin(fn: Any) -> Any:
    """``fn``'s timed twin (the same Python function and options), made once; None if it cannot be."""
    twin = fn.__dict__.get(TWIN_ATTR)
    if twin is None and TWIN_ATTR not in fn.__dict__:
        try:
            twin = fn._clone(None)
        except Exception as exc:
            autolog.degraded("time inside a train function", exc, once="step time twin")
            twin = None
        fn.__dict__[TWIN_ATTR] = twin
    return twin


def train_call(call: Callable[[], Any], known: bool, waits: bool = False, timed: bool = False,
               counted: bool = False) -> Any:
    """Run one train call, timed; ``known``: not the call that traced it; ``waits``: its time is
    waiting for peers (a coordinator's schedule); ``timed``: the timed twin runs it. A step marker
    while a profiler capture runs."""
    if not clock.on:
        if known and not counted:
            clock.calls += 1  # a coordinator's schedule: a step, counted
        return call()
    trace = _tf.get("trace")
    marker = None
    if trace is not None and trace.enabled():
        marker = trace.Trace("train", step_num=next(_step_numbers), _r=1)
        marker.__enter__()
    started = _now()
    try:
        return call()
    finally:
        ended = _now()
        if marker is not None:
            marker.__exit__(None, None, None)
        if known:
            clock.call_done(started, ended, waited=ended - started if waits else 0.0, timed=timed, counted=counted)
        else:
            clock.first_call(ended)


def schedule_call(call: Callable[[], Any]) -> Any:
    """A coordinator's schedule of a train step: a step whose blocked time is waiting for workers."""
    return train_call(call, True, waits=True)


def _timed_join(original: Callable[..., Any]) -> Callable[..., Any]:
    """A coordinator waiting for its workers between steps (``join``, a RemoteValue's fetch):
    peers, when it is the thread that schedules (the coordinator's worker threads wait too)."""
    def join(self: Any, *args: Any, **kwargs: Any) -> Any:
        if not steptime.between_calls():
            return original(self, *args, **kwargs)
        started = _now()
        try:
            return original(self, *args, **kwargs)
        finally:
            clock.outside_wait_s += _now() - started
    return join


def _timed_closure(original: Callable[..., Any]) -> Callable[..., Any]:
    def _process_closure(self: Any, closure: Any) -> Any:
        if not clock.closures:  # every worker from the first closure on: one that never finishes is seen
            for worker in getattr(getattr(self, "_cluster", None), "workers", None) or ():
                clock.closures.setdefault(int(getattr(worker, "worker_index", -1)), [0.0, 0.0])
        started = _now()
        try:
            return original(self, closure)
        finally:
            if clock.on:
                clock.closure_done(int(getattr(self, "worker_index", -1)), _now() - started)
    return _process_closure


def _tick() -> None:
    if not clock.on:
        return
    values = clock.tick(autolog.reader.step_now)
    if values:  # go out with the step the reader notes next (one line a tick, not two)...
        reporter = autolog.reporter
        reporter.values.update(values)
        reporter.pending = True  # the reader's step (an optimizer's, a global step, the calls) takes them
