"""Command palette provider: every dashboard action, found by its description."""

from __future__ import annotations

from functools import partial
from typing import Protocol, cast

from textual.binding import Binding
from textual.command import DiscoveryHit, Hit, Hits, Provider


class _WithBindings(Protocol):
    """The app these commands serve (DashboardApp); named by what is used, so this module
    does not import the app that lists it in COMMANDS."""

    def action_bindings(self) -> list[Binding]: ...


class DashboardCommands(Provider):
    """Lists the app's bindings as commands; choosing one runs the same action as its key."""

    def _actions(self) -> list[tuple[str, str, str]]:
        app = cast(_WithBindings, self.app)
        return [(b.description, b.action, b.key) for b in app.action_bindings()]

    async def discover(self) -> Hits:
        for description, action, key in self._actions():
            yield DiscoveryHit(description, partial(self.app.run_action, action), help=f"key: {key}")

    async def search(self, query: str) -> Hits:
        matcher = self.matcher(query)
        for description, action, key in self._actions():
            score = matcher.match(description)
            if score > 0:
                yield Hit(score, matcher.highlight(description), partial(self.app.run_action, action),
                          text=description, help=f"key: {key}")
