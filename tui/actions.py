"""What the user asks of the job from the dashboard: restart or stop a task, tear down, leave.

Only `D` (tear down, confirmed) and `r`/`x` call `JobControl` from inside the app, off the UI
thread; leaving returns a `DashboardResult` the caller acts on. `JobActions` is a part the app
holds; it sees the app through `ActionsOwner`.
"""

from __future__ import annotations

import json
import subprocess
import sys
import threading
from collections.abc import Callable
from functools import partial
from pathlib import Path
from typing import Any, Protocol

from textual.binding import Binding
from textual.notifications import SeverityLevel
from textual.screen import Screen
from textual.worker import Worker

from launcher.supervise.control import JobControl
from launcher.telemetry.jobview import JobView
from tui.frame import DashboardResult, LeaveAction
from tui.screens import QUIT_DETACH, QUIT_TEARDOWN, ConfirmScreen, HelpScreen, QuitScreen
from tui.stacks_view import stacks_screen
from tui.task_table import TaskTable

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


class ActionsOwner(Protocol):
    """What the actions use of the app: the job's control and state, the table's selection, and
    the app's screens, workers and end."""

    control: JobControl | None
    view: JobView
    lock: threading.Lock
    live: bool
    clock: Callable[[], float]
    run_dir: Path | None
    stream_ended: bool
    teardown_requested: bool
    table: TaskTable

    @property
    def screen(self) -> Screen[object]: ...

    def action_bindings(self) -> list[Binding]: ...

    def close_source(self) -> None: ...

    def push_screen(self, screen: Screen[Any], callback: Callable[[Any], None] | None = None) -> object: ...

    def run_worker(self, work: Callable[[], None], name: str | None = "", group: str = "default",
                   description: str = "", exit_on_error: bool = True, start: bool = True,
                   exclusive: bool = False, thread: bool = False) -> Worker[None]: ...

    def call_from_thread(self, callback: Callable[..., Any], *args: Any, **kwargs: Any) -> Any: ...

    def notify(self, message: str, *, title: str = "", severity: SeverityLevel = "information",
               timeout: float | None = None, markup: bool = True) -> None: ...

    def exit(self, result: DashboardResult | None = None, return_code: int = 0, message: Any = None) -> None: ...


class JobActions:
    """The actions on the job and the way out."""

    def __init__(self, owner: ActionsOwner) -> None:
        self.owner = owner

    def help(self) -> None:
        self.owner.push_screen(HelpScreen(self.owner.action_bindings()))

    def _control_or_say(self) -> JobControl | None:
        if self.owner.control is None:
            self.owner.notify(NOT_IN_REPLAY, severity="warning")
        return self.owner.control

    def _call_control(self, what: str, call: Callable[[], None]) -> None:
        """Control calls may touch the network: run them off the UI thread, report failures."""
        app = self.owner

        def run() -> None:
            try:
                call()
            except Exception as exc:
                app.call_from_thread(app.notify, f"{what} failed: {exc}", severity="error")

        app.run_worker(run, thread=True, group="control", name=what)

    def _task_action(self, verb: str, method: Callable[[JobControl, str], None]) -> None:
        app = self.owner
        control = self._control_or_say()
        task_id = app.table.selected_task
        if control is None:
            return
        if task_id is None:
            app.notify("No task selected", severity="warning")
            return

        def confirmed(yes: bool | None) -> None:
            if yes:
                self._call_control(f"{verb} {task_id}", partial(method, control, task_id))
                app.notify(f"{verb.capitalize()} of {task_id} requested")

        app.push_screen(ConfirmScreen(f"{verb.capitalize()} {task_id}?", verb.capitalize()), confirmed)

    def restart_task(self) -> None:
        self._task_action("restart", lambda control, task_id: control.restart_task(task_id))

    def stop_task(self) -> None:
        self._task_action("stop", lambda control, task_id: control.stop_task(task_id))

    def stacks(self, whole_job: bool) -> None:
        """`k` / `K`: the stacks view (tui/stacks_view.py), live or from the run dir's last capture."""
        self.owner.push_screen(stacks_screen(self.owner, whole_job))

    def profile(self) -> None:
        """`P`: a profiler capture of the selected task (`distlaunch profile`, in a process of its own:
        TensorFlow stays out of the dashboard), its analysis in a notification."""
        app = self.owner
        task_id = app.table.selected_task
        if self._control_or_say() is None:
            return
        if task_id is None:
            app.notify("No task selected", severity="warning")
            return
        run_id = app.view.run
        app.notify(f"Capturing a {PROFILE_SECONDS:g} s profile of {task_id} ...")

        def run() -> None:
            app.call_from_thread(app.notify, profile_summary(run_id, task_id), timeout=20)

        app.run_worker(run, thread=True, group="profile", name=f"profile {task_id}")

    def teardown(self) -> None:
        app = self.owner
        control = self._control_or_say()
        if control is None:
            return

        def confirmed(yes: bool | None) -> None:
            if yes:
                app.teardown_requested = True
                self._call_control("teardown", control.teardown)
                app.notify("Teardown requested: stopping every task", severity="warning")

        app.push_screen(ConfirmScreen("Tear down the whole job? Every task on every host is stopped.",
                                      "Tear down"), confirmed)

    def ask_leave(self) -> None:
        """`q`: leave at once when the job is over (or a replay); else ask: tear down, detach, or stay."""
        app = self.owner
        job_running = app.live and app.control is not None and not app.view.ended \
            and not app.stream_ended and not app.teardown_requested
        if not job_running:
            self.leave("quit")
            return

        def chosen(choice: str | None) -> None:
            if choice == QUIT_TEARDOWN:
                self.leave("teardown")
            elif choice == QUIT_DETACH:
                self.leave("detach")

        app.push_screen(QuitScreen(), chosen)

    def quit(self) -> None:
        """ctrl+q asks the same question as `q`: quitting never silently abandons a running job."""
        if not isinstance(self.owner.screen, QuitScreen):
            self.ask_leave()

    def leave(self, action: LeaveAction) -> None:
        app = self.owner
        if app.teardown_requested and action == "quit":
            action = "teardown"
        app.close_source()
        app.exit(DashboardResult(action, app.teardown_requested))
