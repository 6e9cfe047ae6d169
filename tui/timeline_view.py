"""`e`: the job's timeline, newest first (the same `Timeline` as `distlaunch events`)."""

from __future__ import annotations

from rich.style import Style
from rich.text import Text
from textual.geometry import Region, Size
from textual.scroll_view import ScrollView
from textual.strip import Strip

from launcher.telemetry.jobview import JobView
from launcher.telemetry.timeline import TimelineEntry, clock_text

SEVERITY_STYLES = {"error": "bold red", "warning": "yellow", "info": ""}
TASK_WIDTH = 12


class TimelinePanel(ScrollView, can_focus=True):
    """One line per entry, drawn with the Line API: only the lines on screen are rendered."""

    DEFAULT_CSS = "TimelinePanel { scrollbar-size-vertical: 1; }"

    def __init__(self, *, id: str | None = None) -> None:
        super().__init__(id=id)
        self.entries: list[TimelineEntry] = []
        self._seen_total = -1
        self._start: float | None = None
        self._base_style = Style()

    @property
    def plain_lines(self) -> list[str]:
        return [self._line(entry).plain for entry in self.entries]

    def forget(self) -> None:
        """The job's picture started over (a replay went back): the next sync redraws."""
        self._seen_total = -1

    def sync(self, view: JobView) -> None:
        timeline = view.timeline
        if timeline.total == self._seen_total:
            return
        self._seen_total = timeline.total
        self._start = view.start_ts
        self.entries = timeline.newest_first()
        self.virtual_size = Size(self.size.width, max(1, len(self.entries)))
        self.refresh()

    def _line(self, entry: TimelineEntry) -> Text:
        line = Text(no_wrap=True)
        line.append(clock_text(entry.ts, self._start), style="dim")
        line.append("  ")
        line.append((entry.task or "job").ljust(TASK_WIDTH), style="bold")
        line.append(entry.kind.ljust(10), style="dim")
        line.append(entry.text, style=SEVERITY_STYLES.get(entry.severity, ""))
        return line

    def render_lines(self, crop: Region) -> list[Strip]:
        self._base_style = self.rich_style
        return super().render_lines(crop)

    def render_line(self, y: int) -> Strip:
        width, base = self.size.width, self._base_style
        index = int(self.scroll_offset.y) + y
        if not self.entries and y == 0:
            text = Text("nothing has happened yet", style="dim")
        elif index < len(self.entries):
            text = self._line(self.entries[index])
        else:
            return Strip.blank(width, base)
        return Strip(list(text.render(self.app.console))).crop_extend(0, width, base).apply_style(base)
