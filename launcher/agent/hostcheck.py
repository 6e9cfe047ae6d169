"""Path checks run ON a host before any task starts: workdir, script, module, executable.

Shipped in the agent zipapp and run by the agent's ``preflight`` verb, so it is stdlib-only and
works on Python >= 3.9. The launcher sends a list of checks (``build`` side: launcher/remote/taskcheck.py)
and gets back the ones that failed, each with a short detail; it words the user's message itself.

A relative path is taken from ``cwd``, the directory the ``run`` agent starts tasks from, and
``~`` is expanded as the ``run`` agent expands it, so preflight judges what the start will see.
"""

from __future__ import annotations

import os
import shlex
import subprocess

# typing only for the type checker: a launch's preflight on each host imports this module,
# and `typing` cost ~10 ms of CPU there (annotations are strings here, never evaluated)
TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any, Dict, List, Optional, Tuple

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


#: the exit code of a check script whose setup lines failed
SETUP_FAILED = 97


def _in_task_shell(check: Dict[str, Any], line: str, workdir: str, env: Dict[str, str],
                   ) -> "subprocess.CompletedProcess[bytes]":
    """Run ``line`` as the task would run its command: in its shell, after its setup lines (a venv
    or a module load changes which python and which programs there are)."""
    setup = [str(s) for s in check.get("setup") or []]
    # { ...; } not ( ... ): the setup's exports and activations must reach the line after it
    script = ("{ %s; } || exit %d\n" % (" && ".join(setup), SETUP_FAILED) if setup else "") + line
    shell = shlex.split(str(check["shell"])) if check.get("shell") else ["/bin/sh", "-c"]
    return subprocess.run([*shell, script], cwd=workdir, env=env, stdin=subprocess.DEVNULL,
                          stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, timeout=MODULE_CHECK_SECONDS)


def _shell_check(check: Dict[str, Any], line: str, workdir: str, env: Dict[str, str]) -> Tuple[int, str]:
    """(exit code, last stderr line) of ``line`` in the task's shell; -1 when it could not run."""
    try:
        result = _in_task_shell(check, line, workdir, env)
    except subprocess.TimeoutExpired:
        return -1, "it took over %g s" % MODULE_CHECK_SECONDS
    except OSError as exc:
        return -1, str(exc)
    last = result.stderr.decode("utf-8", "replace").strip().splitlines() or ["exit %d" % result.returncode]
    return result.returncode, last[-1]


def _check_executable(check: Dict[str, Any], name: str, workdir: str) -> Optional[str]:
    if "/" in name:
        path = resolve(name, workdir)
        if not os.path.exists(path):
            return "does not exist"
        if os.path.isdir(path) or not os.access(path, os.X_OK):
            return "is not executable"
        return None
    # the shell itself answers: builtins (exit, test, ...) count as found, as they run fine
    env = dict(os.environ)
    if check.get("path_env") is not None:
        env["PATH"] = str(check["path_env"])
    code, last = _shell_check(check, "command -v %s" % shlex.quote(name), workdir, env)
    if code == 0:
        return None
    if code == SETUP_FAILED:
        return "could not be looked up: the setup lines failed (%s)" % last
    return "is not on the PATH" if code > 0 else "could not be looked up: %s" % last


def _check_module(check: Dict[str, Any], module: str, workdir: str) -> Optional[str]:
    """Can the task's python (shell text, as in its command) import ``module`` from ``workdir``?"""
    python = str(check["python"])
    env = dict(os.environ)
    if check.get("pythonpath"):
        env["PYTHONPATH"] = str(check["pythonpath"])
    line = "%s -c %s %s" % (python, shlex.quote(_FIND_MODULE), shlex.quote(module))
    code, last = _shell_check(check, line, workdir, env)
    if code == 0:
        return None
    if code == 3:
        return "is not importable by %s" % python
    if code == SETUP_FAILED:
        return "could not be checked: the setup lines failed (%s)" % last
    return "could not be checked with %s (%s)" % (python, last)


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
        return _check_executable(check, str(check["path"]), workdir)
    if kind == "module":
        return _check_module(check, str(check["path"]), workdir)
    return "unknown check %r" % kind


def run_checks(checks: List[Dict[str, Any]], cwd: str) -> List[Dict[str, Any]]:
    """The failed checks, each the check as sent plus ``problem``."""
    failed = []
    for check in checks:
        problem = run_check(check, cwd)
        if problem is not None:
            failed.append(dict(check, problem=problem))
    return failed
