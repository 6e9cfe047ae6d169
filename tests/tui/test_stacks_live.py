"""The stacks view against a real job: a real supervisor, host agent and Python processes on this
machine, one of three workers hung in a function of its own; `K` through Pilot captures them."""

from __future__ import annotations

import sys
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from launcher import events as ev
from launcher.plan import build_plan
from launcher.profile.reader import load_profile
from launcher.remote.session import HostSession
from launcher.rundir import RunDir
from launcher.supervise.core import Feed
from launcher.supervise.supervisor import Supervisor
from launcher.transport import make_host
from tests.integration.jobtools import kill_run_processes, wait_for
from tests.integration.test_fault_tolerance import shell_profile
from tests.sshd import free_port
from tests.tui.tui_support import wait_until
from tui.app import DashboardApp
from tui.replay import ReplaySource
from tui.stacks_view import StacksScreen

RUN = "it-stacks-view"
SCRIPT = '''\
import os
import time


def wait_for_peer():
    time.sleep(600)  # worker:1 never hears from its peer


def train_step():
    time.sleep(600)


print("ready", flush=True)
if os.environ["DISTLAUNCH_TASK"] == "worker:1":
    for step in range(1, 6):
        print('@distlaunch {"kind": "metric", "step": %d}' % step, flush=True)
    wait_for_peer()
train_step()
'''
WHERE = "wait_for_peer (hang.py:6)"


@contextmanager
def hung_job(tmp_path: Path, stall_seconds: float = 0) -> Iterator[tuple[Supervisor, Feed, Path]]:
    """Three workers of a real job on this machine, launched and in their functions; worker:1 reports
    five steps first. Yields the supervisor, a feed of all its events for the dashboard, the run dir;
    torn down after."""
    script = tmp_path / "hang.py"
    script.write_text(SCRIPT, encoding="utf-8")
    roles = f'[roles.worker]\nhosts = ["local"]\ncount = 3\ncommand = "{sys.executable} {script}"\n' + \
        (f"stall_seconds = {stall_seconds}\n" if stall_seconds else "")
    plan = build_plan(load_profile(shell_profile(tmp_path, roles)))
    config = plan.profile.hosts["local"]
    session = HostSession(config, make_host(config), RUN, str(tmp_path / "host"), sys.executable)
    session.prepare()
    rundir = RunDir.create(RUN, tmp_path / "run")
    sup = Supervisor(plan, rundir, {"local": session}, {t.task_id: free_port() for t in plan.tasks})
    feed = sup.subscribe()
    seen: list[Any] = []
    watched = sup.subscribe()  # the test's own copy of the events, to know when the workers are in place
    threading.Thread(target=lambda: seen.extend(watched.events()), daemon=True).start()
    try:
        sup.launch()
        wait_for(lambda: sum(1 for e in list(seen) if e.kind == ev.LOG and e.get("line") == "ready") == 3, 60,
                 "three workers in their functions")
        yield sup, feed, rundir.path
    finally:
        sup.teardown()
        sup.wait(60)
        kill_run_processes(RUN)


async def test_the_view_groups_a_real_jobs_stacks_and_names_the_hung_worker(tmp_path: Path) -> None:
    with hung_job(tmp_path) as (sup, feed, run_dir):
        app = DashboardApp(feed, sup, title="stacks", strategy="custom", hosts_total=1, run_dir=run_dir)
        async with app.run_test(size=(140, 50)) as pilot:
            await pilot.press("K")
            await wait_until(pilot, lambda: isinstance(app.screen, StacksScreen))
            screen = app.screen
            await wait_until(pilot, lambda: screen.captures >= 1, timeout=30)
            assert "stacks of 3 tasks" in screen.title_text, screen.title_text
            assert "(2 groups); suspect: worker:1" in screen.title_text, screen.body_text
            body = screen.body_text.splitlines()
            assert body[0].startswith(" worker:1  SUSPECT"), body[:3]
            assert " worker:0, worker:2 (2) " in body
            script = tmp_path / "hang.py"
            assert f'    File "{script}", line 6, in wait_for_peer  <- innermost frame of your code' in body, body


async def test_a_stall_says_where_and_its_capture_replays(tmp_path: Path) -> None:
    """The supervisor captures the stacks at worker:1's stall: the dashboard's stall line names its
    function, and a replay of the run shows that capture."""
    with hung_job(tmp_path, stall_seconds=2) as (sup, feed, run_dir):
        app = DashboardApp(feed, sup, title="stacks", strategy="custom", hosts_total=1, run_dir=run_dir)
        async with app.run_test(size=(140, 50)) as pilot:
            header = app.widgets.header
            await wait_until(pilot, lambda: f"worker:1 stalled at step 5 in {WHERE}" in str(header.render()),
                             timeout=60)
    replay = DashboardApp(ReplaySource(run_dir / "events.jsonl", speed=0), None, title="stacks", strategy="custom",
                          hosts_total=1, live=False, run_dir=run_dir)
    async with replay.run_test(size=(140, 50)) as pilot:
        await wait_until(pilot, lambda: replay.state.stream_ended)
        await pilot.press("K")
        await wait_until(pilot, lambda: isinstance(replay.screen, StacksScreen) and replay.screen.captures >= 1)
        screen = replay.screen
        assert "\nno live job: showing the capture of " in screen.title_text, screen.title_text
        assert "suspect: worker:1" in screen.title_text, screen.title_text
        assert "in wait_for_peer  <- innermost frame of your code" in screen.body_text, screen.body_text
