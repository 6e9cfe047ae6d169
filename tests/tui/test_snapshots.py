"""Snapshots of the main screen, the hosts, timeline, placement and merged log views and the quit
dialog (fixed clock, recorded job).

Update after an intended change with: pytest tests/tui/test_snapshots.py --snapshot-update
"""

from __future__ import annotations

import pytest

from tests.tui.tui_support import RecordingControl, load, make_app, recorded_job, wait_until

SIZES = [(80, 24), (200, 50)]
pytestmark = pytest.mark.usefixtures("utc_clock")  # the timeline shows wall times of day


def loaded(*keys: str):
    events = recorded_job(steps=10)

    async def run_before(pilot) -> None:
        await load(pilot, pilot.app, len(events))
        pilot.app.clear_notifications()
        if keys:
            await pilot.press(*keys)
        await pilot.pause()

    return events, run_before


@pytest.mark.parametrize("size", SIZES)
def test_main_screen(snap_compare, size) -> None:
    events, run_before = loaded()
    app = make_app(events, control=RecordingControl())
    assert snap_compare(app, terminal_size=size, run_before=run_before)


@pytest.mark.parametrize("size", SIZES)
def test_placement_view(snap_compare, size) -> None:
    events, run_before = loaded("p")
    app = make_app(events, control=RecordingControl())
    assert snap_compare(app, terminal_size=size, run_before=run_before)


@pytest.mark.parametrize("size", SIZES)
def test_hosts_view(snap_compare, size) -> None:
    events, run_before = loaded("h")
    app = make_app(events, control=RecordingControl())
    assert snap_compare(app, terminal_size=size, run_before=run_before)


@pytest.mark.parametrize("size", SIZES)
def test_timeline_view(snap_compare, size) -> None:
    events, run_before = loaded("e")
    app = make_app(events, control=RecordingControl())
    assert snap_compare(app, terminal_size=size, run_before=run_before)


@pytest.mark.parametrize("size", SIZES)
def test_merged_log_view(snap_compare, size) -> None:
    """`L` with a regex typed in its filter: the matches highlighted, stderr marked."""
    events, run_before = loaded("L", "slash", *"loss|batch 1|OOM", "enter")
    app = make_app(events, control=RecordingControl())
    assert snap_compare(app, terminal_size=size, run_before=run_before)


def test_quit_dialog(snap_compare) -> None:
    events, run_before = loaded("q")
    assert snap_compare(make_app(events, control=RecordingControl()), terminal_size=(100, 30),
                        run_before=run_before)


@pytest.mark.parametrize("size", SIZES)
def test_stacks_view(snap_compare, size) -> None:
    """`K` on a job whose worker:1 hangs in a function of its own: the suspect's group first."""
    from tests.tui.stacks_fixtures import odd_one_out, stall_events
    from tui.stacks_view import StacksScreen

    events = stall_events()

    async def run_before(pilot) -> None:
        await load(pilot, pilot.app, len(events))
        pilot.app.clear_notifications()
        await pilot.press("K")
        await wait_until(pilot, lambda: isinstance(pilot.app.screen, StacksScreen) and pilot.app.screen.captures)
        await pilot.pause()

    app = make_app(events, control=RecordingControl(odd_one_out()), hosts_total=2)
    assert snap_compare(app, terminal_size=size, run_before=run_before)
