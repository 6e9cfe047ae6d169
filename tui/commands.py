"""Command palette provider: every dashboard action, found by its description."""

from __future__ import annotations

from functools import partial
from typing import TYPE_CHECKING, cast

from textual.command import DiscoveryHit, Hit, Hits, Provider

if TYPE_CHECKING:
    from tui.app import DashboardApp


class DashboardCommands(Provider):
    """Lists the app's bindings as commands; choosing one runs the same action as its key."""

    def _actions(self) -> list[tuple[str, str, str]]:
        app = cast("DashboardApp", self.app)
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
