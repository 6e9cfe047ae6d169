"""``distlaunch runs --tui`` (and ``distlaunch`` alone in a terminal): pick a run on the runs
screen (``tui/runs_view.py``), then attach to it or replay it."""

from __future__ import annotations

import argparse


def run_runs_screen() -> int:
    from launcher.commands.attach import run_attach, run_replay
    from tui.runs_view import RunsApp

    choice = RunsApp().run()
    if choice is None:
        return 0
    if choice.action == "attach":
        return run_attach(argparse.Namespace(run=str(choice.path), no_tui=False, json=False))
    return run_replay(argparse.Namespace(run=str(choice.path), speed=1.0))
