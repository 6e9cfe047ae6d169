"""Secrets never appear in a file, an argv or a log, only in the task's environment: a
``${env:NAME}`` inside `command`, a secret given by ``--set``, and an internal error's log line."""

from __future__ import annotations

import hashlib
import json
import os
import stat
import sys
from pathlib import Path

import pytest

from launcher import cli as cli_module
from tests.integration.jobtools import cli, kill_run_processes, pids_with_run_id, read_events, wait_for
from tests.profiles import build_profile

CMD_TOKEN = "cmd-secret-7f3a91c2"
SET_TOKEN = "set-secret-0b5e44d8"

SHOW = """
import hashlib, os, sys, time
# what the task got: the digests only, so the test can tell it got the right values
print("argv", hashlib.sha256(sys.argv[1].encode()).hexdigest(), flush=True)
print("env", hashlib.sha256(os.environ["HF_TOKEN"].encode()).hexdigest(), flush=True)
open(os.path.join(os.getcwd(), "ready"), "w").close()
time.sleep(600)
"""


def _digest(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()


def _everything_under(path: Path) -> list[Path]:
    return [p for p in path.rglob("*") if p.is_file() and not p.is_symlink()]


def test_secrets_reach_the_task_and_nothing_else(tmp_path: Path) -> None:
    (tmp_path / "show.py").write_text(SHOW)
    profile = build_profile(tmp_path / "secret.toml", name="secret", strategy="custom", outputs=f"{tmp_path}/outputs",
                            command="{python} show.py '${env:DL_CMD_TOKEN}'", workdir=tmp_path,
                            defaults={"python": sys.executable}, grace=2, role_hosts=False)
    run_dir, run_id = tmp_path / "run", "it-secrets"
    try:
        up = cli("up", str(profile), "--detach", "--run-dir", str(run_dir), "--run-id", run_id,
                 "--set", f'defaults.env.HF_TOKEN="{SET_TOKEN}"', env={"DL_CMD_TOKEN": CMD_TOKEN}, timeout=120)
        assert up.returncode == 0, up.stdout + up.stderr
        wait_for(lambda: (tmp_path / "ready").exists(), 60, "the task to start")
        wait_for(lambda: any(e.get("line", "").startswith("env ") for e in read_events(run_dir)), 30, "its output")
        lines = [e["line"] for e in read_events(run_dir) if e["kind"] == "log"]
        assert f"argv {_digest(CMD_TOKEN)}" in lines and f"env {_digest(SET_TOKEN)}" in lines  # the task got both
        # no file of the run (run dir, host run dir, spec.json, state.json, the record) holds either
        for path in _everything_under(run_dir):
            data = path.read_bytes()
            assert CMD_TOKEN.encode() not in data and SET_TOKEN.encode() not in data, path
        # no process's argv, as every user can read it in /proc
        for pid in pids_with_run_id(run_id):
            with open(f"/proc/{pid}/cmdline", "rb") as fh:
                argv = fh.read()
            if b"show.py" in argv and b"python" in argv.split(b"\0")[0]:
                continue  # the user's own program: it was given the token as its argument on purpose
            assert CMD_TOKEN.encode() not in argv and SET_TOKEN.encode() not in argv, argv
        state = json.loads((run_dir / "state.json").read_text())
        assert state["overrides"]["set"] == ['defaults.env.HF_TOKEN="****"']
    finally:
        cli("down", str(run_dir), timeout=60)
        kill_run_processes(run_id)


def test_an_internal_errors_log_is_private_and_masks_secret_sets(tmp_path: Path,
                                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    home = tmp_path / "home"
    monkeypatch.setenv("DISTLAUNCH_HOME", str(home))

    def broken(*_args: object, **_kwargs: object) -> int:
        raise RuntimeError("boom")

    import launcher.commands.check as check

    monkeypatch.setattr(check, "run_check", broken)
    code = cli_module.main(["check", "p.toml", "--set", f"defaults.env.HF_TOKEN={SET_TOKEN}",
                            f"--set=roles.worker.env.API_KEY={SET_TOKEN}", "--set", "roles.worker.count=2"])
    assert code == 1
    log = next(home.rglob("distlaunch.log"))
    told = log.read_text()
    assert SET_TOKEN not in told and "defaults.env.HF_TOKEN=****" in told and "roles.worker.count=2" in told
    assert stat.S_IMODE(os.stat(log).st_mode) == 0o600
    assert stat.S_IMODE(os.stat(log.parent).st_mode) == 0o700


def test_a_run_whose_set_secret_is_kept_nowhere_is_not_taken_over_blindly(tmp_path: Path) -> None:
    """A new supervisor would restart tasks with "****" in place of the secret: attach says why
    it cannot take the run over instead, in one line."""
    (tmp_path / "show.py").write_text(SHOW)
    profile = build_profile(tmp_path / "p.toml", name="secret2", strategy="custom", outputs=f"{tmp_path}/outputs",
                            command="{python} show.py x", workdir=tmp_path,
                            defaults={"python": sys.executable}, grace=2, role_hosts=False)
    run_dir, run_id = tmp_path / "run", "it-secrets-adopt"
    try:
        up = cli("up", str(profile), "--detach", "--run-dir", str(run_dir), "--run-id", run_id,
                 "--set", f'defaults.env.HF_TOKEN="{SET_TOKEN}"', timeout=120)
        assert up.returncode == 0, up.stdout + up.stderr
        os.kill(json.loads((run_dir / "state.json").read_text())["supervisor_pid"], 9)
        attach = cli("attach", str(run_dir), "--no-tui", timeout=60)
        assert attach.returncode == 2, attach.stdout + attach.stderr
        assert "started with a secret in --set defaults.env.HF_TOKEN" in attach.stderr
        assert len(attach.stderr.strip().splitlines()) == 1 and SET_TOKEN not in attach.stderr
    finally:
        cli("down", str(run_dir), timeout=60)
        kill_run_processes(run_id)
