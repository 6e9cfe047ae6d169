"""The stacks view (`k`: the selected task, `K`: the whole job): every task's Python stacks, identical
ones grouped, the suspect's group first.

The capture blocks for seconds (it asks every host): it runs in a thread worker while the view
says "capturing..." and stays usable; `r` takes a new one. In a replay, or when the
job has ended, the view shows the last capture kept in the run dir (`s` shows it in a live job).
"""

from __future__ import annotations

import contextlib

from rich.text import Text
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Vertical, VerticalScroll
from textual.screen import ModalScreen
from textual.widgets import Static

from launcher.agent.stackmodel import DISK_WAIT, FROZEN_STATES, ZOMBIE, TaskStacks, group, suspect, user_frame
from launcher.events import StacksEvent
from launcher.telemetry.stacktext import frame_line, header, thread_lines
from tui.frame import DashboardState
from tui.stacks_data import Capture, Fetch, NoCapture, clock_time, live_fetch, stored_fetch

SUSPECT_STYLE = "bold white on red"
USER_FRAME_STYLE = "bold black on yellow"
ODD_STATES = (*FROZEN_STATES, DISK_WAIT, ZOMBIE)
"""Process states named in red in a task's line (stopped T, disk wait D, zombie Z)."""


def task_line(stacks: TaskStacks) -> Text:
    """The task's line as `distlaunch stacks` prints it: host, pid, state, wchan, method, note."""
    return Text(f"  {header(stacks)}", style="bold red" if stacks.state in ODD_STATES else "")


def threads_text(sample: TaskStacks) -> Text:
    """Every thread of a group's sample, frames newest last as `distlaunch stacks` prints them; the
    innermost frame of the user's own code of each thread highlighted."""
    mine = {frame_line(f) for f in map(user_frame, sample.threads) if f is not None}
    text = Text()
    for line in thread_lines(sample):
        if line in mine:
            text.append(line, style=USER_FRAME_STYLE)
            text.append("  <- innermost frame of your code", style="bold yellow")
        else:
            text.append(line, style="cyan" if line.startswith("  Thread") else
                        "dim" if line.lstrip().startswith("[native]") else "")
        text.append("\n")
    return text


def summary(capture: Capture, groups: int, named: tuple[str, str] | None, source: str) -> Text:
    """``stacks of 8 tasks, taken 14:03:07 (3 groups); suspect: worker:1 — stopped``."""
    count = len(capture.stacks)
    text = Text(f"stacks of {count} task{'s' if count != 1 else ''}, taken {clock_time(capture.taken)} "
                f"({groups} group{'s' if groups != 1 else ''})", style="bold")
    if named is not None:
        text.append("; suspect: ", style="bold")
        text.append(f"{named[0]} — {named[1]}", style=SUSPECT_STYLE)
    if source:
        text.append(f"\n{source}", style="italic")
    return text


def capture_text(capture: Capture, source: str = "") -> tuple[Text, Text]:
    """(the header, the body) of the view for one capture; `source` says where it comes from."""
    named = suspect(capture.stacks)
    groups = group(capture.stacks)  # the suspect's first, then the largest
    by_task = {s.task: s for s in capture.stacks}
    body = Text()
    for found in groups:
        body.append(f" {found.label} ", style=SUSPECT_STYLE if found.suspect else "bold reverse")
        if found.suspect and named is not None:
            body.append(f" SUSPECT: {named[1]}", style="bold red")
        body.append("\n")
        for task_id in found.tasks:
            body.append_text(task_line(by_task[task_id]))
            body.append("\n")
        body.append_text(threads_text(found.sample))  # the members share its main thread's stack
        body.append("\n")
    if not groups:
        body.append("no task answered (none is running?)", style="italic")
    return summary(capture, len(groups), named, source), body


class StacksScreen(ModalScreen[None]):
    """The stacks of one task or of the whole job; `a` switches between the two, `r` recaptures, `s`
    between a live capture and the last one kept in the run dir (at a stall, or by `distlaunch
    stacks`). ``live``: how to
    capture now (None: no live job, only the stored capture)."""

    DEFAULT_CSS = """
    .dialog.stacks { width: 96%; height: 92%; max-width: 100%; border: thick $primary; padding: 0 1; }
    #stacks-title { height: auto; margin-bottom: 1; }
    #stacks-scroll { height: 1fr; }
    #stacks-hint { height: auto; color: $text-muted; }
    """
    BINDINGS = [
        Binding("r", "refresh_stacks", "Capture again", id="stacks.refresh"),
        Binding("a", "toggle_scope", "Selected task / whole job", id="stacks.scope"),
        Binding("n", "toggle_native", "Native frames on/off", id="stacks.native"),
        Binding("s", "toggle_stored", "Live / the last capture kept in the run dir", id="stacks.stored"),
        Binding("escape,q,k,K", "dismiss", "Close", id="stacks.close"),
    ]

    def __init__(self, live: Fetch | None, stored: Fetch, selected: str | None, whole_job: bool) -> None:
        super().__init__(classes="dialog-screen")
        self.live_fetch = live
        self.stored_fetch = stored
        self.show_stored = live is None
        self.selected = selected
        self.whole_job = whole_job or selected is None
        self.native = False
        self.capturing = False
        self.again = False
        """Asked for another capture (`r`, `a`, `n`) while one was under way."""
        self.captures = 0
        """Captures shown so far (tests wait on it)."""
        self.capture: Capture | None = None
        self.title_text = ""
        self.body_text = ""
        """What the header and the body show, as plain text."""

    def compose(self) -> ComposeResult:
        with Vertical(classes="dialog stacks"):
            yield Static("", id="stacks-title")
            with VerticalScroll(id="stacks-scroll"):
                yield Static("", id="stacks-body")
            yield Static("", id="stacks-hint")

    def on_mount(self) -> None:
        self.query_one("#stacks-scroll").focus()
        self.action_refresh_stacks()

    @property
    def live(self) -> bool:
        """Whether a capture is taken now (else the stored one is read)."""
        return not self.show_stored

    @property
    def scope(self) -> str:
        return "the whole job" if self.whole_job else f"task {self.selected}"

    def _hint(self) -> None:
        other = f"only {self.selected}" if self.whole_job and self.selected else "whole job"
        switch = f" · a: {other}" if self.selected else ""
        native = " · n: no native frames" if self.native else " · n: native frames" if self.live else ""
        stored = "" if self.live_fetch is None else " · s: live" if self.show_stored else " · s: stored capture"
        self.query_one("#stacks-hint", Static).update(f"showing {self.scope} · r: {'capture' if self.live else 'read'} "
                                                      f"again{switch}{native}{stored} · esc: close")

    def action_refresh_stacks(self) -> None:
        self._hint()
        if self.capturing:  # one capture at a time: the next starts when this one is shown
            self.again = True
            self.notify("a capture is under way: another follows it", timeout=2)
            return
        self.capturing = True
        verb = "capturing" if self.live else "reading"
        self._put(Text(f"{verb} the stacks of {self.scope}...", style="bold italic"), None)
        tasks = None if self.whole_job else [str(self.selected)]
        native = self.native and self.live
        self.run_worker(lambda: self._take(tasks, native), thread=True, group="stacks", name="stacks")

    def _take(self, tasks: list[str] | None, native: bool) -> None:
        """Worker thread: take the capture, then hand it (or the failure) to the UI thread."""
        result: Capture | str
        try:
            fetch = self.stored_fetch if self.show_stored else self.live_fetch
            assert fetch is not None
            result = fetch(tasks, native)
        except NoCapture as exc:
            result = f"no live job; {exc}" if self.live_fetch is None else str(exc)
        except Exception as exc:  # a host that does not answer must not break the view
            result = f"capture failed: {exc}"
        with contextlib.suppress(RuntimeError):  # the app has already gone
            self.app.call_from_thread(self._show, result)

    def _show(self, result: Capture | str) -> None:
        self.capturing = False
        if not self.is_attached:
            return
        if isinstance(result, str):
            self._put(Text(result, style="bold red" if self.live else "bold"), Text())
        else:
            self.capture = result
            self._put(*capture_text(result, result.source_line(job_live=self.live_fetch is not None)))
        self.captures += 1
        if self.again:
            self.again = False
            self.action_refresh_stacks()

    def _put(self, title: Text, body: Text | None) -> None:
        self.title_text = title.plain
        self.query_one("#stacks-title", Static).update(title)
        if body is not None:
            self.body_text = body.plain
            self.query_one("#stacks-body", Static).update(body)

    def action_toggle_scope(self) -> None:
        if self.selected is None:
            self.notify("no task selected: showing the whole job", timeout=2)
            return
        self.whole_job = not self.whole_job
        self.action_refresh_stacks()

    def action_toggle_native(self) -> None:
        if not self.live:
            self.notify("native frames need a live job: a stored capture is shown as taken", timeout=3)
            return
        self.native = not self.native
        self.action_refresh_stacks()

    def action_toggle_stored(self) -> None:
        if self.live_fetch is None:
            self.notify("no live job: this is the last capture kept in the run dir", timeout=3)
            return
        self.show_stored = not self.show_stored
        self.action_refresh_stacks()


def stacks_screen(state: DashboardState, selected: str | None, whole_job: bool) -> StacksScreen:
    """The view for the dashboard's job: a live capture while the job runs, else the run dir's last one."""
    running = state.live and state.control is not None and not state.view.ended and not state.stream_ended

    def last_event() -> StacksEvent | None:
        with state.lock:
            return state.view.last_stacks

    live = live_fetch(state.control, state.clock) if running and state.control is not None else None
    return StacksScreen(live, stored_fetch(state.run_dir, last_event), selected, whole_job)
