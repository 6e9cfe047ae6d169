"""Tasks in containers (issue 38) with a real Docker daemon and the test image (tests/containers.py).

A ParameterServerStrategy job (chief, ps, two workers) runs unmodified in `distlaunch-test:tf2.21`,
on this machine and over the private sshd: it succeeds, autolog's step, loss and placement arrive,
`distlaunch stacks` shows the script's own frames (py-spy from the host against the host pid), a
worker killed with SIGKILL is restarted alone, and nothing of the run is left (no process carrying
the run id, no container with its label). Without a supervisor (killed) the orphan rule removes the
containers; `down` removes them when the supervisor and the host agent are both gone. A missing
image is one line and exit 2 from `check`; a container the daemon refuses to start is a one-line
cause, not "exit code 125".

Every wait is on an event or a state (bounded); the script itself waits for a release file. A
test whose bounded waits add up to more than pytest's timeout (pyproject) says so with its own
``timeout`` mark: the wait that fails names what it waited for.
"""

from __future__ import annotations

import json
import os
import secrets
import shutil
import signal
import subprocess
from pathlib import Path
from typing import Any

import pytest

from tests.integration.jobtools import (
    REPO,
    cli,
    kill_run_processes,
    pids_with_run_id,
    read_events,
    start_cli,
    wait_for,
    wait_for_event,
)
from tests.profiles import build_profile, local_host, ssh_table, sshd_host
from tests.sshd import PrivateSshd

pytestmark = pytest.mark.slow

SCRIPTS = REPO / "tests" / "data" / "containers"
LABEL = "distlaunch.run"


def containers_of(run_id: str) -> list[str]:
    """Every container, running or not, labelled with the run (`docker ps -a --filter label=...`)."""
    out = subprocess.run(["docker", "ps", "-a", "--filter", f"label={LABEL}={run_id}", "--format", "{{.Names}}"],
                         capture_output=True, text=True, timeout=60, check=True).stdout
    return out.split()


def remove_containers(run_id: str) -> None:
    """Last-resort cleanup of a failing test."""
    names = containers_of(run_id)
    if names:
        subprocess.run(["docker", "rm", "-f", *names], capture_output=True, timeout=60, check=False)


def nothing_left(run_id: str) -> bool:
    return not containers_of(run_id) and not pids_with_run_id(run_id)


def ps_profile(tmp: Path, image: str, *, sshd: PrivateSshd | None = None, steps: int = 20,
               orphan_grace: int = 60) -> Path:
    """The PSS job in the image; the chief waits for ``<outputs>/release`` half way."""
    return build_profile(
        tmp / "ps.toml", name="it-containers", strategy="parameter_server", orphan_grace=orphan_grace,
        outputs=tmp / "outputs", command=f"{{python}} ps_release.py --steps {steps} --release {{outputs}}/release",
        workdir=SCRIPTS, env={"TF_CPP_MIN_LOG_LEVEL": "2", "DISTLAUNCH_AUTOLOG_INTERVAL": "0.01",
                              "DISTLAUNCH_REPORT_INTERVAL": "0"},
        grace=5, defaults={"container": {"image": image}}, ssh=ssh_table(sshd) if sshd else None,
        hosts=[sshd_host(sshd, "box") if sshd else local_host("box")], roles={"chief": {}, "ps": {}, "worker": 2})


SECRET = "s3cr3t-" + secrets.token_hex(4)
#: the launcher's environment: the profile takes API_TOKEN from it (``${env:API_TOKEN}``, a secret)
SECRET_ENV = {"API_TOKEN": SECRET}


def sleep_profile(tmp: Path, image: str, *, orphan_grace: int = 60, options: dict[str, Any] | None = None) -> Path:
    """Two workers that only sleep, in the image: what teardown must find and stop. Their env holds
    a secret from the launcher's environment (API_TOKEN), which must reach the container by name only."""
    return build_profile(tmp / "sleep.toml", name="it-containers-sleep", strategy="custom", orphan_grace=orphan_grace,
                         outputs=tmp / "outputs", command="{python} -c 'import time; time.sleep(600)'", workdir=tmp,
                         grace=2, restart="on-failure", env={"API_TOKEN": "${env:API_TOKEN}"},
                         defaults={"container": {"image": image, **(options or {})}}, hosts=[local_host("box")],
                         roles={"worker": 2})


def running(run_dir: Path, task: str, restarts: int = 0, timeout: float = 120) -> dict[str, Any]:
    return wait_for_event(run_dir, lambda e: e["kind"] == "state" and e["task"] == task and e["state"] == "running"
                          and e.get("restarts", 0) == restarts, timeout, f"{task} running (restarts {restarts})")


def chief_waits(run_dir: Path) -> None:
    wait_for_event(run_dir, lambda e: e["kind"] == "log" and e["task"] == "chief:0"
                   and "waiting for" in e.get("line", ""), 180, "the chief waiting for its release")


def host_pid_of(task_dir: Path) -> int:
    """The container's main process as the host sees it (what the agent recorded in task.json)."""
    def known() -> int | None:
        try:
            pid = json.loads((task_dir / "task.json").read_text()).get("host_pid")
        except (OSError, ValueError):
            return None
        return pid if isinstance(pid, int) else None

    pid: int = wait_for(known, 30, f"the host pid in {task_dir}/task.json")
    return pid


def python_under(root: int) -> int:
    """The Python process in the container whose main process is ``root`` (docker-init's child)."""
    children: dict[int, list[int]] = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                stat = (entry / "stat").read_text()
            except OSError:
                continue
            children.setdefault(int(stat[stat.rindex(")") + 2:].split()[1]), []).append(int(entry.name))
    stack = [root]
    while stack:
        pid = stack.pop()
        if Path(f"/proc/{pid}/exe").exists() and "python" in os.path.basename(os.readlink(f"/proc/{pid}/exe")):
            return pid
        stack.extend(children.get(pid, []))
    raise AssertionError(f"no python under pid {root}")


def release(tmp: Path) -> None:
    (tmp / "outputs" / "release").write_text("go\n")


def assert_autolog_and_success(events: list[dict[str, Any]]) -> None:
    assert [e["state"] for e in events if e["kind"] == "job"][-1] == "Succeeded"
    steps = [e["step"] for e in events if e["kind"] == "metric" and e["task"] == "chief:0" and e["step"] is not None]
    said = [e["line"] for e in events if e["kind"] == "log" and e["task"] == "chief:0"
            and e["line"].startswith("done at step ")]
    # the dashboard ends where the script does (not at 2 * steps: Keras 3's iterations lose increments
    # when two workers' steps overlap, tests/data/containers/ps_release.py)
    assert said and steps and steps[-1] == int(said[-1].split()[-1]), (said, steps)
    losses = [e["loss"] for e in events if e["kind"] == "metric" and e["task"] == "chief:0" and e["loss"] is not None]
    assert losses, "no loss from autolog"
    placed = [v for e in events if e["kind"] == "placement" and e["task"] == "chief:0" for v in e["variables"]]
    assert any(v["name"] == "weights" and "/job:ps/" in v["device"] for v in placed), placed
    samples = [e for e in events if e["kind"] == "sample" and e["task"] == "worker:0" and e.get("rss_bytes")]
    assert samples and max(e["rss_bytes"] for e in samples) > 100 * 2**20, "no RSS of the containerised TensorFlow"


def assert_stacks_show_the_script(run: str, method: str) -> None:
    """`distlaunch stacks` reads the Pythons in the containers by ``method``: py-spy from the host
    against the host pid, or autolog's faulthandler writing to the stacks file mounted into the
    container (the agent signals the host pid; the handler names its pid inside)."""
    shown = cli("stacks", run, "--json", timeout=120)
    assert shown.returncode == 0, shown.stdout[-2000:] + shown.stderr[-2000:]
    captures = {c["task"]: c for c in json.loads(shown.stdout)}
    chief = captures["chief:0"]
    frames = [f[0] for t in chief["threads"] for f in t["frames"]]
    files = {os.path.basename(f[1]) for t in chief["threads"] for f in t["frames"]}
    assert "wait_for_release" in frames and "ps_release.py" in files, chief
    assert chief["method"] == method, chief
    worker = captures["worker:1"]
    assert any(os.path.basename(f[1]) == "ps_release.py" for t in worker["threads"] for f in t["frames"]), worker


@pytest.mark.timeout(120 + 180 + 60 + 120 + 30 + 60 + 90 + 120 + 30 + 20)  # its bounded waits, in order
def test_ps_job_in_containers_succeeds_with_autolog_stacks_and_a_worker_restarted(
        tmp_path: Path, docker_image: str) -> None:
    run_dir, run_id, log = tmp_path / "run", f"it-ct-local-{secrets.token_hex(2)}", tmp_path / "up.log"
    profile = ps_profile(tmp_path, docker_image)
    up = None
    try:
        up = start_cli("up", str(profile), "--no-tui", "--run-dir", str(run_dir), "--run-id", run_id, log=log)
        worker = running(run_dir, "worker:0")
        chief_waits(run_dir)
        names = containers_of(run_id)
        assert len(names) == 4 and all(n.startswith(f"dl-{run_id}-") for n in names), names
        assert_stacks_show_the_script(run_id, "py-spy")  # beside the agent's python (.venv/bin/py-spy)
        # SIGKILL to the worker's Python inside its container, as the host sees it: restarted alone
        python = python_under(host_pid_of(run_dir / "hosts" / "box" / "tasks" / "worker-0"))
        os.kill(python, signal.SIGKILL)
        failed = wait_for_event(run_dir, lambda e: e["kind"] == "state" and e["task"] == "worker:0"
                                and e["state"] == "failed", 60, "worker:0 failed")
        assert failed.get("signal") == "SIGKILL" and failed["exit_code"] == 137, failed
        assert "killed by SIGKILL" in failed.get("cause", ""), failed
        again = running(run_dir, "worker:0", restarts=1, timeout=90)
        assert again["pid"] != worker["pid"]
        release(tmp_path)
        assert up.wait(timeout=120) == 0, log.read_text()[-4000:]
        events = read_events(run_dir)
        assert_autolog_and_success(events)
        chief_runs = [e for e in events if e["kind"] == "state" and e["task"] == "chief:0" and e["state"] == "running"]
        assert len(chief_runs) == 1  # the chief was not restarted: the worker alone
        wait_for(lambda: nothing_left(run_id), 30, "no container and no process of the run")
    finally:
        if up is not None and up.poll() is None:
            up.kill()
        kill_run_processes(run_id)
        remove_containers(run_id)


@pytest.mark.sshd
@pytest.mark.timeout(180 + 60 + 120 + 120 + 30 + 20)
def test_ps_job_in_containers_over_ssh_succeeds_with_autolog_and_stacks(
        tmp_path: Path, docker_image: str, sshd: PrivateSshd) -> None:
    run_dir, run_id, log = tmp_path / "run", f"it-ct-ssh-{secrets.token_hex(2)}", tmp_path / "up.log"
    profile = ps_profile(tmp_path, docker_image, sshd=sshd)
    up = None
    try:
        up = start_cli("up", str(profile), "--no-tui", "--run-dir", str(run_dir), "--run-id", run_id, log=log)
        chief_waits(run_dir)
        assert len(containers_of(run_id)) == 4
        # py-spy is not on the PATH an ssh command gets, nor beside /usr/bin/python3: faulthandler
        on_path = shutil.which("py-spy", path="/usr/local/bin:/usr/bin:/bin")
        assert_stacks_show_the_script(run_id, "py-spy" if on_path else "faulthandler")
        release(tmp_path)
        assert up.wait(timeout=120) == 0, log.read_text()[-4000:]
        assert_autolog_and_success(read_events(run_dir))
        wait_for(lambda: nothing_left(run_id), 30, "no container and no process of the run")
    finally:
        if up is not None and up.poll() is None:
            up.kill()
        kill_run_processes(run_id)
        remove_containers(run_id)


@pytest.mark.timeout(180 + 60 + 38 + 20)
def test_a_killed_supervisor_leaves_no_container_after_the_orphan_grace(tmp_path: Path, docker_image: str) -> None:
    run_dir, run_id = tmp_path / "run", f"it-ct-orphan-{secrets.token_hex(2)}"
    try:
        up = cli("up", str(sleep_profile(tmp_path, docker_image, orphan_grace=3)), "--detach", "--run-dir",
                 str(run_dir), "--run-id", run_id, timeout=180, env=SECRET_ENV)
        assert up.returncode == 0, up.stdout + up.stderr
        wait_for(lambda: len(containers_of(run_id)) == 2, 60, "both containers")
        state = json.loads((run_dir / "state.json").read_text())
        os.kill(int(state["supervisor_pid"]), signal.SIGKILL)
        wait_for(lambda: nothing_left(run_id), 3 + 5 + 30, "no container of the run after the orphan grace")
        for slug in ("worker-0", "worker-1"):
            told = [e for e in read_events(run_dir / "hosts" / "box" / "tasks" / slug) if e["kind"] == "state"]
            assert told[-1]["state"] == "stopped" and "launcher lost" in told[-1]["reason"], told[-1]
    finally:
        kill_run_processes(run_id)
        remove_containers(run_id)


@pytest.mark.timeout(180 + 60 + 10 + 30 + 180 + 10 + 20)
def test_down_removes_the_containers_when_the_supervisor_and_the_agent_are_gone(
        tmp_path: Path, docker_image: str) -> None:
    """Only the label can find them: the task.json files that name each task's container are gone too."""
    run_dir, run_id = tmp_path / "run", f"it-ct-down-{secrets.token_hex(2)}"
    try:
        up = cli("up", str(sleep_profile(tmp_path, docker_image)), "--detach", "--run-dir", str(run_dir),
                 "--run-id", run_id, timeout=180, env=SECRET_ENV)
        assert up.returncode == 0, up.stdout + up.stderr
        wait_for(lambda: len(containers_of(run_id)) == 2, 60, "both containers")
        state = json.loads((run_dir / "state.json").read_text())
        os.kill(int(state["supervisor_pid"]), signal.SIGKILL)
        agent = int((run_dir / "hosts" / "box" / "agent.pid").read_text())
        os.kill(agent, signal.SIGKILL)
        wait_for(lambda: not Path(f"/proc/{agent}").exists() or "Z" in Path(f"/proc/{agent}/stat").read_text()
                 .split(")")[-1].split()[:1], 10, "the host agent gone")
        assert len(containers_of(run_id)) == 2  # the daemon keeps them: nothing else would stop them
        tasks = run_dir / "hosts" / "box" / "tasks"
        python = python_under(host_pid_of(tasks / "worker-1"))
        # the secret from the launcher's environment reaches the program, and no command line and no file
        assert f"API_TOKEN={SECRET}".encode() in Path(f"/proc/{python}/environ").read_bytes().split(b"\0")
        for pid in pids_with_run_id(run_id):  # the docker clients and the tasks
            assert SECRET.encode() not in Path(f"/proc/{pid}/cmdline").read_bytes(), pid
        holding = [str(p) for p in run_dir.rglob("*") if p.is_file() and SECRET.encode() in p.read_bytes()]
        assert holding == [] and (tasks / "worker-1" / "spec.json").exists()
        for task_json in tasks.glob("*/task.json"):  # what names each container: down must not need it
            task_json.unlink()
        down = cli("down", run_id, timeout=180)
        assert down.returncode == 0, down.stdout + down.stderr
        assert containers_of(run_id) == []
        wait_for(lambda: not pids_with_run_id(run_id), 10, "no process of the run")
    finally:
        kill_run_processes(run_id)
        remove_containers(run_id)


def test_check_names_the_host_and_the_missing_image(tmp_path: Path, docker_image: str) -> None:
    missing = "distlaunch-test:no-such-tag"
    profile = sleep_profile(tmp_path, missing, options={"pull": "never"})
    result = cli("check", str(profile), timeout=120, env=SECRET_ENV)
    assert result.returncode == 2, result.stdout + result.stderr
    lines = [ln for ln in result.stderr.splitlines() if missing in ln]
    assert len(lines) == 1 and "host box" in lines[0] and 'pull = "never"' in lines[0], result.stderr


def test_a_container_the_daemon_refuses_is_a_one_line_cause(tmp_path: Path, docker_image: str) -> None:
    run_dir, run_id = tmp_path / "run", f"it-ct-refused-{secrets.token_hex(2)}"
    profile = sleep_profile(tmp_path, docker_image, options={"options": ["--device", "/dev/distlaunch-none"]})
    try:
        up = cli("up", str(profile), "--no-tui", "--run-dir", str(run_dir), "--run-id", run_id, timeout=180,
                 env=SECRET_ENV)
        assert up.returncode == 1, up.stdout + up.stderr
        failed = [e for e in read_events(run_dir) if e["kind"] == "state" and e["state"] == "failed"]
        assert failed, up.stdout
        cause = failed[0]["cause"]
        assert cause.startswith("container did not start: ") and "/dev/distlaunch-none" in cause, cause
        assert "exit code 125" not in cause
        assert not any(e["kind"] == "state" and e["state"] == "restarting" for e in read_events(run_dir))
        wait_for(lambda: nothing_left(run_id), 30, "no container and no process of the run")
    finally:
        kill_run_processes(run_id)
        remove_containers(run_id)
