"""The waiting screen of a submitted run: Slurm's words as they come, and why the wait ended."""

from __future__ import annotations

from dataclasses import dataclass

from tui.pending import PendingApp


@dataclass(frozen=True)
class Seen:
    text: str
    over: str | None = None


async def test_the_screen_shows_each_look_and_exits_when_the_job_starts() -> None:
    looks = iter([Seen("Slurm job 7: PENDING (Resources)"), Seen("Slurm job 7: RUNNING on n1", "started")])
    shown: list[str] = []
    app = PendingApp("demo", lambda: next(looks), interval=0.05)
    original = app._show

    def record(text: str) -> None:
        shown.append(text)
        original(text)

    app._show = record  # type: ignore[method-assign]
    async with app.run_test() as pilot:
        for _ in range(50):
            if app.return_value is not None:
                break
            await pilot.pause(0.05)
    assert shown[:2] == ["Slurm job 7: PENDING (Resources)", "Slurm job 7: RUNNING on n1"]
    assert app.return_value == "started"


async def test_x_cancels_and_q_leaves() -> None:
    for key, why in (("x", "cancel"), ("q", "detach")):
        app = PendingApp("demo", lambda: Seen("Slurm job 7: PENDING (Priority)"), interval=0.05)
        async with app.run_test() as pilot:
            await pilot.pause(0.1)
            assert "PENDING (Priority)" in app.last_text
            await pilot.press(key)
        assert app.return_value == why
