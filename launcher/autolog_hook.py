"""The import hook autolog's ``sitecustomize`` installs: it patches only what the task imports.

Stdlib-only and tiny, because every Python process of a task with autolog on imports it at
start-up. It finds nothing itself: for ``tensorflow``, ``keras`` and ``tf_keras`` it wraps the
real loader so that, once the package has run, ``launcher.autolog_patches.patch(name)`` runs.
Python >= 3.9.
"""

from __future__ import annotations

import importlib.abc
import importlib.machinery
import os
import sys
from typing import Any

#: the top-level packages whose import triggers patching
WATCHED = ("tensorflow", "keras", "tf_keras")
#: "0" / "false" turns autolog off for a process (the agent sets it from the profile's ``autolog``)
ENABLE_ENV = "DISTLAUNCH_AUTOLOG"


def _patch(name: str) -> None:
    try:
        from launcher import autolog_patches

        autolog_patches.patch(name)
    except Exception as exc:  # the patches guard themselves; this is for an import that failed
        try:
            from launcher import autolog

            autolog.fail("patching %s" % name, exc)
        except Exception:
            sys.stderr.write("distlaunch autolog: patching %s failed (%s); autolog is off\n" % (name, exc))


class _PatchingLoader(importlib.abc.Loader):
    """Wraps the real loader of a watched package: runs it, then patches the package."""

    def __init__(self, loader: Any) -> None:
        self._loader = loader

    def create_module(self, spec: Any) -> Any:
        return self._loader.create_module(spec)

    def exec_module(self, module: Any) -> None:
        self._loader.exec_module(module)
        _patch(module.__name__)

    def __getattr__(self, name: str) -> Any:  # get_source, is_package, ... of the real loader
        return getattr(self._loader, name)


class WatchFinder(importlib.abc.MetaPathFinder):
    """Finds nothing itself; for a watched top-level package it wraps the real spec's loader."""

    def find_spec(self, fullname: str, path: Any = None, target: Any = None) -> Any:
        if fullname not in WATCHED:
            return None
        spec = importlib.machinery.PathFinder.find_spec(fullname, path)
        if spec is None or spec.loader is None or not hasattr(spec.loader, "exec_module"):
            return spec
        spec.loader = _PatchingLoader(spec.loader)
        return spec


def enabled() -> bool:
    return os.environ.get(ENABLE_ENV, "1").strip().lower() not in ("0", "false", "no", "off")


def install() -> None:
    """Add the hook (once); patch right away what is already imported."""
    if not enabled() or any(isinstance(f, WatchFinder) for f in sys.meta_path):
        return
    sys.meta_path.insert(0, WatchFinder())
    for name in WATCHED:
        if name in sys.modules:
            _patch(name)
