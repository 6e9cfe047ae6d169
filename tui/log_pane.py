"""The selected task's output: follows new lines, can be paused and filtered by a search."""

from __future__ import annotations

from collections import deque

from rich.style import Style
from rich.text import Text
from textual import events
from textual.app import ComposeResult
from textual.containers import Vertical
from textual.geometry import Region
from textual.message import Message
from textual.strip import Strip
from textual.widget import Widget
from textual.widgets import Input, Static

from launcher import events as ev
from launcher.telemetry.jobview import LOG_LINES, JobView, LogLine
from launcher.telemetry.tfnoise import StartupFilter, hidden_note
from tui.stacks_data import stall_line

SHOWN_ON_SWITCH = 500
"""Lines written when the selection or the search changes: enough scroll-back, cheap to draw."""


REVEALED = Style(reverse=True)
"""The line the merged log opened this log at."""

SHOW_STARTUP_KEY = "v"
"""The key that shows / hides TensorFlow's start-up lines (bound in tui/app.py)."""


def log_text(line: LogLine, query: str, *, startup: bool = False) -> Text:
    style = "dim" if startup else "red" if line.stream == "stderr" else ""
    text = Text(line.line, style=style, no_wrap=True)
    if query:
        text.highlight_words([query], style="bold black on yellow", case_sensitive=False)
    return text


def matches(line: LogLine, query: str) -> bool:
    return not query or query.lower() in line.line.lower()


class LogLines(Widget):
    """The last lines of a log, bottom-aligned, drawn line by line (Textual's Line API).

    RichLog resizes its virtual area on every write, and each resize relayouts the whole
    screen; with a busy task that is several full repaints a second. This widget never
    changes size: it keeps an offset from the end (0 = following the tail), the mouse wheel
    moves it, and only its own region is repainted when lines arrive. Each line is rendered
    once, when first shown, and kept with its text."""

    DEFAULT_CSS = "LogLines { height: 1fr; }"

    def __init__(self, max_lines: int, *, id: str | None = None) -> None:
        super().__init__(id=id)
        self.entries: deque[_LogEntry] = deque(maxlen=max_lines)
        self.back = 0
        #: entries ever appended: entry number n is kept while n >= appended - len(entries)
        self.appended = 0
        self._base_style = Style()
        self._bring_into_sight: int | None = None  # an entry number, placed at the next paint

    @property
    def texts(self) -> list[Text]:
        return [entry.text for entry in self.entries]

    @property
    def plain_lines(self) -> list[str]:
        return [entry.text.plain for entry in self.entries]

    def replace(self, texts: list[Text]) -> None:
        self.entries.clear()
        self.back = 0
        self.append(texts)
        self.refresh()

    def append(self, texts: list[Text]) -> None:
        if not texts:
            return
        if self.back:
            self.back = min(self.back + len(texts), self._max_back(len(self.entries) + len(texts)))
        self.entries.extend(_LogEntry(text) for text in texts)
        self.appended += len(texts)
        self.refresh()

    def set_text(self, number: int, text: Text) -> bool:
        """Replace the text of entry `number` (counted by `appended`); False if it is no longer kept."""
        index = number - (self.appended - len(self.entries))
        if index < 0 or index >= len(self.entries):
            return False
        self.entries[index] = _LogEntry(text)
        self.refresh()
        return True

    def keep_in_sight(self, number: int) -> None:
        """Scroll so that entry ``number`` (counted by `appended`) is in the middle of the view,
        once its height is known (at the next paint)."""
        self._bring_into_sight = number
        self.refresh()

    def _max_back(self, count: int) -> int:
        return max(0, count - self.size.height)

    def on_mouse_scroll_up(self, event: events.MouseScrollUp) -> None:
        self.back = min(self.back + 3, self._max_back(len(self.entries)))
        self.refresh()

    def on_mouse_scroll_down(self, event: events.MouseScrollDown) -> None:
        self.back = max(0, self.back - 3)
        self.refresh()

    def render_lines(self, crop: Region) -> list[Strip]:
        self._base_style = self.rich_style  # walks the DOM: once per paint, not once per line
        if self._bring_into_sight is not None and self.size.height:
            index = self._bring_into_sight - (self.appended - len(self.entries))
            first = index - self.size.height // 2
            self.back = max(0, min(len(self.entries) - self.size.height - first, self._max_back(len(self.entries))))
            self._bring_into_sight = None
        return super().render_lines(crop)

    def render_line(self, y: int) -> Strip:
        width, height = self.size
        first = max(0, len(self.entries) - height - self.back)
        index = first + y
        if index >= len(self.entries) or y >= height:
            return Strip.blank(width, self._base_style)
        entry = self.entries[index]
        if entry.strip is None or entry.width != width or entry.base != self._base_style:
            segments = list(entry.text.render(self.app.console))
            entry.strip = Strip(segments).crop_extend(0, width, self._base_style).apply_style(self._base_style)
            entry.width, entry.base = width, self._base_style
        return entry.strip


class _LogEntry:
    """One log line and, once drawn, its strip at the width it was drawn for."""

    __slots__ = ("base", "strip", "text", "width")

    def __init__(self, text: Text) -> None:
        self.text = text
        self.strip: Strip | None = None
        self.width = 0
        self.base: Style | None = None


class LogPane(Vertical):
    """Shows one task's log. While paused it stops writing (the view holds still) and counts
    what it missed; resuming writes the missed lines. It owns its search box: shown by
    `open_search`, closed and cleared by escape while it has the focus (then `SearchClosed`)."""

    class SearchClosed(Message):
        """Escape closed the log search: whoever holds the focus elsewhere takes it back."""

    def __init__(self, *, id: str | None = None) -> None:
        super().__init__(id=id)
        self.task_id: str | None = None
        self.paused = False
        self.search_query = ""
        #: TensorFlow's start-up lines are folded into one note line unless this is set (key `v`)
        self.show_startup = False
        self._startup = StartupFilter()
        self._hidden = 0
        self._note: int | None = None  # the note's entry number in LogLines
        self._seen_total = 0
        self._title_shown = ""

    def compose(self) -> ComposeResult:
        yield Static("", id="log-title")
        yield LogLines(LOG_LINES, id="log-lines")
        yield Input(placeholder="search this task's log (enter: keep, esc: clear)", id="log-search")

    @property
    def lines(self) -> LogLines:
        return self.query_one("#log-lines", LogLines)

    @property
    def search_input(self) -> Input:
        return self.query_one("#log-search", Input)

    def on_mount(self) -> None:
        self.search_input.display = False

    def open_search(self) -> Input:
        """Show the search box; the caller focuses the box returned."""
        search = self.search_input
        search.display = True
        return search

    def on_key(self, event: events.Key) -> None:
        search = self.search_input
        if event.key == "escape" and search.has_focus:
            event.stop()  # the screen's escape clears the task filter: not this one's job
            search.value = ""  # Input.Changed clears the query
            search.display = False
            self.post_message(self.SearchClosed())

    def show_task(self, view: JobView, task_id: str | None) -> None:
        """Redraw from scratch: another task, or another search."""
        self.task_id = task_id
        self._seen_total = 0
        self._startup, self._hidden, self._note = StartupFilter(), 0, None
        self.lines.replace([])
        if task_id is not None:
            log = view.log(task_id)
            wanted = list(log.lines)
            if self.search_query:
                wanted = [line for line in wanted if matches(line, self.search_query)]
            self._write(wanted[-SHOWN_ON_SWITCH:])
            self._seen_total = log.total
        self._update_title(view)

    def reveal(self, view: JobView, task_id: str, number: int) -> bool:
        """Show ``task_id``'s log paused at its line ``number`` (`TaskLog.total` when it was added),
        marked and in the middle of the view; the search is cleared. False (and the log as
        `show_task` shows it) when the task's log no longer keeps that line."""
        self.search_query = ""
        self.search_input.value = ""  # its Input.Changed then finds the query already cleared
        self.search_input.display = False
        self.paused = True
        self.show_task(view, None)
        self.task_id = task_id
        log = view.log(task_id)
        index = number - (log.total - len(log.lines))
        if not 0 <= index < len(log.lines):
            self.show_task(view, task_id)
            return False
        lines = list(log.lines)
        self._write(lines[max(0, index - SHOWN_ON_SWITCH):index])
        self._startup.hides(lines[index].line)  # it is shown whatever it is: the user asked for it
        marked = log_text(lines[index], "")
        marked.stylize(REVEALED)
        widget = self.lines
        widget.append([marked])
        widget.keep_in_sight(widget.appended - 1)
        self._write(lines[index + 1:])
        self._seen_total = log.total
        self._update_title(view)
        return True

    def sync(self, view: JobView) -> None:
        """Write the lines that arrived since the last call, unless paused."""
        if self.task_id is not None and not self.paused:
            log = view.log(self.task_id)
            self._write(log.since(self._seen_total))
            self._seen_total = log.total
        self._update_title(view)

    def _write(self, lines: list[LogLine]) -> None:
        """Append `lines` that match the search; start-up lines go into the one note line (counted
        there) unless they are shown or searched for."""
        widget = self.lines
        texts: list[Text] = []
        for line in lines:
            startup = self._startup.hides(line.line)  # every line, in order: continuations need it
            if not matches(line, self.search_query):
                continue
            if startup and not self.show_startup and not self.search_query:
                self._hidden += 1
                if self._note is None or self._note < widget.appended - len(widget.entries):
                    self._note, self._hidden = widget.appended + len(texts), 1  # the old note scrolled away
                    texts.append(Text(""))
                continue
            texts.append(log_text(line, self.search_query, startup=startup))
        widget.append(texts)
        if self._note is not None:
            note = hidden_note(self._hidden, f"press {SHOW_STARTUP_KEY} to show")
            widget.set_text(self._note, Text(note, style="dim italic", no_wrap=True))

    def set_show_startup(self, view: JobView, shown: bool) -> None:
        self.show_startup = shown
        self.show_task(view, self.task_id)

    def set_paused(self, view: JobView, paused: bool) -> None:
        self.paused = paused
        if not paused:
            self.lines.back = 0  # following is following the newest lines
        self.sync(view)

    def set_query(self, view: JobView, query: str) -> None:
        if query == self.search_query:
            return
        self.search_query = query
        self.show_task(view, self.task_id)

    def _update_title(self, view: JobView) -> None:
        title = f"log {self.task_id or '(no task selected)'}"
        if self.task_id is not None and self.paused:
            missed = view.log(self.task_id).total - self._seen_total
            title += f"  [PAUSED, {missed} new — space/f to follow]"
        elif self.task_id is not None:
            title += "  [following]"
        task = view.tasks.get(self.task_id) if self.task_id is not None else None
        if task is not None and (stall := stall_line(task)):
            title += "  STALLED" + stall.removeprefix("stalled")
        if task is not None and task.checkpoint is not None:  # where a restart of it would resume from
            point = task.checkpoint
            copies = f" (+{len(task.checkpoint_copies)} copies)" if task.checkpoint_copies else ""
            title += f"  checkpoint {'?' if point.step is None else point.step} at {task.checkpoint_where()}{copies}"
        if self.search_query:
            title += f"  filter: {self.search_query!r}"
        if self.show_startup:
            title += f"  [TensorFlow start-up lines shown, {SHOW_STARTUP_KEY} hides]"
        if task is not None and task.cause:  # why its latest failed incarnation failed
            title += f"  {'failed' if task.state == ev.FAILED else 'last failed'}: {task.cause}"
        if title != self._title_shown:
            self._title_shown = title
            self.query_one("#log-title", Static).update(Text(title, style="bold"), layout=False)
