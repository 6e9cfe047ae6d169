"""The dashboard's first view of a run submitted to Slurm: its job waiting in the queue.

Shown by `up` (and `attach`) from the login node until the supervisor inside the allocation serves
(the live dashboard follows then) or the job ends before it did. The look at Slurm runs in a
worker thread, each answer reaches the screen on the UI thread. ``q`` leaves the job queued,
``x`` cancels it (scancel: nothing has started).
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import dataclass
from typing import Protocol

from textual.app import App, ComposeResult
from textual.binding import Binding
from textual.containers import Vertical
from textual.widgets import Footer, Static

#: seconds between two looks at Slurm
LOOK_S = 2.0


class Look(Protocol):
    """One look at the job (``launcher/commands/slurmwatch.py``'s ``Waiting``)."""

    @property
    def text(self) -> str: ...

    @property
    def over(self) -> str | None: ...


class PendingApp(App[str]):
    """Exits with why the wait is over: "started", "ended", "detach" (q) or "cancel" (x)."""

    CSS = """
    #pending { padding: 1 2; height: auto; }
    #job { text-style: bold; }
    """
    BINDINGS = [
        Binding("q", "leave", "leave (the job stays queued)", id="pending.leave"),
        Binding("x", "cancel", "cancel the job (scancel)", id="pending.cancel"),
    ]

    def __init__(self, title: str, look: Callable[[], Look], interval: float = LOOK_S) -> None:
        super().__init__()
        self.title = f"distlaunch: {title}"
        self._look = look
        self._interval = interval
        self._stop = threading.Event()
        self.last_text = ""

    def compose(self) -> ComposeResult:
        with Vertical(id="pending"):
            yield Static("asking Slurm about the job...", id="job")
            yield Static("the live dashboard opens once the job starts its supervisor", id="hint")
        yield Footer()

    def on_mount(self) -> None:
        self.run_worker(self._watch, thread=True, exclusive=True)

    def _watch(self) -> None:
        while not self._stop.is_set():
            try:
                now = self._look()
            except Exception as exc:  # a damaged run dir: said on the screen, the look goes on
                self.call_from_thread(self._show, f"cannot read the run: {exc}")
            else:
                self.call_from_thread(self._show, now.text)
                if now.over is not None:
                    self.call_from_thread(self.exit, now.over)
                    return
            self._stop.wait(self._interval)

    def _show(self, text: str) -> None:
        self.last_text = text
        self.query_one("#job", Static).update(text)

    def action_leave(self) -> None:
        self._stop.set()
        self.exit("detach")

    def action_cancel(self) -> None:
        self._stop.set()
        self.exit("cancel")

    def on_unmount(self) -> None:
        self._stop.set()


@dataclass(frozen=True)
class _Left:
    text: str
    over: str | None


def run_pending_screen(title: str, look: Callable[[], Look]) -> Look:
    """Show the waiting job until the wait is over; the last look, its ``over`` saying why."""
    result = PendingApp(title, look).run()
    if result in ("started", "ended"):
        return look()
    return _Left("", "cancel" if result == "cancel" else "detach")
