"""`down` and `prune` clean run dirs on the launcher and the hosts, never outputs and never a live run."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from tests.integration.jobtools import cli, kill_run_processes, pids_with_run_id, wait_for
from tests.profiles import build_profile, local_host, ssh_table, sshd_host
from tests.sshd import PrivateSshd

pytestmark = pytest.mark.sshd

TASK = "import os, sys; open(os.path.join(sys.argv[1], os.environ['DISTLAUNCH_RUN_ID']), 'w').close()"


def _profile(tmp_path: Path, server: PrivateSshd | None, name: str, command: str) -> Path:
    """A one-task profile on an SSH host ``box`` of ``server``, or (None) on a local host ``here``."""
    host = sshd_host(server, "box") if server else local_host("here")
    return build_profile(tmp_path / f"{name}.toml", name=name, strategy="custom",
                         outputs=f"{tmp_path}/outputs/{{name}}", command=command,
                         defaults={"python": sys.executable}, workdir=tmp_path, restart="never",
                         ssh=ssh_table(server) if server else None, hosts=[host], roles={"worker": {}})


def _host_dir(run_dir: Path, host: str = "box") -> Path:
    return Path(json.loads((run_dir / "state.json").read_text())["hosts"][host]["base_dir"])


def test_prune_removes_finished_runs_everywhere_but_keeps_live_ones_and_outputs(
        tmp_path: Path, private_sshd: PrivateSshd, distlaunch_home: Path) -> None:
    (tmp_path / "touch.py").write_text(TASK)
    quick = _profile(tmp_path, private_sshd, "quick", "{python} touch.py {outputs}")
    slow = _profile(tmp_path, private_sshd, "slow", "sleep 600")
    runs = distlaunch_home / "runs"
    ids = ["it-prune-a", "it-prune-b", "it-prune-live"]
    try:
        for run_id in ids[:2]:
            done = cli("up", str(quick), "--no-tui", "--run-id", run_id)
            assert done.returncode == 0, done.stderr[-2000:]
        live = cli("up", str(slow), "--detach", "--run-id", ids[2])
        assert live.returncode == 0, live.stderr[-2000:]
        host_dirs = {run_id: _host_dir(runs / run_id) for run_id in ids}
        assert all(d.is_dir() for d in host_dirs.values())

        dry = cli("prune", "--keep", "1", "--dry-run")
        assert dry.returncode == 0 and "would remove it-prune-a" in dry.stdout and "it-prune-b" not in dry.stdout
        assert (runs / "it-prune-a").is_dir() and host_dirs["it-prune-a"].is_dir()

        assert cli("prune", "--older-than", "1").stdout.startswith("nothing to prune")
        one = cli("prune", "--keep", "1")
        assert one.returncode == 0, one.stderr
        assert not (runs / "it-prune-a").exists() and not host_dirs["it-prune-a"].exists()
        assert (runs / "it-prune-b").is_dir() and host_dirs["it-prune-b"].is_dir()

        rest = cli("prune")
        assert rest.returncode == 0 and "1 live or supervised" in rest.stdout
        assert not (runs / "it-prune-b").exists() and not host_dirs["it-prune-b"].exists()
        assert (runs / "it-prune-live").is_dir() and host_dirs["it-prune-live"].is_dir()  # never a live run
        # outputs belong to the job: untouched by prune
        assert sorted(p.name for p in (tmp_path / "outputs" / "quick").iterdir()) == ids[:2]

        kept = cli("down", ids[2], "--keep-host-files")
        assert kept.returncode == 0 and host_dirs["it-prune-live"].is_dir(), kept.stderr
    finally:
        for run_id in ids:
            kill_run_processes(run_id)


def test_down_removes_the_host_run_dir_once_nothing_runs_there(tmp_path: Path, private_sshd: PrivateSshd,
                                                              distlaunch_home: Path) -> None:
    slow = _profile(tmp_path, private_sshd, "slow", "sleep 600")
    try:
        assert cli("up", str(slow), "--detach", "--run-id", "it-down-clean").returncode == 0
        host_dir = _host_dir(distlaunch_home / "runs" / "it-down-clean")
        wait_for(lambda: list(host_dir.glob("tasks/*/task.pgid")), 30, "the task to start")
        down = cli("down", "it-down-clean")
        assert down.returncode == 0 and "host run dirs removed" in down.stdout, down.stderr
        assert not host_dir.exists() and (tmp_path / "outputs" / "slow").is_dir()
    finally:
        kill_run_processes("it-down-clean")


def test_prune_keeps_a_run_dir_chosen_outside_the_state_dir_until_it_is_named(
        tmp_path: Path, distlaunch_home: Path) -> None:
    """Issue 26 §7: `up --run-dir ~/experiments/run1` then `prune --keep 0` deleted the user's dir."""
    (tmp_path / "touch.py").write_text(TASK)
    quick = _profile(tmp_path, None, "quick", "{python} touch.py {outputs}")
    runs = distlaunch_home / "runs"
    by_id, by_path = tmp_path / "experiments" / "run1", tmp_path / "experiments" / "run2"
    ids = ["it-prune-in", "it-prune-out1", "it-prune-out2"]
    try:
        for run_id, run_dir in zip(ids, (None, by_id, by_path), strict=True):
            where = ["--run-dir", str(run_dir)] if run_dir else []
            done = cli("up", str(quick), "--no-tui", "--run-id", run_id, *where)
            assert done.returncode == 0, done.stderr[-2000:]
        assert (by_id / "state.json").is_file() and (by_id / "hosts" / "here").is_dir()

        pruned = cli("prune", "--keep", "0")
        assert pruned.returncode == 0, pruned.stderr
        assert not (runs / "it-prune-in").exists()
        for run_id, run_dir in ((ids[1], by_id), (ids[2], by_path)):
            assert (run_dir / "state.json").is_file() and (run_dir / "hosts" / "here").is_dir()
            assert f"kept {run_id} ({run_dir}): outside the state dir; remove it yourself or name it" \
                in pruned.stdout, pruned.stdout
        listed = json.loads(cli("runs", "--json").stdout)
        assert sorted(r["run"] for r in listed) == ids[1:]

        named = cli("prune", ids[1])  # by id: the link in the state dir finds it
        assert named.returncode == 0 and f"removed {ids[1]}" in named.stdout, named.stderr
        assert not by_id.exists() and not (runs / ids[1]).is_symlink()
        named = cli("prune", str(by_path))  # by path
        assert named.returncode == 0 and f"removed {ids[2]}" in named.stdout, named.stderr
        assert not by_path.exists() and not (runs / ids[2]).is_symlink()
        assert (tmp_path / "experiments").is_dir()  # only the run dirs named, not their parent
        assert sorted(p.name for p in (tmp_path / "outputs" / "quick").iterdir()) == sorted(ids)
    finally:
        for run_id in ids:
            kill_run_processes(run_id)


def test_down_stops_a_run_kept_outside_the_state_dir_but_leaves_its_dir(
        tmp_path: Path, distlaunch_home: Path) -> None:
    slow = _profile(tmp_path, None, "slow", "sleep 600")
    run_dir = tmp_path / "experiments" / "slow1"
    try:
        started = cli("up", str(slow), "--detach", "--run-id", "it-down-out", "--run-dir", str(run_dir))
        assert started.returncode == 0, started.stderr[-2000:]
        host_dir = _host_dir(run_dir, "here")
        wait_for(lambda: list(host_dir.glob("tasks/*/task.pgid")), 30, "the task to start")
        early = cli("prune", "it-down-out")  # never a run that is not finished, named or not
        assert early.returncode == 2 and "is supervised; stop it first with `distlaunch down it-down-out`" \
            in early.stderr and run_dir.is_dir(), early.stderr
        down = cli("down", "it-down-out")
        assert down.returncode == 0 and "no process of the run is left" in down.stdout, down.stderr
        assert f"{run_dir} kept: outside the state dir" in down.stdout, down.stdout
        assert host_dir.is_dir() and (run_dir / "events.jsonl").is_file()
        assert not pids_with_run_id("it-down-out")
        ended = next(r for r in json.loads(cli("runs", "--json").stdout) if r["run"] == "it-down-out")
        assert (ended["job_state"], ended["live"]) == ("Stopped", None)  # no launcher: down recorded the end
        named = cli("prune", "it-down-out")
        assert named.returncode == 0 and not run_dir.exists(), named.stdout + named.stderr
    finally:
        kill_run_processes("it-down-out")

