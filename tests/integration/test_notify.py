"""[notify]: the command runs on the launcher after a task failure and at the job's end, and cannot hurt the job."""

from __future__ import annotations

from pathlib import Path

from tests.integration.jobtools import cli, kill_run_processes, pids_with_run_id
from tests.profiles import build_profile


def write_profile(tmp_path: Path, *, code: str, notify: str, max_restarts: int = 0, timeout: float = 30) -> Path:
    return build_profile(tmp_path / "p.toml", name="notified", command=f'{{python}} -c "{code}"', restart="on-failure",
                         max_restarts=max_restarts, env={"API_TOKEN": "s3cret-value", "SEED": "7"}, hosts=(),
                         notify={"command": notify, "timeout_seconds": timeout})


def read_env(path: Path) -> dict[str, str]:
    return dict(line.split("=", 1) for line in path.read_text().splitlines() if "=" in line)


def test_notify_command_gets_job_state_reason_and_run_id_after_a_failed_job(tmp_path: Path) -> None:
    out = tmp_path / "seen"
    out.mkdir()
    profile = write_profile(tmp_path, code="import sys; sys.exit(3)",
                            notify=f'env > {out}/"$DISTLAUNCH_EVENT.env"')
    run_id = "notify-failed"
    try:
        up = cli("up", str(profile), "--no-tui", "--run-dir", str(tmp_path / "run"), "--run-id", run_id)
    finally:
        kill_run_processes(run_id)
    assert up.returncode == 1, up.stderr[-2000:]
    assert sorted(p.name for p in out.iterdir()) == ["job_ended.env", "task_failed.env"]
    ended = read_env(out / "job_ended.env")
    assert ended["DISTLAUNCH_EVENT"] == "job_ended"
    assert ended["DISTLAUNCH_JOB_STATE"] == "Failed"
    assert "worker:0" in ended["DISTLAUNCH_REASON"]
    assert ended["DISTLAUNCH_RUN_ID"] == run_id
    assert ended["DISTLAUNCH_RUN_DIR"] == str(tmp_path / "run")
    assert ended["DISTLAUNCH_PROFILE"] == "notified"
    failed = read_env(out / "task_failed.env")
    assert (failed["DISTLAUNCH_TASK"], failed["DISTLAUNCH_EXIT_CODE"], failed["DISTLAUNCH_HOST"]) == \
        ("worker:0", "3", "local")
    for path in out.iterdir():  # the profile's task env (where secrets live) never reaches the command
        text = path.read_text()
        assert "s3cret-value" not in text and "API_TOKEN" not in text and "SEED=7" not in text
    assert "warning" not in up.stderr


def test_a_hanging_notify_command_is_killed_and_the_job_still_succeeds(tmp_path: Path) -> None:
    profile = write_profile(tmp_path, code="print(1)", notify="echo notified; exec sleep 600", timeout=1)
    run_id = "notify-hangs"
    try:
        up = cli("up", str(profile), "--no-tui", "--run-dir", str(tmp_path / "run"), "--run-id", run_id,
                 timeout=120)
        assert up.returncode == 0, up.stderr[-2000:]
        warnings = [line for line in up.stderr.splitlines() if "[notify]" in line]
        assert len(warnings) == 1 and "did not finish in 1s and was killed" in warnings[0]
        assert "job Succeeded" in up.stdout
        assert "notified" in (tmp_path / "run" / "notify.log").read_text()
        assert pids_with_run_id(run_id) == []  # the sleep is gone with its process group
    finally:
        kill_run_processes(run_id)


def test_a_failing_notify_command_warns_once_however_often_it_runs(tmp_path: Path) -> None:
    profile = write_profile(tmp_path, code="import sys; sys.exit(3)", notify="exit 5", max_restarts=1)
    run_id = "notify-fails"
    try:
        up = cli("up", str(profile), "--no-tui", "--run-dir", str(tmp_path / "run"), "--run-id", run_id)
    finally:
        kill_run_processes(run_id)
    assert up.returncode == 1, up.stderr[-2000:]
    log_file = tmp_path / "run" / "notify.log"
    assert log_file.stat().st_mode & 0o777 == 0o600  # run dir files are private: output may hold tokens
    log = log_file.read_text()
    assert log.count("--- ") == 3  # two task failures and the job's end
    warnings = [line for line in up.stderr.splitlines() if "[notify]" in line]
    assert len(warnings) == 1 and "exited 5" in warnings[0] and "the job is not affected" in warnings[0]


def test_a_detached_job_notifies_once_whoever_follows_it(tmp_path: Path) -> None:
    """The supervisor notifies, with or without a client; an `attach` that follows it adds none."""
    out = tmp_path / "seen.log"
    profile = write_profile(tmp_path, code="import time, sys; time.sleep(4); sys.exit(3)",
                            notify=f'echo "$DISTLAUNCH_EVENT $DISTLAUNCH_TASK $DISTLAUNCH_JOB_STATE" >> {out}')
    run_id = "notify-attach"
    try:
        up = cli("up", str(profile), "--detach", "--run-dir", str(tmp_path / "run"), "--run-id", run_id)
        assert up.returncode == 0, up.stderr[-2000:]
        assert not out.exists()  # nothing failed yet
        attach = cli("attach", run_id, "--no-tui")
        assert attach.returncode == 1, attach.stdout[-2000:] + attach.stderr[-2000:]
    finally:
        kill_run_processes(run_id)
    assert out.read_text().splitlines() == ["task_failed worker:0 Running", "job_ended  Failed"]
