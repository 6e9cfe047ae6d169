"""What preflight checks on each host for the tasks it will run, and how a failure is worded.

``host_checks`` turns a plan into path checks per host (the agent's ``preflight`` verb runs them
with launcher/agent/hostcheck.py in the same round trip as the port checks); ``describe`` turns a
failed check into the one line the user reads: host, role, path, and the profile key to fix.

What a command needs is read from its template: after ``{python}`` the first argument that is
not an option is the script (checked when it ends in ``.py``), ``-m module`` names a module the
interpreter must import; a command without ``{python}`` needs its first word as an executable.
A containerised task's workdir and script are checked on the host (they are mounted at the same
path); its modules and programs are the image's, not checked here.
"""

from __future__ import annotations

import shlex
from typing import Any

from launcher.model import Plan, Profile, TaskSpec
from launcher.plan import task_container

#: python options that take a value as the next argument
_PY_OPTIONS_WITH_VALUE = ("-W", "-X", "-Q")
#: words a command may start with that are not the program (shell syntax and wrappers)
_SHELL_WORDS = frozenset({"exec", "env", "nice", "nohup", "time", "command", "builtin", "cd", "source",
                          ".", "if", "for", "while", "case", "{", "(", "!", "eval", "set", "export",
                          "ulimit", "umask", "true", "false", ":", "test", "["})


def _key(profile: Profile, role: str, name: str) -> str:
    """The profile key to fix: the role's own when it overrides [defaults], else [defaults]'s."""
    role_value = getattr(profile.roles[role].settings, name)
    if role_value != getattr(profile.defaults, name):
        return f"roles.{role}.{name}"
    return f"defaults.{name}"


def command_needs(template: str) -> tuple[str, str] | None:
    """(kind, what) the command needs on the host: ("file", "train.py"), ("module", "pkg.main"),
    ("executable", "./run.sh"); None where the command cannot be judged without running a shell."""
    try:
        words = shlex.split(template)
    except ValueError:
        return None
    while words and "=" in words[0] and not words[0].startswith(("=", "{")):
        words = words[1:]  # VAR=value prefixes
    if "{python}" in words:
        rest = words[words.index("{python}") + 1:]
        while rest:
            word = rest.pop(0)
            if word == "-m" and rest:
                return ("module", rest[0]) if "{" not in rest[0] else None
            if word == "-c":
                return None
            if word in _PY_OPTIONS_WITH_VALUE:
                rest = rest[1:]
                continue
            if word.startswith("-"):
                continue
            return ("file", word) if word.endswith(".py") and "{" not in word else None
        return None
    if not words or words[0] in _SHELL_WORDS or "{" in words[0] or "$" in words[0]:
        return None
    if any(ch in words[0] for ch in "|&;<>()`*?"):
        return None
    return ("executable", words[0])


def host_checks(plan: Plan) -> dict[str, list[dict[str, Any]]]:
    """Host name -> the checks of its tasks, one per (role, thing checked): 64 workers of one role
    on a host ask the same questions once."""
    profile = plan.profile
    checks: dict[str, dict[tuple[str, ...], dict[str, Any]]] = {}
    for task in plan.tasks:
        mine = checks.setdefault(task.host, {})
        _add(mine, {"kind": "dir", "path": task.workdir, "role": task.role,
                    "key": _key(profile, task.role, "workdir")})
        needs = command_needs(profile.roles[task.role].settings.command)
        if needs is None:
            continue
        kind, what = needs
        if kind != "file" and task_container(plan, task) is not None:
            continue  # its python and programs are the image's: the start says if one is missing
        check: dict[str, Any] = {"kind": kind, "path": what, "workdir": task.workdir, "role": task.role,
                                 "key": _key(profile, task.role, "command")}
        if kind == "module":
            check["python"] = _shell_python(task, profile)
            if "PYTHONPATH" in task.env:
                check["pythonpath"] = task.env["PYTHONPATH"]
        if kind == "executable" and "PATH" in task.env:
            check["path_env"] = task.env["PATH"]
        if kind in ("module", "executable"):  # looked up as the task's own shell would, after its setup
            if task.setup:
                check["setup"] = list(task.setup)
            if task.shell:
                check["shell"] = task.shell
        _add(mine, check)
    return {host: list(found.values()) for host, found in checks.items()}


def _shell_python(task: TaskSpec, profile: Profile) -> str:
    """The interpreter as the task's command spells it (a profile's python is shell text)."""
    return profile.roles[task.role].settings.python or shlex.quote(task.python)


def _add(checks: dict[tuple[str, ...], dict[str, Any]], check: dict[str, Any]) -> None:
    ident = tuple(str(check.get(k, "")) for k in ("kind", "path", "workdir", "python", "role", "setup", "shell"))
    checks.setdefault(ident, check)


def describe_all(host: str, failed: list[dict[str, Any]]) -> list[str]:
    """One line per mistake: roles that share a failed check (one workdir for all) share its line."""
    merged: dict[tuple[str, ...], dict[str, Any]] = {}
    for check in failed:
        ident = tuple(str(check.get(k, "")) for k in ("kind", "path", "workdir", "key", "problem"))
        if ident in merged:
            merged[ident]["roles"].append(str(check.get("role")))
        else:
            merged[ident] = dict(check, roles=[str(check.get("role"))])
    return [describe(host, check) for check in merged.values()]


def describe(host: str, failed: dict[str, Any]) -> str:
    """One line for a failed check: where, which role, what is wrong, and which key to fix."""
    kind, path, problem = failed.get("kind"), failed.get("path"), failed.get("problem")
    roles = failed.get("roles") or [failed.get("role")]
    where = f"host {host}, role{'s' if len(roles) > 1 else ''} {', '.join(map(str, roles))}"
    key = failed.get("key")
    if kind == "dir":
        return f"{where}: workdir {path} {problem}; create it or fix `{key}`"
    if kind == "file":
        return (f"{where}: script {path} {problem} in workdir {failed.get('workdir')}; "
                f"fix the script name in `{key}` or the workdir")
    if kind == "module":
        return (f"{where}: module {path} {problem} from workdir {failed.get('workdir')}; "
                f"fix `{key}` or `python`")
    if kind in ("executable", "module") and "the setup lines failed" in str(problem):
        detail = str(problem).rsplit("(", 1)[-1].rstrip(")")
        return (f"{where}: the setup lines failed ({detail}) before {path} could be looked up; "
                "fix `setup` (in [defaults] or the role)")
    if kind == "executable":
        return f"{where}: program {path} {problem}; install it or fix `{key}`"
    return f"{where}: {path}: {problem}"
