"""Checkpoints a task writes, reported as ``@distlaunch {"kind": "checkpoint", ...}`` lines.

Imported only by ``launcher.autolog.patches`` once TensorFlow, Keras or tf_keras has been
imported; imports nothing of them itself (``install_*`` get the module loader and the wrapper).

Every writer autolog knows is wrapped: Keras ``BackupAndRestore`` and ``ModelCheckpoint`` (Keras 3
and tf_keras; tf_keras' backup is its ``WorkerTrainingState.back_up``), ``tf.train.CheckpointManager
.save``, ``tf.train.Checkpoint.save`` / ``write`` (and their private ``_write``), TF1 ``Saver.save``
(so ``MonitoredTrainingSession``'s ``CheckpointSaverHook`` too) and
``PreemptionCheckpointHandler._save_checkpoint``. The writers nest (a backup saves through a
manager, which writes through a checkpoint): one stack per thread, and only the outermost call
reports, once it returned, under its own ``api`` with what the inner calls wrote. A call that
raised reports nothing.

What one line says: ``directory`` (absolute), ``files`` (relative to it: the files of the prefix
written, ``<prefix>.index`` / ``.data-*`` / ``.meta``, or the file written, or the files under a
folder written (a SavedModel), and the ``checkpoint`` state file, each only if it was written during
the call: a ``write`` leaves the state file alone), ``bytes``, ``seconds`` (the outermost call's
time), ``step`` (the TF1 global step a ``Saver`` was given; else the optimizers' ``iterations`` read
now; else the newest step autolog sent; never a ``save_counter``) and, for Keras callbacks,
``epoch`` (1-based, as ``{epoch}`` in a ``ModelCheckpoint`` path). A write nothing of which remains
when the call returns (a non-chief MWMS worker's Keras temp directory, deleted once written; a
``save_best_only`` that did not save) is not reported: what a line names is on disk, in the real
directory.

Per checkpoint: a ``listdir`` of the directory and a ``stat`` per file; nothing per step.
Any error here goes to ``autolog.fail`` (the write itself is the original's, untouched).

Stdlib-only at import, Python >= 3.9.
"""

from __future__ import annotations

import os
import re
import threading
import time
from typing import Any, Callable, Dict, List, Optional

from launcher import report
from launcher.autolog import recorder as autolog
from launcher.events import CHECKPOINT

#: the state file ``Checkpoint.save``, ``CheckpointManager`` and ``Saver`` keep beside the prefixes
STATE_FILE = "checkpoint"
#: a file counts as written by a call if modified at most this long before it began (the kernel's
#: file times come from a coarse clock, a tick behind ``time.time()``)
MTIME_SLACK_S = 0.05
_local = threading.local()
_STEP_SUFFIX = re.compile(r"-(\d+)$")


class _Frame:
    __slots__ = ("api", "epoch", "paths", "started", "started_wall", "step")

    def __init__(self, api: str) -> None:
        self.api = api
        self.paths: List[str] = []  # prefixes or files written, innermost first
        self.step: Optional[int] = None
        self.epoch: Optional[int] = None
        self.started = time.monotonic()
        self.started_wall = time.time()


#: where(self, args, kwargs, result, frame) -> nothing; adds to frame.paths / step / epoch
Where = Callable[[Any, tuple, Dict[str, Any], Any, _Frame], None]


def writer_wrapper(api: str, where: Where) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    """A ``make`` for ``patches._wrap_method``: calls the original once; reports after it."""

    def make(original: Callable[..., Any]) -> Callable[..., Any]:
        def wrapper(self: Any, *args: Any, **kwargs: Any) -> Any:
            if not autolog._state.on:
                return original(self, *args, **kwargs)
            stack = _local.__dict__.setdefault("stack", [])
            frame = _Frame(api)
            stack.append(frame)
            try:
                result = original(self, *args, **kwargs)
            finally:
                stack.pop()
            autolog.guarded("checkpoint report (%s)" % api, _after, frame, stack, where, self, args, kwargs, result)
            return result
        return wrapper
    return make


def _after(frame: _Frame, stack: List[_Frame], where: Where, owner: Any, args: tuple,
           kwargs: Dict[str, Any], result: Any) -> None:
    where(owner, args, kwargs, result, frame)
    if stack:  # an outer writer reports, under its own api
        outer = stack[-1]
        outer.paths.extend(frame.paths)
        if outer.step is None:
            outer.step = frame.step
        if outer.epoch is None:
            outer.epoch = frame.epoch
        return
    message = describe(frame, time.monotonic() - frame.started)
    if message is not None:
        report._write_line(message)


def describe(frame: _Frame, seconds: float) -> Optional[Dict[str, Any]]:
    """The line of an outermost writer's call, or None where nothing it wrote remains."""
    local = [os.path.abspath(p) for p in frame.paths if isinstance(p, str) and p and "://" not in p]
    if not local:
        return None
    directory = os.path.dirname(local[-1])  # the outermost's own path names the real directory
    since = frame.started_wall - MTIME_SLACK_S
    try:
        names = os.listdir(directory)
    except OSError:
        return None  # removed once written (a non-chief's temp directory)
    files: Dict[str, int] = {}
    for path in local:
        if os.path.dirname(path) != directory:
            continue
        base = os.path.basename(path)
        for name in names:
            if name in (base, STATE_FILE) or name.startswith(base + "."):
                files.update(_written(directory, name, since))
    if not files or set(files) == {STATE_FILE}:
        return None
    return {"kind": CHECKPOINT, "directory": directory, "files": sorted(files),
            "bytes": sum(files.values()), "seconds": round(seconds, 4),
            "step": frame.step if frame.step is not None else current_step(),
            "epoch": frame.epoch, "api": frame.api, "source": autolog.SOURCE}


def _written(directory: str, name: str, since: float) -> Dict[str, int]:
    """``name`` (a file, or a folder such as a SavedModel: the files under it) -> size, each only if
    written since ``since``."""
    path = os.path.join(directory, name)
    if os.path.isdir(path):
        found: Dict[str, int] = {}
        for root, _dirs, leaves in os.walk(path):
            for leaf in leaves:
                relative = os.path.relpath(os.path.join(root, leaf), directory)
                found.update(_written(directory, relative, since))
        return found
    try:
        st = os.stat(path)
    except OSError:
        return {}
    return {name: int(st.st_size)} if st.st_mtime >= since else {}


def current_step() -> Optional[int]:
    """The training step now: the optimizers' ``iterations`` (read now), else the newest step
    autolog sent (a TF1 global step, a summary's), else None."""
    best: Optional[int] = None
    for optimizer in list(autolog.reader.optimizers):
        step = autolog._int_of(getattr(optimizer, "iterations", None))
        if step is not None and (best is None or step > best):
            best = step
    if best is None and autolog._newest_step[0] >= 0:
        best = autolog._newest_step[0]
    return best


# -- where each writer wrote ---------------------------------------------------------------------


def _returned_path(owner: Any, args: tuple, kwargs: Dict[str, Any], result: Any, frame: _Frame) -> None:
    """``Checkpoint.write`` / ``save`` / ``CheckpointManager.save``: the prefix they return."""
    if isinstance(result, bytes):
        result = result.decode("utf-8", "replace")
    if isinstance(result, str):
        frame.paths.append(result)


def _saver_path(owner: Any, args: tuple, kwargs: Dict[str, Any], result: Any, frame: _Frame) -> None:
    """TF1 ``Saver.save(sess, save_path, global_step=None, ...)``: the prefix it returns, the step
    its name ends with where it was given a global step."""
    _returned_path(owner, args, kwargs, result, frame)
    given = kwargs.get("global_step", args[2] if len(args) > 2 else None)
    if given is not None and isinstance(result, str):
        found = _STEP_SUFFIX.search(result)
        if found:
            frame.step = int(found.group(1))


def _keras_step(model: Any) -> Optional[int]:
    return autolog._int_of(getattr(getattr(model, "optimizer", None), "iterations", None))


def _keras3_backup(owner: Any, args: tuple, kwargs: Dict[str, Any], result: Any, frame: _Frame) -> None:
    """Keras 3 ``BackupAndRestore._save_model()``: its weights and its training metadata."""
    frame.paths.extend(p for p in (getattr(owner, "_training_metadata_path", None),
                                   getattr(owner, "_weights_path", None)) if isinstance(p, str))
    epoch = getattr(owner, "_current_epoch", None)
    frame.epoch = epoch if isinstance(epoch, int) else None
    frame.step = _keras_step(getattr(owner, "model", None))


def _tf_keras_backup(owner: Any, args: tuple, kwargs: Dict[str, Any], result: Any, frame: _Frame) -> None:
    """tf_keras ``WorkerTrainingState.back_up(epoch, batch=0)``: its manager wrote the prefix."""
    epoch = kwargs.get("epoch", args[0] if args else None)
    frame.epoch = epoch + 1 if isinstance(epoch, int) else None
    frame.step = _keras_step(getattr(owner, "_model", None))


def _model_checkpoint(owner: Any, args: tuple, kwargs: Dict[str, Any], result: Any, frame: _Frame) -> None:
    """``ModelCheckpoint._save_model(epoch, batch, logs)`` (both Kerases): the path it formatted
    (tf_keras keeps it as ``_write_filepath``; Keras 3's is remembered by ``_get_file_path``)."""
    path = getattr(owner, "_write_filepath", None) or getattr(owner, "_distlaunch_filepath", None)
    if isinstance(path, str):
        frame.paths.append(path)
    epoch = kwargs.get("epoch", args[0] if args else None)
    frame.epoch = epoch + 1 if isinstance(epoch, int) else None
    frame.step = _keras_step(getattr(owner, "model", None))


def _preemption(owner: Any, args: tuple, kwargs: Dict[str, Any], result: Any, frame: _Frame) -> None:
    """``PreemptionCheckpointHandler._save_checkpoint``: its manager wrote the prefix."""


def _remember_file_path(original: Callable[..., Any]) -> Callable[..., Any]:
    def _get_file_path(self: Any, *args: Any, **kwargs: Any) -> Any:
        path = original(self, *args, **kwargs)
        if isinstance(path, str):
            self._distlaunch_filepath = path
        return path
    return _get_file_path


# -- install -------------------------------------------------------------------------------------

Loader = Callable[[str], Any]
Wrap = Callable[[Any, str, Callable[[Callable[..., Any]], Callable[..., Any]]], None]


def install_tensorflow(module: Loader, wrap: Wrap) -> None:
    checkpoint = module("tensorflow.python.checkpoint.checkpoint")
    for cls_name in ("Checkpoint", "CheckpointV1"):
        cls = getattr(checkpoint, cls_name, None)
        for method in ("save", "write", "_write"):
            wrap(cls, method, writer_wrapper("checkpoint", _returned_path))
    manager = getattr(module("tensorflow.python.checkpoint.checkpoint_management"), "CheckpointManager", None)
    wrap(manager, "save", writer_wrapper("checkpoint_manager", _returned_path))
    saver = getattr(module("tensorflow.python.training.saver"), "Saver", None)
    wrap(saver, "save", writer_wrapper("saver", _saver_path))
    handler = getattr(module("tensorflow.python.distribute.failure_handling.failure_handling"),
                      "PreemptionCheckpointHandler", None)
    wrap(handler, "_save_checkpoint", writer_wrapper("preemption", _preemption))


def install_keras(name: str, module: Loader, wrap: Wrap) -> None:
    if name == "keras":
        backup = getattr(module("keras.src.callbacks.backup_and_restore"), "BackupAndRestore", None)
        wrap(backup, "_save_model", writer_wrapper("backup_and_restore", _keras3_backup))
        model_checkpoint = getattr(module("keras.src.callbacks.model_checkpoint"), "ModelCheckpoint", None)
    else:
        state = getattr(module("tf_keras.src.distribute.worker_training_state"), "WorkerTrainingState", None)
        wrap(state, "back_up", writer_wrapper("backup_and_restore", _tf_keras_backup))
        model_checkpoint = getattr(module("tf_keras.src.callbacks"), "ModelCheckpoint", None)
    wrap(model_checkpoint, "_get_file_path", _remember_file_path)
    wrap(model_checkpoint, "_save_model", writer_wrapper("model_checkpoint", _model_checkpoint))
