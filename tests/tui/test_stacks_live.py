"""The stacks view against a real job: a real supervisor, host agent and Python processes on this
machine, one of three workers hung in a function of its own; `K` through Pilot captures them."""

from __future__ import annotations

import sys
import threading
from pathlib import Path
from typing import Any

from launcher import events as ev
from launcher.plan import build_plan
from launcher.profile import load_profile
from launcher.remote import HostSession
from launcher.rundir import RunDir
from launcher.supervisor import Supervisor
from launcher.transport import make_host
from tests.integration.jobtools import kill_run_processes, wait_for
from tests.integration.test_fault_tolerance import shell_profile
from tests.sshd import free_port
from tests.tui.tui_support import wait_until
from tui.app import DashboardApp
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
    wait_for_peer()
train_step()
'''


async def test_the_view_groups_a_real_jobs_stacks_and_names_the_hung_worker(tmp_path: Path) -> None:
    script = tmp_path / "hang.py"
    script.write_text(SCRIPT, encoding="utf-8")
    roles = f'[roles.worker]\nhosts = ["local"]\ncount = 3\ncommand = "{sys.executable} {script}"'
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
    app = DashboardApp(feed, sup, title="stacks", strategy="custom", hosts_total=1, run_dir=rundir.path)
    try:
        sup.launch()
        wait_for(lambda: sum(1 for e in list(seen) if e.kind == ev.LOG and e.get("line") == "ready") == 3, 60,
                 "three workers in their functions")
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
            assert any(f'File "{script}", line 6, in wait_for_peer  <- innermost frame of your code' in line
                       for line in body), screen.body_text
            await pilot.press("escape")
    finally:
        sup.teardown()
        sup.wait(60)
        kill_run_processes(RUN)
