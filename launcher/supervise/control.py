"""What the consumers of a job (TUI, headless printer, replay) may ask of it."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Protocol

from launcher.events import Event


class JobControl(Protocol):
    """Actions on a live job. Each returns quickly; the effect shows up as events."""

    def restart_task(self, task_id: str) -> None: ...

    def stop_task(self, task_id: str) -> None: ...

    def teardown(self) -> None: ...

    def detach(self) -> None: ...


class EventSource(Protocol):
    """A job's events, oldest first. ``events()`` blocks for new ones and ends with the stream."""

    def events(self) -> Iterator[Event]: ...

    def close(self) -> None: ...
