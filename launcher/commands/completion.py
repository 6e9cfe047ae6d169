"""Shell completion (bash, zsh, fish) through argcomplete: verbs, options, profiles, run ids, task ids.

``distlaunch completion SHELL`` prints the shell's hook; the hook calls ``distlaunch`` with
``_ARGCOMPLETE`` set, and ``complete()`` answers from the same argparse parser the CLI uses, with
run ids from the state root and task ids from the run (or, for ``tfconfig``, from the profile).
"""

from __future__ import annotations

import argparse
import contextlib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

SHELLS = ("bash", "zsh", "fish")


def run_ids(prefix: str = "", **_: Any) -> list[str]:
    """Run ids under the state root, newest first."""
    from launcher.paths import runs_root
    from launcher.rundir import LATEST_LINK, STATE_FILE

    root = runs_root()
    if not root.is_dir():
        return []
    found = [p for p in root.iterdir() if p.name != LATEST_LINK and (p / STATE_FILE).is_file()
             and p.name.startswith(prefix)]
    found.sort(key=lambda p: (p / STATE_FILE).stat().st_mtime, reverse=True)
    return [p.name for p in found]


def task_ids(prefix: str = "", parsed_args: argparse.Namespace | None = None, **_: Any) -> list[str]:
    """The task ids of the run named earlier on the line, or of the profile (``tfconfig P TASK``)."""
    ids: list[str] = []
    with contextlib.suppress(Exception):  # a half-typed line must never print a traceback into the shell
        if getattr(parsed_args, "run", None):
            from launcher.runlookup import find_run
            from launcher.runstate import load_run_state

            ids = list(load_run_state(find_run(parsed_args.run)).tasks)  # type: ignore[union-attr]
        elif getattr(parsed_args, "profile", None):
            from launcher.plan import build_plan
            from launcher.profile.reader import load_profile

            ids = [t.task_id for t in build_plan(load_profile(Path(parsed_args.profile))).tasks]  # type: ignore[union-attr]
    return [t for t in ids if t.startswith(prefix)]


def stacks_targets(prefix: str = "", parsed_args: argparse.Namespace | None = None, **_: Any) -> list[str]:
    """``stacks [RUN] [TASK...]``: run ids and the most recent run's task ids first, then the task
    ids of the run named (or the most recent one) not given yet."""
    from launcher.commands.stacks import split_targets

    given = list(getattr(parsed_args, "targets", None) or [])
    run, tasks = split_targets(given)
    ids: list[str] = []
    with contextlib.suppress(Exception):
        from launcher.runlookup import find_run
        from launcher.runstate import load_run_state

        ids = [t for t in load_run_state(find_run(run)).tasks if t not in tasks]
    words = ids if given else run_ids(prefix) + ids
    return [w for w in words if w.startswith(prefix)]


def _actions(parser: argparse.ArgumentParser) -> Iterator[argparse.Action]:
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for sub in action.choices.values():
                yield from _actions(sub)
        else:
            yield action


def complete(parser: argparse.ArgumentParser) -> None:
    """Answer a completion request and exit, if this process is one (``_ARGCOMPLETE`` set)."""
    import argcomplete
    from argcomplete.completers import DirectoriesCompleter, FilesCompleter

    for action in _actions(parser):
        completer: Any = None
        if action.dest in ("run", "runs"):  # prune RUN...
            completer = run_ids
        elif action.dest == "task":
            completer = task_ids
        elif action.dest == "targets":
            completer = stacks_targets
        elif action.dest == "profile":
            completer = FilesCompleter(("toml",))
        elif action.dest == "script":
            completer = FilesCompleter(("py",))
        elif action.dest == "dir":
            completer = DirectoriesCompleter()
        if completer is not None:
            action.completer = completer  # type: ignore[attr-defined]
    argcomplete.autocomplete(parser, always_complete_options=False)  # options once "-" is typed


def run_completion(shell: str) -> int:
    """``distlaunch completion SHELL``: the hook to put in the shell's startup file."""
    import argcomplete

    print(argcomplete.shellcode(["distlaunch"], shell=shell), end="")
    return 0
