"""Command palette provider: every dashboard action, found by its description."""

from __future__ import annotations

from functools import partial

from textual.command import DiscoveryHit, Hit, Hits, Provider

from tui.dashboard import DashboardScreen, dashboard_bindings


class DashboardCommands(Provider):
    """Lists the dashboard's bindings as commands; choosing one runs the same action as its key, on the
    dashboard screen (also when the palette was opened over a modal screen)."""

    def _actions(self) -> list[tuple[str, str, str]]:
        return [(b.description, b.action, b.key) for b in dashboard_bindings()]

    async def _run(self, action: str) -> None:
        dashboard = next((s for s in self.app.screen_stack if isinstance(s, DashboardScreen)), None)
        await self.app.run_action(action, dashboard)

    async def discover(self) -> Hits:
        for description, action, key in self._actions():
            yield DiscoveryHit(description, partial(self._run, action), help=f"key: {key}")

    async def search(self, query: str) -> Hits:
        matcher = self.matcher(query)
        for description, action, key in self._actions():
            score = matcher.match(description)
            if score > 0:
                yield Hit(score, matcher.highlight(description), partial(self._run, action),
                          text=description, help=f"key: {key}")
