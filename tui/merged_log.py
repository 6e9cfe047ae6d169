"""`L`: every task's log lines as one, in time order, filtered across tasks; enter opens a line's
task log at that line.

The lines, their order and the filter are `launcher/telemetry/mergedlog.py`'s (the same as
`distlaunch logs RUN --all`); this module draws them. `MergedLogPanel` owns its filter box (`/`
or ctrl+f: ``task=worker:*,chief:0 level=stderr|warn REGEX``; the dashboard screen hands it what
is typed, under the view's lock) and its title (lines shown of
those kept, older lines dropped, a filter that could not be used); `MergedLogLines` owns the
cursor and posts `MergedLogLines.Jump` for the dashboard screen to act on.
"""

from __future__ import annotations

from bisect import bisect_left

from rich.style import Style
from rich.text import Text
from textual import events
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Vertical
from textual.geometry import Region
from textual.message import Message
from textual.strip import Strip
from textual.widget import Widget
from textual.widgets import Input, Static

from launcher.telemetry.jobview import JobView
from launcher.telemetry.mergedlog import (
    FilterError,
    LogFilter,
    MergedEntry,
    MergedLog,
    MergedSelection,
    clock_ms,
    parse_filter,
)

TASK_COLORS = ("cyan", "green", "yellow", "magenta", "bright_blue", "orange1", "bright_green", "orchid",
               "turquoise2", "gold1", "salmon1", "steel_blue1")
"""Each task's colour in the task column, given in the order tasks first speak."""

CURSOR = Style(reverse=True)
MATCH = Style(bold=True, color="black", bgcolor="yellow")
FILTER_HINT = "filter: task=worker:*,chief:0  level=stderr|warn  and a regex (enter: keep, esc: clear)"


class MergedLogLines(Widget, can_focus=True):
    """The selected lines, bottom-aligned, drawn line by line; a cursor picks one (none: follow the
    tail). ``back`` is how far the view is from the tail, in lines."""

    DEFAULT_CSS = "MergedLogLines { height: 1fr; }"

    BINDINGS = [
        Binding("up", "move(-1)", "Previous line", show=False, id="merged.up"),
        Binding("down", "move(1)", "Next line", show=False, id="merged.down"),
        Binding("pageup", "page(-1)", "Page up", show=False, id="merged.pageup"),
        Binding("pagedown", "page(1)", "Page down", show=False, id="merged.pagedown"),
        Binding("home", "home", "First line", show=False, id="merged.home"),
        Binding("end", "follow", "Follow the newest lines", show=False, id="merged.end"),
        Binding("enter", "jump", "Open the line's task log", id="merged.jump"),
    ]

    class Jump(Message):
        """Show ``task``'s own log at its line ``number`` (`MergedEntry.number`)."""

        def __init__(self, task: str, number: int) -> None:
            super().__init__()
            self.task = task
            self.number = number

    def __init__(self, *, id: str | None = None) -> None:
        super().__init__(id=id)
        self.rows: list[MergedEntry] = []
        self.cursor: MergedEntry | None = None
        self.back = 0
        self.task_width = 8
        self.regex_shown: LogFilter | None = None  # whose regex is highlighted
        self._colors: dict[str, str] = {}
        self._base_style = Style()

    # -- reading ---------------------------------------------------------------------------

    def line_text(self, entry: MergedEntry) -> Text:
        """``12:01:02.345 worker:1!  the line``: the time dim, the task in its colour, ``!`` (red)
        and the line in red for stderr, what the regex finds highlighted."""
        color = self._colors.get(entry.task)
        if color is None:
            color = self._colors[entry.task] = TASK_COLORS[len(self._colors) % len(TASK_COLORS)]
        stderr = entry.stream == "stderr"
        text = Text(no_wrap=True)
        text.append(clock_ms(entry.ts), style="dim")
        text.append(" ")
        text.append(entry.task, style=f"bold {color}")
        text.append("!" if stderr else " ", style="bold red")
        text.append(" " * max(1, self.task_width + 1 - len(entry.task)))
        start = len(text)
        text.append(entry.line, style="red" if stderr else "")
        regex = self.regex_shown.regex if self.regex_shown is not None else None
        if regex is not None:
            for match in regex.finditer(entry.line):
                if match.end() > match.start():
                    text.stylize(MATCH, start + match.start(), start + match.end())
        return text

    @property
    def plain_lines(self) -> list[str]:
        """Every selected line as drawn, without styles (tests read it)."""
        return [self.line_text(entry).plain for entry in self.rows]

    @property
    def cursor_index(self) -> int | None:
        """The cursor's row, or None (following; or its line left the selection)."""
        if self.cursor is None:
            return None
        index = bisect_left(self.rows, self.cursor.order, key=lambda e: e.order)
        return index if index < len(self.rows) and self.rows[index] is self.cursor else None

    # -- changes ---------------------------------------------------------------------------

    def show(self, rows: list[MergedEntry], log_filter: LogFilter, *, appended: int = 0,
             reset: bool = False) -> None:
        """Draw ``rows``; ``appended``: that many new lines went at the end (a view away from the
        tail holds still); ``reset``: a new selection, the view goes back to the tail."""
        self.rows = rows
        self.regex_shown = log_filter
        if rows:
            self.task_width = max(self.task_width, max(len(e.task) for e in rows[-200:]))
        if reset:
            self.back = 0
            if self.cursor_index is None:
                self.cursor = None
        elif self.back:
            self.back = min(self.back + appended, self._max_back())
        self.refresh()

    def forget_colors(self) -> None:
        self._colors.clear()

    def _max_back(self) -> int:
        return max(0, len(self.rows) - self.size.height)

    def _first_shown(self) -> int:
        return max(0, len(self.rows) - self.size.height - self.back)

    def _put_cursor(self, index: int) -> None:
        if not self.rows:
            return
        index = max(0, min(len(self.rows) - 1, index))
        self.cursor = self.rows[index]
        height = max(1, self.size.height)
        first = self._first_shown()
        if index < first:
            self.back = len(self.rows) - height - index
        elif index >= first + height:
            self.back = len(self.rows) - index - 1
        self.back = max(0, min(self.back, self._max_back()))
        self.refresh()

    def action_move(self, delta: int) -> None:
        index = self.cursor_index
        self._put_cursor((len(self.rows) if delta < 0 else len(self.rows) - 1) if index is None else index + delta)

    def action_page(self, direction: int) -> None:
        index = self.cursor_index
        step = direction * max(1, self.size.height - 1)
        self._put_cursor((len(self.rows) - 1 if index is None else index) + step)

    def action_home(self) -> None:
        self._put_cursor(0)

    def action_follow(self) -> None:
        self.cursor, self.back = None, 0
        self.refresh()

    def action_jump(self) -> None:
        index = self.cursor_index
        if index is None and self.rows:
            index = len(self.rows) - 1 - min(self.back, len(self.rows) - 1)  # the lowest line in view
        if index is None:
            self.notify("no line to open", severity="warning")
            return
        entry = self.rows[index]
        self.post_message(self.Jump(entry.task, entry.number))

    def on_mouse_scroll_up(self, event: events.MouseScrollUp) -> None:
        self.back = min(self.back + 3, self._max_back())
        self.refresh()

    def on_mouse_scroll_down(self, event: events.MouseScrollDown) -> None:
        self.back = max(0, self.back - 3)
        self.refresh()

    def on_click(self, event: events.Click) -> None:
        self._put_cursor(self._first_shown() + event.y)

    # -- drawing ---------------------------------------------------------------------------

    def render_lines(self, crop: Region) -> list[Strip]:
        self._base_style = self.rich_style  # walks the DOM: once per paint, not once per line
        return super().render_lines(crop)

    def render_line(self, y: int) -> Strip:
        width, height = self.size
        base = self._base_style
        index = self._first_shown() + y
        if y >= height or index >= len(self.rows):
            return Strip.blank(width, base)
        entry = self.rows[index]
        text = self.line_text(entry)
        if entry is self.cursor:
            text.stylize(CURSOR)
        return Strip(list(text.render(self.app.console))).crop_extend(0, width, base).apply_style(base)


class MergedLogPanel(Vertical):
    """The merged log view: its title, its lines and its filter box."""

    BINDINGS = [
        Binding("slash,ctrl+f", "open_filter", "Filter the merged log", id="merged.filter", key_display="/"),
    ]

    def __init__(self, *, id: str | None = None) -> None:
        super().__init__(id=id)
        self.selection = MergedSelection()
        self.filter_text = ""
        self.message = ""  # why the typed filter is not used, or what it matches nothing of
        self._log: MergedLog | None = None
        self._title_shown: tuple[str, str] = ("", "")

    def compose(self) -> ComposeResult:
        yield Static("", id="merged-title")
        yield Static("", id="merged-message")
        yield MergedLogLines(id="merged-lines")
        yield Input(placeholder=FILTER_HINT, id="merged-filter")

    @property
    def lines(self) -> MergedLogLines:
        return self.query_one(MergedLogLines)

    @property
    def filter_input(self) -> Input:
        return self.query_one("#merged-filter", Input)

    @property
    def title(self) -> str:
        return self._title_shown[0]

    def on_mount(self) -> None:
        self.filter_input.display = False
        self.query_one("#merged-message", Static).display = False

    def action_open_filter(self) -> None:
        box = self.filter_input
        box.display = True
        self.screen.set_focus(box)  # at once: keys typed right after `/` are already queued

    def on_key(self, event: events.Key) -> None:
        if event.key == "escape" and self.filter_input.has_focus:
            event.stop()  # the screen's escape is about the task table's filter
            self.close_filter(kept=False)

    def close_filter(self, kept: bool) -> None:
        """Enter (``kept``: a kept filter stays in sight) or escape (cleared); the lines get the focus."""
        box = self.filter_input
        if not kept:
            box.value = ""  # Input.Changed clears the filter
        box.display = kept and bool(box.value.strip())
        self.lines.focus()

    def set_filter(self, view: JobView, text: str) -> None:
        """Apply a typed filter (the caller holds the view's lock); one that cannot be used leaves
        the last good one in place and says why."""
        self.filter_text = text
        try:
            wanted = parse_filter(text)
        except FilterError as exc:
            self.message = f"filter not applied: {exc}"
        else:
            self.message = ""
            if self._log is not view.merged_log:
                self._log = view.merged_log
                self.lines.forget_colors()
            self.selection.rebuild(self._log, wanted)
            self.lines.show(self.selection.rows, wanted, reset=True)
        self._update_title(view)

    def sync(self, view: JobView) -> None:
        """Take the lines that arrived since the last call (a new picture: start over)."""
        log = view.merged_log
        if log is not self._log:
            self._log = log
            self.lines.forget_colors()
            self.selection.rebuild(log)
            self.lines.show(self.selection.rows, self.selection.filter, reset=True)
        else:
            added, moved = self.selection.sync(log)
            if added or moved:
                self.lines.show(self.selection.rows, self.selection.filter, appended=0 if moved else added)
        self._update_title(view)

    def _update_title(self, view: JobView) -> None:
        selection, lines = self.selection, self.lines
        title = f"merged log  {len(selection.rows)}/{selection.kept} lines"
        if selection.dropped:
            title += f" ({selection.dropped} older dropped)"
        described = selection.filter.describe()
        if described:
            title += f"  filter: {described}"
        title += "  [following]" if lines.cursor_index is None and lines.back == 0 else \
            "  [enter: its task's log, end: follow]"
        message = self.message
        if not message and selection.filter.tasks:
            unknown = selection.filter.tasks.unmatched(view.tasks)
            if unknown:
                message = f"no task is {', '.join(unknown)} (yet); tasks: {', '.join(sorted(view.tasks))}"
        if not message and not selection.rows and selection.kept:
            message = "no line matches the filter"
        if (title, message) != self._title_shown:
            self._title_shown = (title, message)
            self.query_one("#merged-title", Static).update(Text(title, style="bold"), layout=False)
            box = self.query_one("#merged-message", Static)
            box.update(Text(message, style="bold yellow"))
            box.display = bool(message)
