"""What the user asks of the job from the dashboard: restart or stop a task, stacks, a profile,
tear down, leave.

Only `D` (tear down, confirmed) and `r`/`x` call `JobControl` from inside the app, off the UI
thread; leaving returns a `DashboardResult` the caller acts on. `JobActions` is a part the
dashboard screen (dashboard.py) holds for these keys; it takes the state and the widgets
(frame.py) and the screen it asks on (confirmations, workers, notifications).
"""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Callable
from functools import partial
from typing import Any

from textual.app import App
from textual.screen import Screen

from launcher.supervise.control import JobControl
from tui.frame import DashboardResult, DashboardState, DashboardWidgets, LeaveAction
from tui.screens import QUIT_DETACH, QUIT_TEARDOWN, ConfirmScreen, QuitScreen
from tui.stacks_view import stacks_screen

NOT_IN_REPLAY = "not available in replay"
PROFILE_SECONDS = 2.0


def profile_summary(run_id: str, task_id: str) -> str:
    """Run `distlaunch profile RUN TASK --json` and say what it found, in a few lines."""
    argv = [sys.executable, "-c", "import sys; from launcher.cli import main; sys.exit(main())",
            "profile", run_id, task_id, "--seconds", f"{PROFILE_SECONDS:g}", "--json"]
    try:
        done = subprocess.run(argv, capture_output=True, text=True, timeout=120, check=False)
    except (OSError, subprocess.TimeoutExpired) as exc:
        return f"profile of {task_id} failed: {exc}"
    try:
        answer = json.loads(done.stdout)
    except ValueError:
        last = (done.stderr.strip().splitlines() or ["no answer"])[-1]
        return f"profile of {task_id} failed: {last}"
    lines = []
    for task in answer.get("tasks", []):
        lines.append(f"{task['task']}: {task['steps']} steps" + (
            f", {task['step_ms']:.1f} ms/step" if task.get("step_ms") else ""))
        if task.get("input") is not None:
            lines.append(f"input {task['input']:.0f}% compute {task['compute']:.0f}% "
                         f"communication {task['communication']:.0f}% other {task['other']:.0f}%")
        lines.append(task.get("statement") or task.get("note") or "")
    lines.append(f"kept in {answer.get('logdir')}")
    return "\n".join(line for line in lines if line)


def leave(app: App[Any], state: DashboardState, action: LeaveAction) -> None:
    """End the app with how the user left; a confirmed `D` makes any way out a teardown."""
    if state.teardown_requested and action == "quit":
        action = "teardown"
    state.close_source()
    app.exit(DashboardResult(action, state.teardown_requested))


class JobActions:
    """The actions on the job and the way out."""

    def __init__(self, state: DashboardState, widgets: DashboardWidgets, screen: Screen[Any]) -> None:
        self.state = state
        self.widgets = widgets
        self.screen = screen

    def _control_or_say(self) -> JobControl | None:
        if self.state.control is None:
            self.screen.notify(NOT_IN_REPLAY, severity="warning")
        return self.state.control

    def _call_control(self, what: str, call: Callable[[], None]) -> None:
        """Control calls may touch the network: run them off the UI thread, report failures."""
        app = self.screen.app

        def run() -> None:
            try:
                call()
            except Exception as exc:
                app.call_from_thread(app.notify, f"{what} failed: {exc}", severity="error")

        app.run_worker(run, thread=True, group="control", name=what)

    def _selected_or_say(self) -> str | None:
        task_id = self.widgets.table.selected_task
        if task_id is None:
            self.screen.notify("No task selected", severity="warning")
        return task_id

    def _task_action(self, verb: str, method: Callable[[JobControl, str], None]) -> None:
        control = self._control_or_say()
        if control is None:
            return
        task_id = self._selected_or_say()
        if task_id is None:
            return

        def confirmed(yes: bool | None) -> None:
            if yes:
                self._call_control(f"{verb} {task_id}", partial(method, control, task_id))
                self.screen.notify(f"{verb.capitalize()} of {task_id} requested")

        self.screen.app.push_screen(ConfirmScreen(f"{verb.capitalize()} {task_id}?", verb.capitalize()), confirmed)

    def restart_task(self) -> None:
        self._task_action("restart", lambda control, task_id: control.restart_task(task_id))

    def stop_task(self) -> None:
        self._task_action("stop", lambda control, task_id: control.stop_task(task_id))

    def stacks(self, whole_job: bool) -> None:
        """`k` / `K`: the stacks view (tui/stacks_view.py), live or from the run dir's last capture."""
        self.screen.app.push_screen(stacks_screen(self.state, self.widgets.table.selected_task, whole_job))

    def profile(self) -> None:
        """`P`: a profiler capture of the selected task (`distlaunch profile`, in a process of its own:
        TensorFlow stays out of the dashboard), its analysis in a notification."""
        if self._control_or_say() is None:
            return
        task_id = self._selected_or_say()
        if task_id is None:
            return
        app = self.screen.app
        run_id = self.state.view.run
        app.notify(f"Capturing a {PROFILE_SECONDS:g} s profile of {task_id} ...")

        def run() -> None:
            app.call_from_thread(app.notify, profile_summary(run_id, task_id), timeout=20)

        app.run_worker(run, thread=True, group="profile", name=f"profile {task_id}")

    def teardown(self) -> None:
        control = self._control_or_say()
        if control is None:
            return

        def confirmed(yes: bool | None) -> None:
            if yes:
                self.state.teardown_requested = True
                self._call_control("teardown", control.teardown)
                self.screen.notify("Teardown requested: stopping every task", severity="warning")

        self.screen.app.push_screen(ConfirmScreen("Tear down the whole job? Every task on every host is stopped.",
                                                  "Tear down"), confirmed)

    def ask_leave(self) -> None:
        """`q`: leave at once when the job is over (or a replay); else ask: tear down, detach, or stay."""
        app = self.screen.app
        if not self.state.job_running:
            leave(app, self.state, "quit")
            return

        def chosen(choice: str | None) -> None:
            if choice == QUIT_TEARDOWN:
                leave(app, self.state, "teardown")
            elif choice == QUIT_DETACH:
                leave(app, self.state, "detach")

        app.push_screen(QuitScreen(), chosen)
