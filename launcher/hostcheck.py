"""Path checks run ON a host before any task starts: workdir, script, module, executable.

Shipped in the agent zipapp and run by the agent's ``preflight`` verb, so it is stdlib-only and
works on Python >= 3.9. The launcher sends a list of checks (``build`` side: launcher/taskcheck.py)
and gets back the ones that failed, each with a short detail; it words the user's message itself.

A relative path is taken from ``cwd``, the directory the ``run`` agent starts tasks from, and
``~`` is expanded as the ``run`` agent expands it, so preflight judges what the start will see.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from typing import Any, Dict, List, Optional

#: how long an interpreter may take to say whether a module is importable
MODULE_CHECK_SECONDS = 60.0

_FIND_MODULE = ("import importlib.util, sys\n"
                "sys.path.insert(0, '')\n"
                "try:\n"
                "    found = importlib.util.find_spec(sys.argv[1]) is not None\n"
                "except Exception:\n"
                "    found = False\n"
                "sys.exit(0 if found else 3)\n")


def resolve(path: str, cwd: str) -> str:
    """``path`` as the run agent sees it: ``~`` expanded, relative ones under ``cwd``."""
    return os.path.join(cwd, os.path.expanduser(path))


def _check_dir(path: str) -> Optional[str]:
    if not os.path.exists(path):
        return "does not exist"
    if not os.path.isdir(path):
        return "is not a directory"
    if not os.access(path, os.X_OK):
        return "cannot be entered (permission denied)"
    return None


def _check_file(path: str) -> Optional[str]:
    if not os.path.exists(path):
        return "does not exist"
    if os.path.isdir(path):
        return "is a directory, not a file"
    if not os.access(path, os.R_OK):
        return "cannot be read (permission denied)"
    return None


def _check_executable(name: str, workdir: str, path_env: Optional[str]) -> Optional[str]:
    if "/" in name:
        path = resolve(name, workdir)
        if not os.path.exists(path):
            return "does not exist"
        if os.path.isdir(path) or not os.access(path, os.X_OK):
            return "is not executable"
        return None
    # the shell itself answers: builtins (exit, test, ...) count as found, as they run fine
    env = dict(os.environ)
    if path_env is not None:
        env["PATH"] = path_env
    try:
        found = subprocess.run(["/bin/sh", "-c", 'command -v "$1"', "sh", name], env=env, stdin=subprocess.DEVNULL,
                               stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, timeout=30).returncode == 0
    except (OSError, subprocess.TimeoutExpired):
        found = shutil.which(name, path=env.get("PATH")) is not None
    return None if found else "is not on the PATH"


def _check_module(module: str, python: str, workdir: str, pythonpath: Optional[str]) -> Optional[str]:
    """Can ``python`` (shell text, as in the task's command) import ``module`` from ``workdir``?"""
    env = dict(os.environ)
    if pythonpath:
        env["PYTHONPATH"] = pythonpath
    try:
        result = subprocess.run(["/bin/sh", "-c", python + ' -c "$1" "$2"', "sh", _FIND_MODULE, module],
                                cwd=workdir, env=env, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                                stderr=subprocess.PIPE, timeout=MODULE_CHECK_SECONDS)
    except subprocess.TimeoutExpired:
        return "could not be checked: the interpreter took over %g s" % MODULE_CHECK_SECONDS
    except OSError as exc:
        return "could not be checked: %s" % exc
    if result.returncode == 0:
        return None
    if result.returncode == 3:
        return "is not importable by %s" % python
    last = (result.stderr.decode("utf-8", "replace").strip().splitlines() or ["exit %d" % result.returncode])
    return "could not be checked with %s (%s)" % (python, last[-1])


def run_check(check: Dict[str, Any], cwd: str) -> Optional[str]:
    """One check (a dict the launcher built); the problem in a few words, or None when it passes."""
    kind = check.get("kind")
    workdir = resolve(str(check.get("workdir") or "."), cwd)
    path = os.path.expanduser(str(check.get("path", "")))
    relative = not os.path.isabs(path)
    in_workdir = kind == "module" or (kind == "file" and relative) or (kind == "executable" and "/" in path
                                                                      and relative)
    if in_workdir and _check_dir(workdir) is not None:
        return None  # the workdir's own check reports it; one line per mistake
    if kind == "dir":
        return _check_dir(resolve(str(check["path"]), cwd))
    if kind == "file":
        return _check_file(resolve(str(check["path"]), workdir))
    if kind == "executable":
        return _check_executable(str(check["path"]), workdir, check.get("path_env"))
    if kind == "module":
        return _check_module(str(check["path"]), str(check["python"]), workdir, check.get("pythonpath"))
    return "unknown check %r" % kind


def run_checks(checks: List[Dict[str, Any]], cwd: str) -> List[Dict[str, Any]]:
    """The failed checks, each the check as sent plus ``problem``."""
    failed = []
    for check in checks:
        problem = run_check(check, cwd)
        if problem is not None:
            failed.append(dict(check, problem=problem))
    return failed
