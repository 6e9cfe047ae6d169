"""What a training script tells distlaunch: metrics, variable placement, a Keras callback.

Usage in a training script (the agent puts this module on ``PYTHONPATH``)::

    from launcher import report
    for step in range(steps):
        loss = train_step()
        report.report(step=step, loss=loss)          # cheap enough to call every step
    report.report_placement(model.variables)         # where every variable (shard, replica) lives
    model.fit(..., callbacks=[report.keras_callback()])

Each message is one line ``@distlaunch {json}`` on stdout, which the agent turns
into a ``metric`` or ``placement`` event and keeps out of the task's log.

``report()`` is called from tight training loops, so it only stores the newest
values and emits at most one line per ``min_interval`` seconds (default 0.1,
``DISTLAUNCH_REPORT_INTERVAL`` overrides); a skipped report is not lost, the next
line carries the newest step/loss and every value reported since the last line.
``flush()`` (also run at exit) sends what is pending.

Stdlib-only at import and Python >= 3.9: TensorFlow and Keras are imported only
inside the functions that need them.
"""

from __future__ import annotations

import atexit
import contextlib
import json
import math
import os
import re
import sys
import threading
import time
from typing import Any, Dict, Iterable, List, Optional

from launcher.events import METRIC, PLACEMENT, REPORT_PREFIX

INTERVAL_ENV = "DISTLAUNCH_REPORT_INTERVAL"
DEFAULT_MIN_INTERVAL_S = 0.1


def _interval_from_env() -> float:
    try:
        value = float(os.environ.get(INTERVAL_ENV, DEFAULT_MIN_INTERVAL_S))
    except ValueError:
        return DEFAULT_MIN_INTERVAL_S
    return value if math.isfinite(value) and value >= 0 else DEFAULT_MIN_INTERVAL_S


class _MetricReporter:
    """Holds the pending metric values and decides when a line goes out.

    The hot path (``report()``) stores references only: no conversion, no JSON,
    no lock unless a line is due. Conversion of tensors to floats happens at emit.
    """

    def __init__(self, min_interval: float, source: Optional[str] = None) -> None:
        self.min_interval = min_interval
        self.source = source  # "autolog" marks values an explicit report() or regex overrides
        self.lock = threading.Lock()
        self.last_emit = -math.inf
        self.pending = False
        self.step: Any = None
        self.loss: Any = None
        self.values: Dict[str, Any] = {}

    def emit(self) -> None:
        with self.lock:
            if not self.pending:
                return
            step, loss, values = self.step, self.loss, self.values
            self.pending = False
            self.values = {}
            self.last_emit = time.monotonic()
            loss_number = _to_number(loss)
            message = {
                "kind": METRIC,
                "step": _to_int(step),
                "loss": _to_float(loss_number),
                "values": {str(k): _to_float(v) for k, v in values.items()},
            }
            if loss_number is not None and not math.isfinite(loss_number):
                # JSON has no NaN: the agent reads this back as the float (its nan_loss condition)
                message["nonfinite_loss"] = "nan" if math.isnan(loss_number) else (
                    "inf" if loss_number > 0 else "-inf")
            if self.source:
                message["source"] = self.source
            _write_line(message)


_reporter = _MetricReporter(_interval_from_env())
_monotonic = time.monotonic
_write_lock = threading.Lock()


def configure(min_interval: Optional[float] = None) -> None:
    """Change the rate limit (seconds between metric lines; 0 = every call)."""
    if min_interval is not None:
        _reporter.min_interval = float(min_interval)


def report(step: Any = None, loss: Any = None, **values: Any) -> None:
    """Report the global step, the loss and any other numbers; rate-limited, never blocks long.

    Accepts Python numbers, numpy scalars and TensorFlow scalar tensors. NaN and
    infinities, and values that cannot be read as a number, are sent as null; a NaN or
    infinite loss is also named (``nonfinite_loss``), which raises the nan_loss condition.
    """
    # runs once per training step: attribute stores and one clock read, nothing else
    r = _reporter
    if step is not None:
        r.step = step
    if loss is not None:
        r.loss = loss
    if values:
        r.values.update(values)
    r.pending = True
    if _monotonic() - r.last_emit >= r.min_interval:
        r.emit()


def flush() -> None:
    """Send the pending metric line now, regardless of the rate limit."""
    _reporter.emit()


def report_checkpoint(directory: str, files: Iterable[str], step: Any = None, epoch: Any = None,
                      api: str = "checkpoint") -> None:
    """Tell distlaunch of a complete checkpoint the script wrote itself, where autolog cannot see
    it (a save inside a ``tf.function``, files of its own): ``files`` relative to ``directory``,
    its ``checkpoint`` state file included where there is one. distlaunch keeps a record of it,
    copies it off a per-host disk and puts it in place before a restart or a move."""
    names = [str(f) for f in files]
    message: Dict[str, Any] = {"kind": "checkpoint", "directory": os.path.abspath(directory),
                               "files": names, "api": api}
    with contextlib.suppress(OSError):  # a file gone already: the size is unknown, the rest is true
        message["bytes"] = sum(os.path.getsize(os.path.join(directory, name)) for name in names)
    for name, value in (("step", step), ("epoch", epoch)):
        number = _to_int(value)
        if number is not None:
            message[name] = number
    _write_line(message)


atexit.register(flush)


# Set while a Keras progress bar (verbose=1) may leave an unterminated line on stdout: a report
# line must start a line of its own, or the agent would not see its prefix.
_newline_first = False


def _write_line(message: Dict[str, Any]) -> None:
    line = REPORT_PREFIX + json.dumps(message, separators=(",", ":"), allow_nan=False) + "\n"
    if _newline_first:
        line = "\n" + line
    stream = sys.stdout if sys.stdout is not None else sys.__stdout__
    if stream is None:
        return
    with _write_lock:
        try:
            stream.write(line)
            stream.flush()
        except (OSError, ValueError):  # closed stdout at interpreter exit, broken pipe
            pass


def _to_number(value: Any) -> Optional[float]:
    """A float (NaN and infinities kept), or None for what cannot be read as a number."""
    if value is None:
        return None
    try:
        if hasattr(value, "numpy"):
            value = value.numpy()
        return float(value)
    except Exception:
        return None


def _to_float(value: Any) -> Optional[float]:
    number = _to_number(value)
    return number if number is not None and math.isfinite(number) else None


def _to_int(value: Any) -> Optional[int]:
    number = _to_float(value)
    return int(number) if number is not None else None


# -- placement ---------------------------------------------------------------------------------

_TASK_IN_DEVICE = re.compile(r"/job:([^/]+)(?:/replica:\d+)?/task:(\d+)")


def task_of_device(device: str) -> str:
    """``"/job:ps/replica:0/task:1/device:CPU:0"`` -> ``"ps:1"``; ``""`` for local or no job.

    ``localhost`` is TensorFlow's name for "this process, no cluster", not a task of the job.
    """
    match = _TASK_IN_DEVICE.search(device or "")
    if match is None or match.group(1) == "localhost":
        return ""
    return "%s:%s" % (match.group(1), match.group(2))


def _unwrap_keras(var: Any) -> Any:
    """A Keras 3 variable wraps the TensorFlow variable (maybe distributed) in ``.value``."""
    inner = getattr(var, "value", None)
    if hasattr(var, "path") and inner is not None and not callable(inner):
        return inner
    return var


def _components(var: Any) -> List[Any]:
    """The concrete variables behind ``var``: shards, per-replica copies, or itself."""
    var = _unwrap_keras(var)
    shards = getattr(var, "variables", None)
    if isinstance(shards, (list, tuple)) and shards and not hasattr(var, "values"):
        return [part for shard in shards for part in _components(shard)]
    replicas = getattr(var, "values", None)
    if isinstance(replicas, (list, tuple)) and replicas:
        return list(replicas)
    return [var]


# dtype sizes for variables whose dtype is a name (Keras), so TensorFlow need not be imported
_DTYPE_SIZES = {"bool": 1, "int8": 1, "uint8": 1, "int16": 2, "uint16": 2, "float16": 2, "bfloat16": 2,
                "int32": 4, "uint32": 4, "float32": 4, "int64": 8, "uint64": 8, "float64": 8,
                "complex64": 8, "complex128": 16}


def _dtype_of(var: Any) -> "tuple[str, int]":
    dtype = var.dtype
    name = getattr(dtype, "name", None) or str(dtype)
    size = getattr(dtype, "size", None)
    if not isinstance(size, int):
        size = _DTYPE_SIZES.get(name)
    if size is None:
        try:
            import tensorflow as tf

            size = int(tf.as_dtype(name).size)
        except Exception:
            size = 0
    return name, size


def _shape_of(var: Any) -> List[Optional[int]]:
    try:
        return [None if d is None else int(d) for d in var.shape]
    except (TypeError, ValueError):  # unknown rank
        return []


def _placement_entry(var: Any) -> Dict[str, Any]:
    shape = _shape_of(var)
    dtype, size = _dtype_of(var)
    elements = 1
    for dim in shape:
        elements *= dim or 0
    name = str(getattr(var, "name", "") or "")
    if name.endswith(":0"):
        name = name[:-2]
    device = str(getattr(var, "device", "") or "")
    return {"name": name, "shape": shape, "dtype": dtype, "bytes": elements * size, "device": device,
            "task": task_of_device(device)}


def report_placement(variables: Iterable[Any], source: Optional[str] = None) -> List[Dict[str, Any]]:
    """Report where each variable lives and return the entries.

    Sharded variables (ParameterServerStrategy partitioners) give one entry per
    shard, mirrored/distributed ones one per replica, plain ones one entry. Each
    entry: ``name``, ``shape``, ``dtype``, ``bytes``, ``device`` and ``task`` (the
    ``job:index`` of the task holding it, "" when not in a cluster). Not rate-limited.
    """
    entries = [_placement_entry(part) for var in variables for part in _components(var)]
    message: Dict[str, Any] = {"kind": PLACEMENT, "variables": _fit_line(entries)}
    if source:
        message["source"] = source
    _write_line(message)
    return entries


# The agent cuts report lines at 1 MiB; stay well below it.
MAX_PLACEMENT_LINE_BYTES = 900_000


def _fit_line(entries: List[Dict[str, Any]]) -> List[Dict[str, Any]]:
    """The entries that fit one line, largest variables first when all of them do not."""
    if len(json.dumps(entries, separators=(",", ":"))) <= MAX_PLACEMENT_LINE_BYTES:
        return entries
    kept: List[Dict[str, Any]] = []
    size = 0
    for entry in sorted(entries, key=lambda e: -e["bytes"]):
        size += len(json.dumps(entry, separators=(",", ":"))) + 1
        if size > MAX_PLACEMENT_LINE_BYTES:
            break
        kept.append(entry)
    sys.stderr.write("distlaunch report: placement of %d variables is too large for one line; "
                     "sent the %d largest\n" % (len(entries), len(kept)))
    return kept


# -- Keras -------------------------------------------------------------------------------------


def keras_callback(every_n_batches: int = 1, keras_module: Any = None) -> Any:
    """A Keras callback that reports placement, per-batch step/loss and per-epoch logs.

    Keras is imported here, not at module import. ``keras_module``: pass ``tf_keras``
    for a tf_keras (Keras 2) model; by default ``tf.keras`` is used. The step is
    the optimizer's iteration count at the start of training plus the batches seen
    since, so a restarted chief that restored a checkpoint continues its numbering.
    """
    if keras_module is None:
        import tensorflow as tf

        keras_module = tf.keras
    every = max(1, int(every_n_batches))

    class DistlaunchCallback(keras_module.callbacks.Callback):
        def __init__(self) -> None:
            super().__init__()
            self._step = 0

        def on_train_begin(self, logs: Optional[Dict[str, Any]] = None) -> None:
            global _newline_first
            # Keras' default progress bar redraws one line with backspaces and no newline
            _newline_first = getattr(self, "params", {}).get("verbose") in (1, "auto")
            model = self.model
            self._step = _optimizer_iterations(model)
            variables = getattr(model, "variables", None) or getattr(model, "weights", [])
            report_placement(variables)

        def on_train_batch_end(self, batch: int, logs: Optional[Dict[str, Any]] = None) -> None:
            self._step += 1
            if self._step % every:
                return
            logs = logs or {}
            others = {k: v for k, v in logs.items() if k not in ("loss", "step")}
            report(step=self._step, loss=logs.get("loss"), **others)

        def on_epoch_end(self, epoch: int, logs: Optional[Dict[str, Any]] = None) -> None:
            logs = dict(logs or {})
            loss = logs.pop("loss", None)
            logs.pop("step", None)
            report(step=self._step, loss=loss, epoch=epoch + 1, **logs)
            flush()

        def on_train_end(self, logs: Optional[Dict[str, Any]] = None) -> None:
            global _newline_first
            flush()
            _newline_first = False

    return DistlaunchCallback()


def _optimizer_iterations(model: Any) -> int:
    try:
        return int(_to_float(model.optimizer.iterations) or 0)
    except Exception:
        return 0
