"""A group restart that falls due while `launch` is still starting tasks waits for the launch.

A ps that dies at once has its ps+chief group restart scheduled 1 s ahead while the launch goes
on to start the worker and the chief. On a loaded machine the launch may reach the chief only
after that second, and the restart ran beside it: either it started chief:0 first and the launch's
own start was refused ("still running; stop it first": launch failed), or the launch started
chief:0 under the restart's incarnation number (restarts 1) and the restart stopped and started
it again as restarts 1 too. The launch here is held at the chief until the restart fell due;
real supervisor, host agent and processes.
"""

from __future__ import annotations

import sys
import threading
from pathlib import Path
from typing import Any

from launcher import events as ev
from launcher.plan import build_plan
from launcher.profile.reader import load_profile
from launcher.remote.session import HostSession
from launcher.rundir import RunDir
from launcher.supervise.restarts import Restarts
from launcher.supervise.supervisor import Supervisor, TaskRuntime
from launcher.transport import make_host
from tests.integration.jobtools import kill_run_processes, pids_with_run_id, wait_for
from tests.integration.test_fault_tolerance import shell_profile
from tests.sshd import free_port

RUN = "it-restart-in-launch"
PS = "test -e {run_dir}/ps-died && exec sleep 600; touch {run_dir}/ps-died; kill -9 $$"


class SlowLaunch(Restarts):
    """Its launch reaches the chief only once the ps's group restart has fallen due."""

    due = threading.Event()
    held = False

    def restart_now(self, group: list[str]) -> None:
        super().restart_now(group)
        self.due.set()

    def start_on(self, session: HostSession, rts: list[TaskRuntime]) -> None:
        if not self.held and any(rt.spec.role == "chief" for rt in rts):
            self.held = True
            assert self.due.wait(30), "the ps's group restart never fell due"
        super().start_on(session, rts)


def test_a_restart_due_during_the_launch_starts_its_group_after_the_launch(tmp_path: Path) -> None:
    profile = shell_profile(tmp_path, {"ps": {"command": PS}, "worker": {}, "chief": {}}, strategy="parameter_server")
    plan = build_plan(load_profile(profile))
    config = plan.profile.hosts["local"]
    session = HostSession(config, make_host(config), RUN, str(tmp_path / "host"), sys.executable)
    session.prepare()  # the host run dir and the agent in it, as `up`'s preflight leaves them
    sup = Supervisor(plan, RunDir.create(RUN, tmp_path / "run"), {"local": session},
                     {t.task_id: free_port() for t in plan.tasks})
    sup.restarts = SlowLaunch(sup)
    seen: list[Any] = []
    feed = sup.subscribe()
    reader = threading.Thread(target=lambda: seen.extend(feed.events()), daemon=True)
    reader.start()

    def states(task: str) -> list[tuple[str, int]]:
        return [(str(e.get("state")), int(e.get("restarts") or 0)) for e in list(seen)
                if e.kind == ev.STATE and e.task == task]

    try:
        sup.launch()
        wait_for(lambda: ("running", 1) in states("chief:0") and ("running", 1) in states("ps:0"), 30,
                 "ps:0 and chief:0 running again")
        assert sup.job_state == ev.JOB_RUNNING, [(e.get("state"), e.get("reason")) for e in seen if e.kind == ev.JOB]
        # the chief the launch started was stopped by its group restart, then started once more
        assert [s for s in states("chief:0") if s[0] != "pending"] == [
            ("restarting", 0), ("starting", 0), ("running", 0), ("stopped", 0), ("starting", 1), ("running", 1)]
        assert [s for s, _ in states("worker:0")] == ["pending", "starting", "running"]
        sup.teardown()
        assert sup.wait(60) == ev.JOB_STOPPED  # torn down on purpose: Stopped, not Failed
        reader.join(10)
        wait_for(lambda: pids_with_run_id(RUN) == [], 10, "no process of the run left")
    finally:
        kill_run_processes(RUN)
