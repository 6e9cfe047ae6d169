"""What the user asks of the job from the dashboard: restart or stop a task, tear down, leave.

Only `D` (tear down, confirmed) and `r`/`x` call `JobControl` from inside the app, off the UI
thread; leaving returns a `DashboardResult` the caller acts on.
"""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Callable
from functools import partial

from launcher.supervise.control import JobControl
from tui.frame import DashboardFrame, DashboardResult, LeaveAction
from tui.screens import QUIT_DETACH, QUIT_TEARDOWN, ConfirmScreen, HelpScreen, QuitScreen
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


class JobActions(DashboardFrame):
    """The actions on the job and the way out."""

    def action_help(self) -> None:
        self.push_screen(HelpScreen(self.action_bindings()))

    def _control_or_say(self) -> JobControl | None:
        if self.control is None:
            self.notify(NOT_IN_REPLAY, severity="warning")
        return self.control

    def _call_control(self, what: str, call: Callable[[], None]) -> None:
        """Control calls may touch the network: run them off the UI thread, report failures."""

        def run() -> None:
            try:
                call()
            except Exception as exc:
                self.call_from_thread(self.notify, f"{what} failed: {exc}", severity="error")

        self.run_worker(run, thread=True, group="control", name=what)

    def _task_action(self, verb: str, method: Callable[[JobControl, str], None]) -> None:
        control = self._control_or_say()
        task_id = self.table.selected_task
        if control is None:
            return
        if task_id is None:
            self.notify("No task selected", severity="warning")
            return

        def confirmed(yes: bool | None) -> None:
            if yes:
                self._call_control(f"{verb} {task_id}", partial(method, control, task_id))
                self.notify(f"{verb.capitalize()} of {task_id} requested")

        self.push_screen(ConfirmScreen(f"{verb.capitalize()} {task_id}?", verb.capitalize()), confirmed)

    def action_restart_task(self) -> None:
        self._task_action("restart", lambda control, task_id: control.restart_task(task_id))

    def action_stop_task(self) -> None:
        self._task_action("stop", lambda control, task_id: control.stop_task(task_id))

    def action_stacks(self, whole_job: bool) -> None:
        """`k` / `K`: the stacks view (tui/stacks_view.py), live or from the run dir's last capture."""
        self.push_screen(stacks_screen(self, whole_job))

    def action_profile(self) -> None:
        """`P`: a profiler capture of the selected task (`distlaunch profile`, in a process of its own:
        TensorFlow stays out of the dashboard), its analysis in a notification."""
        task_id = self.table.selected_task
        if self._control_or_say() is None:
            return
        if task_id is None:
            self.notify("No task selected", severity="warning")
            return
        run_id = self.view.run
        self.notify(f"Capturing a {PROFILE_SECONDS:g} s profile of {task_id} ...")

        def run() -> None:
            self.call_from_thread(self.notify, profile_summary(run_id, task_id), timeout=20)

        self.run_worker(run, thread=True, group="profile", name=f"profile {task_id}")

    def action_teardown(self) -> None:
        control = self._control_or_say()
        if control is None:
            return

        def confirmed(yes: bool | None) -> None:
            if yes:
                self.teardown_requested = True
                self._call_control("teardown", control.teardown)
                self.notify("Teardown requested: stopping every task", severity="warning")

        self.push_screen(ConfirmScreen("Tear down the whole job? Every task on every host is stopped.",
                                       "Tear down"), confirmed)

    def action_leave(self) -> None:
        job_running = self.live and self.control is not None and not self.view.ended \
            and not self.stream_ended and not self.teardown_requested
        if not job_running:
            self.leave("quit")
            return

        def chosen(choice: str | None) -> None:
            if choice == QUIT_TEARDOWN:
                self.leave("teardown")
            elif choice == QUIT_DETACH:
                self.leave("detach")

        self.push_screen(QuitScreen(), chosen)

    async def action_quit(self) -> None:
        """ctrl+q asks the same question as `q`: quitting never silently abandons a running job."""
        if not isinstance(self.screen, QuitScreen):
            self.action_leave()

    def leave(self, action: LeaveAction) -> None:
        if self.teardown_requested and action == "quit":
            action = "teardown"
        self.close_source()
        self.exit(DashboardResult(action, self.teardown_requested))
