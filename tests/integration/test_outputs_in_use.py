"""Two runs of one job at once under one account (two people sharing a uid, both running `make
demo`): the second is refused before any task starts, naming the live run, instead of writing the
first one's checkpoints over; with outputs of its own it runs."""

from __future__ import annotations

import json
from pathlib import Path

from tests.integration.jobtools import cli, kill_run_processes, start_cli, wait_for
from tests.profiles import build_profile


def test_a_second_run_on_the_outputs_of_a_live_one_is_refused(tmp_path: Path) -> None:
    env = {"DISTLAUNCH_HOME": str(tmp_path / "home")}
    outputs = tmp_path / "outputs"
    profile = build_profile(tmp_path / "sleeper.toml", name="sleeper", outputs=outputs,
                            command='{python} -c "import time; time.sleep(600)"', restart="never", hosts=())
    first = start_cli("up", str(profile), "--no-tui", "--run-id", "out-first", log=tmp_path / "first.log", env=env)
    try:
        wait_for(lambda: [r for r in json.loads(cli("runs", "--json", env=env, timeout=60).stdout)
                          if r["run"] == "out-first" and r["job_state"] == "Running"], 120, "the first run running",
                 interval=0.5)
        second = cli("up", str(profile), "--no-tui", "--run-id", "out-second", env=env, timeout=120)
        assert second.returncode == 2, second.stdout[-2000:] + second.stderr[-2000:]
        assert f"the outputs {outputs} are in use by run out-first" in second.stderr, second.stderr
        assert "--set outputs=" in second.stderr
        elsewhere = cli("up", str(profile), "--no-tui", "--run-id", "out-third", "--detach",
                        "--set", f"outputs={json.dumps(str(tmp_path / 'own'))}", env=env, timeout=120)
        assert elsewhere.returncode == 0, elsewhere.stdout[-2000:] + elsewhere.stderr[-2000:]
    finally:
        for run_id in ("out-third", "out-first"):
            cli("down", run_id, env=env, timeout=120)
        first.wait(timeout=60)
        for run_id in ("out-first", "out-second", "out-third"):
            kill_run_processes(run_id)
