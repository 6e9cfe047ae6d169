"""The patches autolog applies once TensorFlow, Keras or tf_keras has been imported.

Imported only by ``launcher.autolog.recorder`` from its import hook, after the task imported one of
those packages; it imports nothing of them at module import either. Every wrapper calls the
original exactly once and does its own work inside ``autolog.guarded`` (an error turns
autolog off, never breaks the call). Per-step work is an attribute read and a counter
compare; anything that converts a tensor runs at most once per interval.

What each patch gives:

- optimizers (Keras 3, tf_keras, ``optimizers.legacy``): weak references read by the step
  reader thread (``iterations`` = the step); ``apply_gradients`` bumps a counter, so a
  ``tf.function`` whose call applied gradients is known as a train step (so is one that takes
  gradients or reads an iterator without an optimizer: ``launcher.autolog.trainfn``; its calls
  are the steps where nothing else gives one);
- ``tf.function`` calls of a train step: the scalar it returns becomes the loss (read later,
  on the reader thread);
- ``ClusterCoordinator.schedule``: the ``RemoteValue`` of a train step (read once done), and
  placement of the variables created under a ParameterServerStrategy scope;
- Keras ``Model.fit``: a callback with per-batch loss and logs, and placement at train begin;
- ``tf.summary.scalar`` (eager calls) and TF1 ``FileWriter.add_summary``: each scalar and step;
- TF1 ``Optimizer`` and ``Session.run`` (``launcher.autolog.tf1session``): the graph's global
  step, placement of ``global_variables()`` once, the loss of the train op run (fetched
  alongside when the script does not fetch it), all at most once per interval, and a scalar
  fetched alone after training as a value; each of these that fails is said once and leaves
  the others (and autolog) on;
- checkpoint writers (Keras ``BackupAndRestore`` / ``ModelCheckpoint``, ``CheckpointManager``,
  ``Checkpoint``, TF1 ``Saver``, ``PreemptionCheckpointHandler``; ``launcher.autolog.ckptwriters``):
  one ``checkpoint`` line per checkpoint, once written.
"""

from __future__ import annotations

import functools
import importlib
import sys
import weakref
from typing import Any, Callable, Dict, List, Optional

from launcher.autolog import ckptwriters, drainsave, steptime, stepwatch, tf1session, trainfn
from launcher.autolog import recorder as autolog
from launcher.autolog.recorder import guarded, note, reader

#: bumped by every apply_gradients, GradientTape.gradient and iterator read in a traced function
#: (launcher/autolog/trainfn.py): a function call during which it moved may train
_applied = trainfn.moved
_TRAIN_MARK = steptime.TRAIN_MARK
#: set on a function a ClusterCoordinator scheduled once: its next schedules are the coordinator's steps
_SCHEDULED = "_distlaunch_scheduled"


def patch(name: str) -> None:
    """Patch what the freshly imported top-level package ``name`` offers (once per package)."""
    if name in autolog._state.patched:
        return
    autolog._state.patched.add(name)
    module = sys.modules.get(name)
    if module is None:
        return
    if name == "tensorflow":
        _patch_tensorflow(module)
    elif name == "keras":
        _patch_keras_package(module, "keras")
    elif name == "tf_keras":
        _patch_keras_package(module, "tf_keras")


def _module(name: str) -> Any:
    try:
        return importlib.import_module(name)
    except ImportError:
        return None


def _wrap_method(owner: Any, attr: str, make: Callable[[Callable[..., Any]], Callable[..., Any]]) -> None:
    original = owner.__dict__.get(attr) if owner is not None else None
    if original is None or getattr(original, "_distlaunch_wrapped", False):
        return
    wrapper = functools.wraps(original)(make(original))
    wrapper._distlaunch_wrapped = True  # type: ignore[attr-defined]
    setattr(owner, attr, wrapper)


# -- optimizers ----------------------------------------------------------------------------------


def _patch_optimizer_class(cls: Any) -> None:
    def make_init(original: Callable[..., Any]) -> Callable[..., Any]:
        def __init__(self: Any, *args: Any, **kwargs: Any) -> None:
            original(self, *args, **kwargs)
            if autolog._state.on:
                guarded("optimizer registration", reader.add_optimizer, self)
        return __init__

    def make_apply(original: Callable[..., Any]) -> Callable[..., Any]:
        def apply(self: Any, *args: Any, **kwargs: Any) -> Any:
            trainfn.note(trainfn.OPTIMIZER)
            return original(self, *args, **kwargs)
        return apply

    _wrap_method(cls, "__init__", make_init)
    for name in ("apply_gradients", "apply"):
        _wrap_method(cls, name, make_apply)


# -- Keras fit -----------------------------------------------------------------------------------


def _patch_keras_package(package: Any, name: str) -> None:
    if name == "keras":
        base = _module("keras.src.optimizers.base_optimizer")
        _patch_optimizer_class(getattr(base, "BaseOptimizer", None))
    else:
        for path, cls in (("tf_keras.src.optimizers.optimizer", "Optimizer"),
                          ("tf_keras.src.optimizers.legacy.optimizer_v2", "OptimizerV2")):
            _patch_optimizer_class(getattr(_module(path), cls, None))
    guarded("checkpoint writers", ckptwriters.install_keras, name, _module, _wrap_method)
    model = getattr(package, "Model", None)
    owner = next((c for c in getattr(model, "__mro__", ()) if "fit" in c.__dict__), None)
    callbacks = getattr(package, "callbacks", None)
    if owner is None or callbacks is None:
        return
    callback_class = _callback_class(callbacks.Callback)

    def make_fit(original: Callable[..., Any]) -> Callable[..., Any]:
        def fit(self: Any, *args: Any, **kwargs: Any) -> Any:
            if autolog._state.on:
                added = guarded("Keras fit", _with_callback, args, kwargs, callback_class)
                if added is not None:
                    args, kwargs = added
            return original(self, *args, **kwargs)
        return fit

    _wrap_method(owner, "fit", make_fit)


# fit(x, y, batch_size, epochs, verbose, callbacks, ...): callbacks is the sixth positional argument
_CALLBACKS_POSITION = 5


def _add_callback(listed: List[Any], callback_class: Any) -> None:
    """Ours last (it runs after the user's BackupAndRestore at each batch end), told its siblings."""
    if not any(isinstance(c, callback_class) for c in listed):
        ours = callback_class()
        ours.siblings = listed
        listed.append(ours)


def _with_callback(args: tuple, kwargs: Dict[str, Any], callback_class: Any) -> "tuple[tuple, Dict[str, Any]]":
    if len(args) > _CALLBACKS_POSITION:
        given = args[_CALLBACKS_POSITION]
        listed = list(given) if given else []
        _add_callback(listed, callback_class)
        return (*args[:_CALLBACKS_POSITION], listed, *args[_CALLBACKS_POSITION + 1:]), kwargs
    listed = list(kwargs.get("callbacks") or [])
    _add_callback(listed, callback_class)
    kwargs = dict(kwargs)
    kwargs["callbacks"] = listed
    return args, kwargs


def _callback_class(base: Any) -> Any:
    class DistlaunchAutologCallback(base):
        """Per-batch loss and logs (kept as references, converted when a line goes out)."""

        async_safe = True  # Keras 3: keeps asynchronous batch dispatch

        def __init__(self) -> None:
            super().__init__()
            # tf_keras: logs stay tensors (no per-batch numpy conversion for our sake), and under
            # ParameterServerStrategy they are RemoteValues, which only such callbacks may take
            self._supports_tf_logs = True
            self.siblings: List[Any] = []
            #: SIGTERM during fit: the backups save at the next batch end, then exit 143 (drainsave)
            self.stop = drainsave.FitStop()

        def on_train_begin(self, logs: Optional[Dict[str, Any]] = None) -> None:
            guarded("Keras fit", self._begin)
            if autolog._state.on:
                guarded("Keras fit (stop on SIGTERM)", self.stop.begin, self.siblings, self.model)

        def _begin(self) -> None:
            from launcher import report

            report._newline_first = getattr(self, "params", {}).get("verbose") in (1, "auto")
            model = self.model
            optimizer = getattr(model, "optimizer", None)
            if optimizer is not None:
                reader.add_optimizer(optimizer)
            variables = getattr(model, "variables", None) or getattr(model, "weights", [])
            autolog.placement(list(variables))

        def on_train_batch_end(self, batch: int, logs: Optional[Dict[str, Any]] = None) -> None:
            if logs and autolog._state.on:
                guarded("Keras fit", self._batch, logs)
            self.stop.batch_end(batch)  # raises SystemExit(143) once SIGTERM came: not guarded

        def _batch(self, logs: Any) -> None:
            if _is_remote(logs):  # ParameterServerStrategy: the whole logs dict, read once done
                reader.offer_loss(logs, _read_remote_value)
                reader.start()
                return
            optimizer = getattr(self.model, "optimizer", None)
            step = getattr(optimizer, "iterations", None)
            loss = logs.get("loss")
            if _is_remote(loss):  # ParameterServerStrategy: read on the reader thread once done
                reader.offer_loss(loss, _read_remote_value)
                reader.start()
                loss = step = None  # the reader reads the step too; no remote read here
            others = {k: v for k, v in logs.items()
                      if k not in ("loss", "step") and not isinstance(v, dict) and not _is_remote(v)}
            note(step=step, loss=loss, values=others)

        def on_train_end(self, logs: Optional[Dict[str, Any]] = None) -> None:
            from launcher import report

            autolog.flush("the end of Keras fit")  # the last step and loss, read and sent now
            report._newline_first = False
            self.stop.after_fit()  # raises SystemExit(143) where a stop is pending: not guarded

    return DistlaunchAutologCallback


# -- TensorFlow ----------------------------------------------------------------------------------


def _patch_tensorflow(tf: Any) -> None:
    _patch_function_calls()
    _patch_parameter_server()
    _patch_summary(tf)
    tf1session.install(tf, _wrap_method, _module)
    guarded("step time", stepwatch.install, _module, _wrap_method)
    guarded("train functions", trainfn.install, _module, _wrap_method)  # after stepwatch's timed ops
    guarded("checkpoint writers", ckptwriters.install_tensorflow, _module, _wrap_method)
    _patch_join(getattr(_module("tensorflow.python.distribute.coordinator.cluster_coordinator"),
                        "ClusterCoordinator", None))


def _scalar_loss(value: Any) -> Any:
    """The scalar tensor a train step returned (or its "loss" entry), else None."""
    if isinstance(value, dict):
        value = value.get("loss")
    shape = getattr(value, "shape", None)
    dtype = getattr(value, "dtype", None)
    if shape is None or dtype is None or not getattr(dtype, "is_floating", False):
        return None
    try:
        return value if len(shape) == 0 else None
    except (TypeError, ValueError):
        return None


def _read_tensor(value: Any) -> Optional[float]:
    from launcher import report

    return report._to_number(value)  # a NaN loss too: it raises the nan_loss condition


def _patch_function_calls() -> None:
    module = _module("tensorflow.python.eager.polymorphic_function.polymorphic_function")
    _wrap_method(getattr(module, "Function", None), "__call__", function_call_wrapper)


def function_call_wrapper(original: Callable[..., Any]) -> Callable[..., Any]:
    """The wrapper of ``tf.function``'s ``__call__`` (module level: the benchmark times it alone)."""

    def __call__(self: Any, *args: Any, **kwds: Any) -> Any:
        before = _applied[0]
        mark = self.__dict__.get(_TRAIN_MARK)
        calling = steptime.calling.__dict__
        outermost = calling.get("fn") is None
        if outermost:  # what its trace adds (step time) belongs to it
            calling["fn"] = self
        try:
            if mark is None:
                result = original(self, *args, **kwds)
            else:  # a train step: timed (launcher/autolog/steptime.py), two clock reads
                result = stepwatch.function_call(self, original, args, kwds)
        finally:
            if outermost:
                calling["fn"] = None
        # every call of every tf.function passes here: two reads, and for a train step a
        # deque append, against a step of ~100 us or more
        if mark is None and _applied[0] == before:
            return result
        if autolog._state.on:
            try:
                if mark is None:
                    if not trainfn.trains(self):  # nested, or an evaluation beside a train function
                        return result
                    mark = self.__dict__[_TRAIN_MARK] = _loss_kind(result)
                    stepwatch.clock.first_call(stepwatch._now(), new=True)
                    reader.counts_calls = True
                    reader.start()
                if mark == "scalar":
                    reader.loss_slots.append((result, _read_tensor))
                elif mark == "dict":
                    reader.loss_slots.append((result.get("loss"), _read_tensor))
            except Exception as exc:
                autolog.fail("tf.function result", exc)
        return result
    return __call__


def _loss_kind(result: Any) -> str:
    """How a train step's result holds its loss: "scalar", "dict" (a "loss" entry) or "none"."""
    if isinstance(result, dict):
        return "dict" if _scalar_loss(result) is not None else "none"
    return "scalar" if _scalar_loss(result) is not None else "none"


# -- ParameterServerStrategy: coordinator and variable placement ---------------------------------

_ps_variables: "List[weakref.ref[Any]]" = []
_ps_placed = [0]


def _patch_parameter_server() -> None:
    strategy = _module("tensorflow.python.distribute.parameter_server_strategy_v2")
    extended = getattr(strategy, "ParameterServerStrategyV2Extended", None)

    def make_create(original: Callable[..., Any]) -> Callable[..., Any]:
        def _create_variable(self: Any, next_creator: Any, **kwargs: Any) -> Any:
            per_worker = bool(kwargs.get("per_worker_variable"))
            variable = original(self, next_creator, **kwargs)
            if autolog._state.on and not per_worker:
                guarded("ParameterServerStrategy variables", _ps_variables.append, weakref.ref(variable))
            return variable
        return _create_variable

    _wrap_method(extended, "_create_variable", make_create)
    coordinator = _module("tensorflow.python.distribute.coordinator.cluster_coordinator")
    cls = getattr(coordinator, "ClusterCoordinator", None)

    def make_schedule(original: Callable[..., Any]) -> Callable[..., Any]:
        def schedule(self: Any, fn: Any, args: Any = None, kwargs: Any = None) -> Any:
            before = _applied[0]
            marks = getattr(fn, "__dict__", None)
            if marks is not None and marks.get(_SCHEDULED):
                # every schedule of a function scheduled before is a step of the coordinator (an
                # optimizer autolog does not know, a tf.Module's own, applies no gradients it sees);
                # the time it blocks is waiting for the workers
                remote = stepwatch.schedule_call(lambda: original(self, fn, args=args, kwargs=kwargs))
            else:  # its first schedule traces it: no step's time
                remote = original(self, fn, args=args, kwargs=kwargs)
                if marks is not None and autolog._state.on:
                    marks[_SCHEDULED] = True
                    stepwatch.clock.first_call(stepwatch._now(), new=True)
                    reader.counts_calls = True
                    reader.start()
            if autolog._state.on:
                guarded("ClusterCoordinator.schedule", _after_schedule, fn, remote, _applied[0] != before)
            return remote
        return schedule

    _wrap_method(cls, "schedule", make_schedule)


def _patch_join(cls: Any) -> None:
    """``ClusterCoordinator.join`` flushes once it returned (the step and loss of the steps it
    waited for): around the step time's wrapper, whose waiting for the workers it is not."""
    current = getattr(cls, "__dict__", {}).get("join")
    if current is None or getattr(current, "_distlaunch_flushes", False):
        return

    @functools.wraps(current)
    def join(self: Any) -> Any:
        result = current(self)
        if autolog._state.on:
            autolog.flush_after_join()
        return result

    join._distlaunch_wrapped = join._distlaunch_flushes = True  # type: ignore[attr-defined]
    cls.join = join


def _after_schedule(fn: Any, remote: Any, applied: bool) -> None:
    if len(_ps_variables) != _ps_placed[0]:
        _ps_placed[0] = len(_ps_variables)
        live = [v for v in (ref() for ref in _ps_variables) if v is not None]
        autolog.placement(live)
    marks = getattr(fn, "__dict__", None)
    if marks is None:
        return
    if applied and _TRAIN_MARK not in marks:
        marks[_TRAIN_MARK] = "remote"
    if marks.get(_TRAIN_MARK) is not None:
        reader.offer_loss(remote, _read_remote_value)
        reader.start()


def _is_remote(value: Any) -> bool:
    return hasattr(value, "fetch") and hasattr(value, "_status")


def _read_remote_value(remote: Any) -> Optional[float]:
    """The value of a RemoteValue that is already done; None (no wait) while it is not."""
    status = getattr(remote, "_status", None)
    if getattr(status, "value", None) != "READY" or getattr(remote, "_error", None) is not None:
        return None
    try:
        value = remote.fetch()
    except Exception:  # the scheduled function failed: the coordinator tells the script, not us
        return None
    if isinstance(value, dict):
        value = value.get("loss")
    return _read_tensor(value)


# -- tf.summary ----------------------------------------------------------------------------------


def _note_scalar(name: str, value: Any, step: Any) -> None:
    if name.rsplit("/", 1)[-1].endswith("loss"):
        note(step=step, loss=value)
    else:
        note(step=step, values={name: value})


def _patch_summary(tf: Any) -> None:
    summary = getattr(tf, "summary", None)
    original = getattr(summary, "scalar", None)
    if summary is not None and original is not None and not getattr(original, "_distlaunch_wrapped", False):
        executing_eagerly = tf.executing_eagerly
        get_step = summary.experimental.get_step

        @functools.wraps(original)
        def scalar(name: Any, data: Any, step: Any = None, description: Any = None) -> Any:
            result = original(name, data, step=step, description=description)
            if autolog._state.on and executing_eagerly():
                guarded("tf.summary.scalar", _note_scalar, str(name), data,
                        step if step is not None else get_step())
            return result

        scalar._distlaunch_wrapped = True  # type: ignore[attr-defined]
        summary.scalar = scalar
    writer = _module("tensorflow.python.summary.writer.writer")
    transformer = getattr(writer, "SummaryToEventTransformer", None)

    def make_add(original: Callable[..., Any]) -> Callable[..., Any]:
        def add_summary(self: Any, summary: Any, global_step: Any = None) -> Any:
            if autolog._state.on:
                guarded("FileWriter.add_summary", _note_summary_proto, summary, global_step)
            return original(self, summary, global_step)
        return add_summary

    _wrap_method(transformer, "add_summary", make_add)


def _note_summary_proto(summary: Any, global_step: Any) -> None:
    if isinstance(summary, bytes):
        from tensorflow.core.framework import summary_pb2

        parsed = summary_pb2.Summary()
        parsed.ParseFromString(summary)
        summary = parsed
    for value in summary.value:
        if value.WhichOneof("value") == "simple_value":
            _note_scalar(value.tag, float(value.simple_value), global_step)
