"""What the consumers of a job (TUI, headless printer, replay) may ask of it."""

from __future__ import annotations

from collections.abc import Iterator
from typing import TYPE_CHECKING, Protocol

from launcher.events import Event

if TYPE_CHECKING:
    from launcher.agent.stackmodel import TaskStacks


class JobControl(Protocol):
    """Actions on a live job. Each returns quickly (`capture_stacks` excepted); the effect shows up as
    events."""

    def restart_task(self, task_id: str) -> None: ...

    def stop_task(self, task_id: str) -> None: ...

    def teardown(self) -> None: ...

    def capture_stacks(self, tasks: list[str] | None = None, native: bool = False,
                       timeout: float = 10.0) -> list[TaskStacks]:
        """Every live task's stacks (or those of `tasks`), taken on their hosts now. Blocks for up
        to `timeout` seconds: the dashboard calls it from a worker thread."""
        ...


class EventSource(Protocol):
    """A job's events, oldest first. ``events()`` blocks for new ones and ends with the stream."""

    def events(self) -> Iterator[Event]: ...

    def close(self) -> None: ...
