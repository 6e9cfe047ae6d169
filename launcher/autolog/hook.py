"""The import hook autolog's ``sitecustomize`` installs: it patches only what the task imports.

Stdlib-only and tiny, because every Python process of a task with autolog on imports it at
start-up. It finds nothing itself: for ``tensorflow``, ``keras`` and ``tf_keras`` it wraps the
real loader so that, once the package has run, ``launcher.autolog.patches.patch(name)`` runs.
Python >= 3.9.
"""

from __future__ import annotations

import importlib.machinery
import os
import sys

# no runtime typing import: it costs ~6 ms at start-up, and every Python process of a task imports
# this module (mypy reads the block below as true)
TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Sequence
    from types import ModuleType

#: the top-level packages whose import triggers patching
WATCHED = ("tensorflow", "keras", "tf_keras")
#: "0" / "false" turns autolog off for a process (the agent sets it from the profile's ``autolog``)
ENABLE_ENV = "DISTLAUNCH_AUTOLOG"
#: the file faulthandler dumps every thread's stack into on STACKS_SIGNAL (launcher/agent/stackreader.py)
STACKS_ENV = "DISTLAUNCH_STACKS_FILE"
#: SIGUSR2 (12 on Linux): TensorFlow, Keras and absl handle only SIGTERM, SIGINT and fault signals,
#: and SIGUSR1 is what Slurm's --signal and preemption helpers commonly send
STACKS_SIGNAL_NAME = "SIGUSR2"
_stacks_file = None  # kept open for faulthandler for the life of the process


def _patch(name: str) -> None:
    try:
        from launcher.autolog import patches as autolog_patches

        autolog_patches.patch(name)
    except Exception as exc:  # the patches guard themselves; this is for an import that failed
        try:
            from launcher.autolog import recorder as autolog

            autolog.fail("patching %s" % name, exc)
        except Exception:
            sys.stderr.write("distlaunch autolog: patching %s failed (%s); autolog is off\n" % (name, exc))


class _PatchingLoader:
    """Wraps the real loader of a watched package: runs it, then patches the package.

    Plain classes, not ``importlib.abc`` ones: that module pulls in importlib.resources,
    pathlib and tempfile, ~20 ms at every start of every Python process of the task."""

    def __init__(self, loader: object) -> None:
        self._loader = loader

    def create_module(self, spec: object) -> object:
        return getattr(self._loader, "create_module")(spec)  # noqa: B009

    def exec_module(self, module: object) -> None:
        getattr(self._loader, "exec_module")(module)  # noqa: B009
        _patch(getattr(module, "__name__", ""))

    def __getattr__(self, name: str) -> object:  # get_source, is_package, ... of the real loader
        return getattr(self._loader, name)


class WatchFinder:
    """Finds nothing itself; for a watched top-level package it wraps the real spec's loader."""

    def find_spec(self, fullname: str, path: Sequence[str] | None = None,
                  target: ModuleType | None = None) -> importlib.machinery.ModuleSpec | None:
        if fullname not in WATCHED:
            return None
        spec = importlib.machinery.PathFinder.find_spec(fullname, path)
        if spec is None or spec.loader is None or not hasattr(spec.loader, "exec_module"):
            return spec
        spec.loader = _PatchingLoader(spec.loader)  # type: ignore[assignment]
        return spec


def enabled() -> bool:
    return os.environ.get(ENABLE_ENV, "1").strip().lower() not in ("0", "false", "no", "off")


def install() -> None:
    """Add the hook (once); patch right away what is already imported."""
    if not enabled() or any(isinstance(f, WatchFinder) for f in sys.meta_path):
        return
    register_stacks_dump()
    sys.meta_path.insert(0, WatchFinder())
    for name in WATCHED:
        if name in sys.modules:
            _patch(name)


def register_stacks_dump() -> None:
    """Let the host agent ask this process for its stacks: on SIGUSR2 faulthandler appends every
    thread's stack to ``$DISTLAUNCH_STACKS_FILE``; a marker line with the pid says the handler is
    there (the agent never sends a signal whose default action would end the process)."""
    global _stacks_file
    path = os.environ.get(STACKS_ENV)
    if not path or _stacks_file is not None:
        return
    try:
        import _signal  # builtin: `signal` would import enum at every start of every Python of the task
        import faulthandler

        sig = getattr(_signal, STACKS_SIGNAL_NAME)
        f = open(path, "a", encoding="utf-8")  # noqa: SIM115 (faulthandler writes to it until the end)
        f.write("# distlaunch faulthandler pid %d\n" % os.getpid())
        f.flush()
        faulthandler.register(sig, file=f, all_threads=True, chain=False)
        _stacks_file = f
    except (OSError, AttributeError, RuntimeError, ValueError) as exc:
        sys.stderr.write("distlaunch autolog: no stacks on request (%s)\n" % exc)
