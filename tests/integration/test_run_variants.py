"""A run's variants and record, end to end on this machine: --set, -- ARGS, ${env:VAR}, resolved.json,
and attach/restart using the recorded profile instead of the edited file."""

from __future__ import annotations

import hashlib
import json
import os
import signal
from pathlib import Path

from tests.integration.jobtools import cli, kill_run_processes, wait_for
from tests.profiles import build_profile

TOKEN = "tok-9f8e7d6c5b4a"

TASK = """
import hashlib, json, os, sys, time
task = os.environ["DISTLAUNCH_TASK"].replace(":", "-")
out = {"argv": sys.argv[1:], "version": os.environ.get("VERSION"),
       "token_sha": hashlib.sha256(os.environ.get("API_TOKEN", "").encode()).hexdigest(),
       "workers": len(json.loads(os.environ["TF_CONFIG"])["cluster"]["worker"])}
with open(f"{task}-{os.getpid()}.json", "w") as fh:
    json.dump(out, fh)
time.sleep(float(os.environ.get("HOLD", "0")))
"""


def _profile(tmp_path: Path, version: str, hold: float = 0) -> Path:
    (tmp_path / "task.py").write_text(TASK)
    return build_profile(tmp_path / "variants.toml", name="variants", strategy="custom",
                         command=f"{{python}} task.py --version {version}", workdir=tmp_path,
                         env={"API_TOKEN": "${env:DL_IT_TOKEN}", "VERSION": version, "HOLD": str(hold)},
                         restart="never", roles={"worker": {}},
                         # every worker writes its file before the job ends: with the default policy,
                         # worker:0's success stopped a worker:1 still starting on a loaded machine
                         success_policy="all_workers")


def _outputs(tmp_path: Path, task: str) -> list[dict]:
    return [json.loads(p.read_text()) for p in sorted(tmp_path.glob(f"{task}-*.json"), key=lambda p: p.stat().st_mtime)]


def test_set_args_and_env_change_one_run_and_the_record_keeps_them_without_the_secret(tmp_path: Path) -> None:
    profile = _profile(tmp_path, "v1")
    run_dir, run_id = tmp_path / "run", "it-variants"
    try:
        result = cli("up", str(profile), "--no-tui", "--run-dir", str(run_dir), "--run-id", run_id,
                     "--set", "roles.worker.count=2", "--", "--flag", "x y", env={"DL_IT_TOKEN": TOKEN})
    finally:
        kill_run_processes(run_id)
    assert result.returncode == 0, result.stdout[-2000:] + result.stderr[-2000:]
    for task in ("worker-0", "worker-1"):
        (out,) = _outputs(tmp_path, task)
        assert out["argv"] == ["--version", "v1", "--flag", "x y"] and out["workers"] == 2
        assert out["token_sha"] == hashlib.sha256(TOKEN.encode()).hexdigest()
    resolved = json.loads((run_dir / "resolved.json").read_text())
    assert resolved["overrides"] == {"set": ["roles.worker.count=2"], "args": ["--flag", "x y"]}
    assert resolved["profile"]["roles"]["worker"]["count"] == 2
    assert resolved["profile"]["defaults"]["env"]["API_TOKEN"] == "****"
    assert resolved["versions"] and resolved["profile_path"] == str(profile)
    assert (run_dir / "profile.toml").read_text() == profile.read_text()
    leaks = [str(p) for p in run_dir.rglob("*") if p.is_file() and TOKEN.encode() in p.read_bytes()]
    assert leaks == []


def test_a_bad_set_or_an_unset_env_variable_starts_nothing(tmp_path: Path) -> None:
    profile = _profile(tmp_path, "v1")
    bad = cli("up", str(profile), "--no-tui", "--set", "roles.worker.cuont=2", env={"DL_IT_TOKEN": TOKEN})
    assert bad.returncode == 2 and bad.stderr.count("\n") == 1 and "--set roles.worker.cuont" in bad.stderr
    unset = cli("check", str(profile), "--no-remote")  # DL_IT_TOKEN is not in the test environment
    assert unset.returncode == 2 and "${env:DL_IT_TOKEN} is not set" in unset.stderr
    assert list(tmp_path.glob("worker-*.json")) == []


def test_attach_and_restart_use_the_recorded_profile_not_the_edited_file(tmp_path: Path) -> None:
    profile = _profile(tmp_path, "v1", hold=600)
    run_dir, run_id = tmp_path / "run", "it-recorded"
    env = {"DL_IT_TOKEN": TOKEN}
    try:
        up = cli("up", str(profile), "--detach", "--run-dir", str(run_dir), "--run-id", run_id, env=env)
        assert up.returncode == 0, up.stderr[-2000:]
        wait_for(lambda: _outputs(tmp_path, "worker-0"), 60, "the first incarnation")
        _profile(tmp_path, "v2-edited", hold=600)  # the next experiment, while this run goes on
        # the supervisor dies (a reboot of the login node): attach plans the run again, from its record
        gone = json.loads((run_dir / "state.json").read_text())["supervisor_pid"]
        os.kill(gone, signal.SIGKILL)
        attached = cli_background_attach(run_dir, tmp_path, env)
        try:
            def adopted() -> bool:
                state = json.loads((run_dir / "state.json").read_text())
                return bool(state["supervisor_pid"] != gone and state.get("clients") == 1)

            wait_for(adopted, 60, "a new supervisor, started by attach")
            assert cli("restart", str(run_dir), "worker:0", env=env).returncode == 0
            outs = wait_for(lambda: len(_outputs(tmp_path, "worker-0")) >= 2 and _outputs(tmp_path, "worker-0"),
                            60, "the restarted incarnation")
        finally:
            cli("down", str(run_dir), env=env)
            attached.wait(timeout=60)
    finally:
        kill_run_processes(run_id)
    assert [o["version"] for o in outs] == ["v1", "v1"] and outs[1]["argv"] == ["--version", "v1"]


def cli_background_attach(run_dir: Path, tmp_path: Path, env: dict[str, str]):  # type: ignore[no-untyped-def]
    from tests.integration.jobtools import start_cli

    return start_cli("attach", str(run_dir), "--no-tui", log=tmp_path / "attach.log", env=env)


OUTPUTS_TASK = """
import os, sys
out = sys.argv[1]
seen = open(os.path.join(out, "history.txt")).read().split() if os.path.exists(os.path.join(out, "history.txt")) else []
with open(os.path.join(out, "history.txt"), "a") as fh:
    fh.write(os.environ["DISTLAUNCH_RUN_ID"] + "\\n")
print("seen", len(seen), flush=True)
"""


def test_outputs_belong_to_the_job_and_outlive_runs_and_down(tmp_path: Path) -> None:
    (tmp_path / "keep.py").write_text(OUTPUTS_TASK)
    outputs = tmp_path / "outs"
    profile = build_profile(tmp_path / "keep.toml", name="keeper", strategy="custom", outputs=f"{outputs}/{{name}}",
                            command="{python} keep.py {outputs}", workdir=tmp_path, restart="never",
                            roles={"worker": {}})
    runs = []
    try:
        for n in range(2):
            run_dir = tmp_path / f"run{n}"
            result = cli("up", str(profile), "--no-tui", "--run-dir", str(run_dir), "--run-id", f"it-keep-{n}")
            assert result.returncode == 0, result.stderr[-2000:]
            assert f"seen {n}" in (run_dir / "logs" / "worker-0.log").read_text()
            runs.append(run_dir)
        down = cli("down", str(runs[0]))  # an ended run: its hosts are swept, its outputs left alone
        assert down.returncode == 0, down.stderr
    finally:
        kill_run_processes("it-keep-0")
        kill_run_processes("it-keep-1")
    assert (outputs / "keeper" / "history.txt").read_text().split() == ["it-keep-0", "it-keep-1"]


def test_setup_lines_run_in_the_chosen_shell_before_the_command(tmp_path: Path) -> None:
    (tmp_path / "sub").mkdir()
    profile = build_profile(tmp_path / "setup.toml", name="setup", strategy="custom", success_policy="all_workers",
                            command='echo "greeting=$GREETING bash=${BASH_VERSION:+yes} dir=$(basename $PWD)"',
                            defaults={"setup": ["export GREETING=hi-from-setup", "cd sub"], "shell": "bash -lc"},
                            workdir=tmp_path, restart="never", roles={"worker": {"count": 2, "env": {"X": "1"}}})
    run_dir, run_id = tmp_path / "run", "it-setup"
    try:
        ok = cli("up", str(profile), "--no-tui", "--run-dir", str(run_dir), "--run-id", run_id)
        assert ok.returncode == 0, ok.stderr[-2000:]
        assert "greeting=hi-from-setup bash=yes dir=sub" in (run_dir / "logs" / "worker-1.log").read_text()
        # a failing setup line is caught by preflight, before anything starts
        failing = cli("up", str(profile), "--no-tui", "--run-dir", str(tmp_path / "run2"), "--run-id", run_id + "2",
                      "--set", 'defaults.setup=["false", "echo never"]')
        assert failing.returncode == 2 and "the setup lines failed" in failing.stderr and "`setup`" in failing.stderr
        assert not (tmp_path / "run2" / "logs" / "worker-0.log").exists()
    finally:
        kill_run_processes(run_id)
        kill_run_processes(run_id + "2")
