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
from typing import Any, Callable, Dict

from launcher.autolog import recorder as autolog
from launcher.autolog import steptime
from launcher.autolog.steptime import clock

_now = steptime._now
_tf: Dict[str, Any] = {}
_accumulators: Dict[str, Any] = {}
_step_numbers = itertools.count()
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
        trace=module("tensorflow.python.profiler.trace"))
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
    autolog.reader.tick_hooks.append(_tick)


def start_profiler_server(module: Callable[[str], Any]) -> None:
    """TensorFlow's profiler server on the port the plan gave this task (a capture needs it)."""
    port = os.environ.get(steptime.PROFILER_PORT_ENV)
    if not port:
        return
    try:
        module("tensorflow.python.profiler.profiler_v2").start_server(int(port))
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
            started = _now()
            try:
                return original(*args, **kwargs)
            finally:
                if part == "input":
                    clock.eager_input_s += _now() - started
        if not _traceable():
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
            _add(part, last, first)
        except Exception as exc:
            _off("timing %s in a traced function" % part, exc)
        return result
    return timed


def _traceable() -> bool:
    """Whether Timestamp ops may go into the graph being built (not XLA, not a PSS worker function)."""
    ops = _tf["ops"]
    if not ops.executing_eagerly_outside_functions():  # a TF1 graph: nothing would initialise ours
        return False
    graph = ops.get_default_graph()
    if _tf["flow"].GraphOrParentsInXlaContext(graph):
        return False
    strategy = _tf["strategy"]
    return not (strategy.has_strategy() and "ParameterServer" in type(strategy.get_strategy()).__name__)


def _stamp(after: Any) -> Any:
    ops = _tf["ops"]
    deps = [t for t in (after if isinstance(after, (list, tuple)) else [after]) if t is not None]
    with ops.colocate_with(None, ignore_existing=True), ops.device(None), ops.control_dependencies(deps):
        return _tf["logging"].timestamp()


def _add(part: str, last: Any, first: Any) -> None:
    handle = _accumulator(part)
    ops = _tf["ops"]
    with ops.colocate_with(None, ignore_existing=True), ops.device(None):
        _tf["resource"].assign_add_variable_op(handle, last - first)


def _accumulator(part: str) -> Any:
    """A float64 resource on this task's CPU (created eagerly, outside any strategy's variable
    creators), read by the reader thread."""
    handle = _accumulators.get(part)
    if handle is not None:
        return handle
    ops, dtypes, resource = _tf["ops"], _tf["dtypes"], _tf["resource"]
    with ops.init_scope(), ops.device("/device:CPU:0"):
        handle = resource.var_handle_op(dtype=dtypes.float64, shape=[],
                                        shared_name="distlaunch_step_%s_%d" % (part, os.getpid()))
        resource.assign_variable_op(handle, _tf["constant"].constant(0.0, dtype=dtypes.float64))
    _accumulators[part] = handle

    def read() -> float:
        return float(resource.read_variable_op(handle, dtypes.float64))

    clock.graph_reads[part] = read
    return handle


def _off(what: str, exc: BaseException) -> None:
    clock.on = False
    autolog.degraded(what, exc, once="step time")


# -- train calls (called by patches' wrappers) ----------------------------------------------------


def train_call(call: Callable[[], Any], known: bool, waits: bool = False) -> Any:
    """Run one train call, timed; ``known``: not the call that traced it; ``waits``: its time is
    waiting for peers (a coordinator's schedule). A step marker while a profiler capture runs."""
    if not clock.on:
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
            clock.call_done(started, ended, waited=ended - started if waits else 0.0)
        else:
            clock.first_call(ended)


def schedule_call(call: Callable[[], Any]) -> Any:
    """A coordinator's schedule of a train step: a step whose blocked time is waiting for workers."""
    return train_call(call, True, waits=True)


def _timed_join(original: Callable[..., Any]) -> Callable[..., Any]:
    def join(self: Any, *args: Any, **kwargs: Any) -> Any:
        started = _now()
        try:
            return original(self, *args, **kwargs)
        finally:
            clock.outside_wait_s += _now() - started
    return join


def _timed_closure(original: Callable[..., Any]) -> Callable[..., Any]:
    def _process_closure(self: Any, closure: Any) -> Any:
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
    values = clock.tick(autolog.reader.read_step())
    if values:  # go out with the step the reader notes next (one line a tick, not two)
        reporter = autolog.reporter
        reporter.values.update(values)
        reporter.pending = True
