"""`distlaunch logs RUN --all`: every task's lines of a real run in the order they were printed,
each with its time and task, filtered by task, role, regex and stream; mistakes are one line."""

from __future__ import annotations

import re
from pathlib import Path

from tests.integration.jobtools import cli, kill_run_processes
from tests.profiles import build_profile

#: worker:0 and worker:1 take turns (each waits for the other's mark file before its next line)
_SCRIPT = """
import os, sys, time
me = int(os.environ["TF_CONFIG"].split('"index":')[1].split("}")[0].strip())
marks = sys.argv[1]
def wait_for(name):
    deadline = time.time() + 60
    while not os.path.exists(os.path.join(marks, name)):
        if time.time() > deadline:
            sys.exit("no " + name)
        time.sleep(0.02)
for turn in range(3):
    if me == 1:
        wait_for("w0-%d" % turn)
    print("turn %d from worker %d" % (turn, me), flush=True)
    if turn == 1:
        print("warning %d from worker %d" % (turn, me), file=sys.stderr, flush=True)
    if turn == 2 and me == 1:
        print("ERROR: checkpoint %d of worker %d was not written" % (turn, me), flush=True)
    open(os.path.join(marks, "w%d-%d" % (me, turn)), "w").close()
    if me == 0:
        wait_for("w1-%d" % turn)
"""


def test_every_tasks_lines_in_time_order_with_filters(tmp_path: Path) -> None:
    script = tmp_path / "turns.py"
    script.write_text(_SCRIPT)
    marks = tmp_path / "marks"
    marks.mkdir()
    profile = build_profile(tmp_path / "p.toml", name="merged", command=f"{{python}} {script} {marks}",
                            hosts=(), roles={"worker": 2}, strategy="multi_worker_mirrored",
                            success_policy="all_workers", defaults={"autolog": False})
    run_id = "logs-merged"
    run_dir = tmp_path / "run"
    try:
        up = cli("up", str(profile), "--no-tui", "--run-dir", str(run_dir), "--run-id", run_id, timeout=120)
    finally:
        kill_run_processes(run_id)
    assert up.returncode == 0, up.stderr[-2000:]
    merged = cli("logs", str(run_dir), "--all")
    assert merged.returncode == 0, merged.stderr
    turns = [line for line in merged.stdout.splitlines() if "turn" in line]
    assert [re.sub(r"^\S+ ", "", line).split(None, 1)[1] for line in turns] == [
        f"turn {t} from worker {w}" for t in range(3) for w in (0, 1)]
    assert all(re.match(r"^\d\d:\d\d:\d\d\.\d{3} worker:[01] ", line) for line in turns), turns
    errs = cli("logs", str(run_dir), "--all", "--stderr")
    assert [line.split(None, 2)[1:] for line in errs.stdout.splitlines()] == [
        ["worker:0!", "warning 1 from worker 0"], ["worker:1!", "warning 1 from worker 1"]]
    # the dashboard's level=warn: an ERROR on stdout is one, a lower-case "warning" on stderr is not
    warned = cli("logs", str(run_dir), "--all", "--level", "warn")
    assert [line.split(None, 2)[1:] for line in warned.stdout.splitlines()] == [
        ["worker:1", "ERROR: checkpoint 2 of worker 1 was not written"]], warned.stdout
    both = cli("logs", str(run_dir), "--all", "--stderr", "--level", "warn")
    assert both.returncode == 2 and "give --stderr or --level warn, not both" in both.stderr
    one = cli("logs", str(run_dir), "--all", "--task", "worker:1", "--grep", r"turn [02]")
    assert [line.split(None, 2)[2] for line in one.stdout.splitlines()] == [
        "turn 0 from worker 1", "turn 2 from worker 1"]
    role = cli("logs", str(run_dir), "--all", "--task", "worker", "--grep", "turn 1")
    assert len(role.stdout.splitlines()) == 2
    for argv, words in ((["--all", "--task", "ps"], "no task or role 'ps'"), (["--all", "--grep", "("], "no regex"),
                        ([], "name a task")):
        bad = cli("logs", str(run_dir), *argv)
        assert bad.returncode == 2 and words in bad.stderr and len(bad.stderr.strip().splitlines()) == 1, bad.stderr
