"""The job header: name, strategy, job state, elapsed, global step, rate, restarts, hosts."""

from __future__ import annotations

from rich.text import Text
from textual.widgets import Static

from launcher.telemetry.jobview import JobView
from tui import format as fmt
from tui.stacks_data import job_stall_line


def header_text(view: JobView, now: float, *, title: str, strategy: str, hosts_total: int,
                live: bool, stream_ended: bool, replay: str = "") -> Text:
    text = Text(no_wrap=False)
    text.append(" distlaunch ", style="bold reverse")
    text.append(f" {title} ", style="bold")
    text.append(f"[{strategy}]", style="dim")
    text.append("  job ")
    text.append(view.state, style=fmt.JOB_STATE_STYLES.get(view.state, ""))
    if not live:
        text.append(f" (replay {replay})" if replay else " (replay)", style="dim italic")
    elif stream_ended and not view.ended:
        text.append(" (stream ended)", style="dim italic")
    if view.failure_cause:
        text.append(f"  root cause: {view.failure_cause}", style="bold red")
    text.append("  elapsed ")
    text.append(fmt.duration(view.elapsed(now)), style="bold")
    text.append("\n ")
    step = view.global_step
    calls = any(t.step_is_calls for t in view.tasks.values() if t.step is not None)
    text.append("step (calls) " if calls else "step ")  # train calls counted: no step variable
    text.append(str(step) if step is not None else fmt.MISSING, style="bold")
    text.append("  ")
    text.append(fmt.number(view.global_steps_per_s(view.rate_clock(now))), style="bold")
    text.append(" steps/s  restarts ")
    restarts = view.total_restarts
    text.append(str(restarts), style="bold yellow" if restarts else "bold")
    up = len(view.hosts_up())
    text.append("  hosts ")
    text.append(f"{up}/{hosts_total}", style="bold" if up >= hosts_total else "bold yellow")
    text.append(" up")
    sizes = view.role_sizes_text()
    if sizes:  # a role that may shrink: how many of its tasks the job goes on with
        shrunk = any(s.get("running") != s.get("planned") for s in view.roles.values())
        text.append("  ")
        text.append(sizes, style="bold yellow" if shrunk else "")
    stall = job_stall_line(list(view.tasks.values()))
    if stall:
        text.append(f"  {stall}", style="bold dark_orange")
    return text


class JobHeader(Static):
    """Re-rendered only when its text changes."""

    def __init__(self, *, id: str | None = None) -> None:
        super().__init__("", id=id)
        self._shown = ""

    def show(self, text: Text) -> None:
        if text.markup != self._shown:
            self._shown = text.markup
            self.update(text, layout=False)  # always two lines: no relayout per tick
