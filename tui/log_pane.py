"""The selected task's output: follows new lines, can be paused and filtered by a search."""

from __future__ import annotations

from rich.text import Text
from textual.app import ComposeResult
from textual.containers import Vertical
from textual.widgets import Input, RichLog, Static

from tui.model import LOG_LINES, JobView, LogLine

SHOWN_ON_SWITCH = 500
"""Lines written when the selection or the search changes: enough scroll-back, cheap to draw."""


def log_text(line: LogLine, query: str) -> Text:
    text = Text(line.line, style="red" if line.stream == "stderr" else "", no_wrap=True)
    if query:
        text.highlight_words([query], style="bold black on yellow", case_sensitive=False)
    return text


def matches(line: LogLine, query: str) -> bool:
    return not query or query.lower() in line.line.lower()


class LogPane(Vertical):
    """Shows one task's log. While paused it stops writing (the view holds still) and counts
    what it missed; resuming writes the missed lines."""

    def __init__(self, *, id: str | None = None) -> None:
        super().__init__(id=id)
        self.task_id: str | None = None
        self.paused = False
        self.search_query = ""
        self._seen_total = 0
        self._title_shown = ""

    def compose(self) -> ComposeResult:
        yield Static("", id="log-title")
        lines = RichLog(id="log-lines", max_lines=LOG_LINES, wrap=False, markup=False, auto_scroll=True)
        lines.can_focus = False
        yield lines
        yield Input(placeholder="search this task's log (enter: keep, esc: clear)", id="log-search")

    @property
    def lines(self) -> RichLog:
        return self.query_one("#log-lines", RichLog)

    @property
    def search_input(self) -> Input:
        return self.query_one("#log-search", Input)

    def show_task(self, view: JobView, task_id: str | None) -> None:
        """Redraw from scratch: another task, or another search."""
        self.task_id = task_id
        lines = self.lines
        lines.clear()
        self._seen_total = 0
        if task_id is not None:
            log = view.log(task_id)
            wanted = [line for line in log.lines if matches(line, self.search_query)][-SHOWN_ON_SWITCH:]
            for line in wanted:
                lines.write(log_text(line, self.search_query))
            self._seen_total = log.total
        self._update_title(view)

    def sync(self, view: JobView) -> None:
        """Write the lines that arrived since the last call, unless paused."""
        if self.task_id is not None and not self.paused:
            log = view.log(self.task_id)
            for line in log.since(self._seen_total):
                if matches(line, self.search_query):
                    self.lines.write(log_text(line, self.search_query))
            self._seen_total = log.total
        self._update_title(view)

    def set_paused(self, view: JobView, paused: bool) -> None:
        self.paused = paused
        self.sync(view)

    def set_query(self, view: JobView, query: str) -> None:
        self.search_query = query
        self.show_task(view, self.task_id)

    def _update_title(self, view: JobView) -> None:
        title = f"log {self.task_id or '(no task selected)'}"
        if self.task_id is not None and self.paused:
            missed = view.log(self.task_id).total - self._seen_total
            title += f"  [PAUSED, {missed} new — space/f to follow]"
        elif self.task_id is not None:
            title += "  [following]"
        if self.search_query:
            title += f"  filter: {self.search_query!r}"
        if title != self._title_shown:
            self._title_shown = title
            self.query_one("#log-title", Static).update(Text(title, style="bold"), layout=False)
