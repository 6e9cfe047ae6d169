"""The agent's `run` and `stop` verbs, driven as real processes from the real zipapp."""

from __future__ import annotations

import contextlib
import glob
import json
import os
import shutil
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from launcher.remote import agentpack

RUN_ID = "r-agent-test"


def wait_for(predicate, timeout: float, what: str, interval: float = 0.02):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(interval)
    raise AssertionError(f"timed out after {timeout:.1f} s waiting for {what}")


def read_events(task_dir: Path) -> list[dict]:
    path = task_dir / "events.jsonl"
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text().splitlines() if line]


def states(evs: list[dict]) -> list[str]:
    return [e["state"] for e in evs if e["kind"] == "state"]


def final_state(task_dir: Path) -> dict | None:
    evs = read_events(task_dir)
    finals = [e for e in evs if e["kind"] == "state" and e["state"] in ("succeeded", "failed", "stopped")]
    return finals[-1] if finals else None


def pid_alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


def group_members(pgid: int) -> list[int]:
    members = []
    for stat in glob.glob("/proc/[0-9]*/stat"):
        try:
            with open(stat) as f:
                fields = f.read().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if int(fields[2]) == pgid and fields[0] != "Z":
            members.append(int(stat.split("/")[2]))
    return members


class AgentHarness:
    """A host run dir in tmp_path and helpers to start agents on tasks in it."""

    def __init__(self, root: Path, pyz: Path, python: str = sys.executable) -> None:
        self.root = root
        self.pyz = pyz
        self.python = python
        self.procs: list[subprocess.Popen] = []

    def task(self, command: str, slug: str = "worker-0", **spec_fields) -> Path:
        task_dir = self.root / "tasks" / slug
        task_dir.mkdir(parents=True)
        spec = {"run": RUN_ID, "task": slug.replace("-", ":"), "host": "local", "incarnation": 0,
                "restarts": 0, "command": command, "workdir": str(self.root),
                "env": {"TF_CONFIG": json.dumps({"cluster": {"worker": ["localhost:1"]},
                                                 "task": {"type": "worker", "index": 0}})},
                "grace_seconds": 5, "orphan_grace_seconds": 60, "sample_interval": 1.0,
                "metrics": {}, "gpus": []}
        spec.update(spec_fields)
        (task_dir / "spec.json").write_text(json.dumps(spec))
        return task_dir

    def start(self, task_dir: Path) -> subprocess.Popen:
        env = dict(os.environ, DISTLAUNCH_RUN_ID=RUN_ID)
        with open(task_dir / "agent.log", "ab") as log:
            proc = subprocess.Popen([self.python, str(self.pyz), "run", "--task-dir", str(task_dir)],
                                    stdin=subprocess.DEVNULL, stdout=log, stderr=log, env=env,
                                    start_new_session=True)
        self.procs.append(proc)
        return proc

    def run_to_end(self, task_dir: Path, timeout: float = 20.0) -> list[dict]:
        proc = self.start(task_dir)
        assert proc.wait(timeout=timeout) == 0, (task_dir / "agent.log").read_text()
        return read_events(task_dir)

    def agent(self, *args: str, timeout: float = 30.0) -> dict:
        out = subprocess.run([self.python, str(self.pyz), *args], capture_output=True, text=True,
                             timeout=timeout, check=True)
        return json.loads(out.stdout)

    def cleanup(self) -> None:
        for proc in self.procs:
            if proc.poll() is None:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait(5)
        for pgid_file in self.root.glob("tasks/*/task.pgid"):
            with contextlib.suppress(ProcessLookupError, ValueError):
                os.killpg(int(pgid_file.read_text()), signal.SIGKILL)


def test_success_emits_starting_running_succeeded_and_pid_files(host):
    task_dir = host.task("echo hello")
    evs = host.run_to_end(task_dir)
    assert states(evs) == ["starting", "running", "succeeded"]
    running = next(e for e in evs if e["kind"] == "state" and e["state"] == "running")
    final = evs[-1]
    assert final["kind"] == "state" and final["exit_code"] == 0
    assert running["pid"] == int((task_dir / "task.pgid").read_text())
    assert running["host"] == "local" and running["run"] == RUN_ID and running["task"] == "worker:0"
    assert int((task_dir / "agent.pid").read_text()) == host.procs[0].pid
    assert [e["line"] for e in evs if e["kind"] == "log"] == ["hello"]


def test_failure_reports_exit_code_and_reason(host):
    final = host.run_to_end(host.task("echo bye; exit 3"))[-1]
    assert (final["state"], final["exit_code"], final["reason"]) == ("failed", 3, "exit code 3")


def test_killed_by_signal_is_128_plus_n(host):
    final = host.run_to_end(host.task("kill -KILL $$"))[-1]
    assert (final["state"], final["exit_code"], final["reason"]) == ("failed", 137, "killed by SIGKILL")


def test_restarts_from_spec_are_reported(host):
    evs = host.run_to_end(host.task("true", restarts=2, incarnation=2))
    assert {e["restarts"] for e in evs if e["kind"] == "state"} == {2}


def test_report_lines_become_metric_and_placement_events_and_are_not_logged(host):
    script = host.root / "report.py"
    script.write_text(textwrap.dedent("""
        import json
        print('@distlaunch ' + json.dumps({"kind": "metric", "step": 5, "loss": 0.5, "values": {"acc": 0.9}}))
        print('@distlaunch ' + json.dumps({"kind": "placement", "variables": [
            {"name": "w", "shape": [2], "dtype": "float32", "bytes": 8, "device": "/job:ps/task:0",
             "task": "ps:0"}]}))
        print('@distlaunch {not json')
        print('plain line')
    """))
    evs = host.run_to_end(host.task(f"{sys.executable} report.py"))
    metrics = [e for e in evs if e["kind"] == "metric"]
    assert [(m["step"], m["loss"], m["values"]) for m in metrics] == [(5, 0.5, {"acc": 0.9})]
    placements = [e for e in evs if e["kind"] == "placement"]
    assert placements[0]["variables"][0]["device"] == "/job:ps/task:0"
    logs = [e["line"] for e in evs if e["kind"] == "log"]
    assert not any(line.startswith("@distlaunch") for line in logs)
    assert logs[-1] == "plain line"
    assert len([line for line in logs if "malformed" in line]) == 1


def test_metrics_regexes_turn_plain_lines_into_metrics(host):
    task_dir = host.task("echo 'global step: 7 loss = 0.25'; echo 'nothing here'",
                         metrics={"step": r"global step: (\d+)", "loss": r"loss[ =:]+([-+0-9.eE]+)"})
    evs = host.run_to_end(task_dir)
    metrics = [e for e in evs if e["kind"] == "metric"]
    assert [(m["step"], m["loss"]) for m in metrics] == [(7, 0.25)]
    assert "global step: 7 loss = 0.25" in [e["line"] for e in evs if e["kind"] == "log"]


def test_stderr_lines_carry_stream_stderr(host):
    evs = host.run_to_end(host.task("echo out; echo err >&2"))
    streams = {e["line"]: e["stream"] for e in evs if e["kind"] == "log"}
    assert streams == {"out": "stdout", "err": "stderr"}


def test_task_environment_and_pythonpath(host):
    script = host.root / "env.py"
    script.write_text(textwrap.dedent("""
        import json, os, sys
        import launcher.events
        try:
            from launcher import report  # noqa: F401
            has_report = True
        except ImportError:
            has_report = False
        print(json.dumps({k: os.environ.get(k) for k in
              ("TF_CONFIG", "DISTLAUNCH_RUN_ID", "DISTLAUNCH_TASK", "PYTHONPATH", "EXTRA",
               "PYTHONUNBUFFERED")} | {"events_from": launcher.events.__file__, "report": has_report}))
    """))
    tf_config = json.dumps({"cluster": {"worker": ["localhost:5"]}, "task": {"type": "worker", "index": 0}})
    evs = host.run_to_end(host.task(f"{sys.executable} env.py",
                                    env={"TF_CONFIG": tf_config, "EXTRA": "x y",
                                         "PYTHONPATH": "/somewhere/else"}))
    seen = json.loads(next(e["line"] for e in evs if e["kind"] == "log"))
    assert seen["TF_CONFIG"] == tf_config
    assert seen["DISTLAUNCH_RUN_ID"] == RUN_ID and seen["DISTLAUNCH_TASK"] == "worker:0"
    assert seen["EXTRA"] == "x y" and seen["PYTHONUNBUFFERED"] == "1"
    # autolog's start-up hook first (its sitecustomize chains to any other), then the agent's modules
    assert seen["PYTHONPATH"] == f"{host.pyz}/distlaunch_site:{host.pyz}:/somewhere/else"
    assert seen["events_from"].startswith(str(host.pyz))
    launcher_dir = os.path.dirname(os.path.dirname(agentpack.__file__))
    assert seen["report"] == os.path.exists(os.path.join(launcher_dir, "report.py"))


def test_final_state_is_the_last_event_after_much_output(host):
    evs = host.run_to_end(host.task("seq 1 3000"))
    assert [e["line"] for e in evs if e["kind"] == "log"] == [str(i) for i in range(1, 3001)]
    assert evs[-1]["kind"] == "state" and evs[-1]["state"] == "succeeded"


def test_leftover_children_holding_the_pipes_are_killed_after_exit(host):
    task_dir = host.task("sh -c 'echo $$ > child.pid; exec sleep 120' & sleep 0.2; echo done")
    t0 = time.monotonic()
    evs = host.run_to_end(task_dir, timeout=15)
    assert time.monotonic() - t0 < 10
    assert evs[-1]["state"] == "succeeded"
    child = int((host.root / "child.pid").read_text())
    assert not pid_alive(child)


def test_an_escaped_daemon_holding_stdout_does_not_keep_the_agent_alive(host):
    # setsid leaves the task's process group, so the agent cannot kill it, and it keeps the pipe open
    task_dir = host.task("setsid sh -c 'echo $$ > escaped.pid; exec sleep 60' & sleep 0.2; echo done")
    try:
        t0 = time.monotonic()
        evs = host.run_to_end(task_dir, timeout=20)
        assert time.monotonic() - t0 < 12
        assert evs[-1]["state"] == "succeeded"
        assert "Fatal Python error" not in (task_dir / "agent.log").read_text()
    finally:
        escaped = host.root / "escaped.pid"
        if escaped.exists():
            os.kill(int(escaped.read_text()), signal.SIGKILL)


def test_overlong_lines_are_cut_and_carriage_returns_keep_the_last_redraw(host):
    script = host.root / "long.py"
    script.write_text(textwrap.dedent("""
        import sys
        sys.stdout.write("x" * (3 * 1024 * 1024) + "\\n")
        sys.stdout.write("after\\n")
        sys.stdout.write("step 1\\rstep 2\\rstep 3\\r\\n")
    """))
    evs = host.run_to_end(host.task(f"{sys.executable} long.py"))
    logs = [e["line"] for e in evs if e["kind"] == "log"]
    assert len(logs) == 3
    assert logs[0].startswith("xxx") and logs[0].endswith("[line truncated]")
    assert len(logs[0]) < 1024 * 1024 + 100
    assert logs[1:] == ["after", "step 3"]


def _stubborn_task(host, grace_seconds):
    """A running task that ignores SIGTERM and has a grandchild: (task dir, agent, grandchild pid, pgid)."""
    task_dir = host.task("trap '' TERM; sh -c 'echo $$ > grandchild.pid; exec sleep 120' & sleep 120",
                         grace_seconds=grace_seconds)
    agent = host.start(task_dir)
    wait_for(lambda: (host.root / "grandchild.pid").exists() and "running" in states(read_events(task_dir)),
             30, "the task to run")
    return task_dir, agent, int((host.root / "grandchild.pid").read_text()), int((task_dir / "task.pgid").read_text())


def test_stop_verb_kills_a_task_that_ignores_sigterm_and_its_grandchild(host):
    task_dir, agent, grandchild, pgid = _stubborn_task(host, grace_seconds=30)
    t0 = time.monotonic()
    result = host.agent("stop", "--task-dir", str(task_dir), "--grace", "1")
    elapsed = time.monotonic() - t0
    # the stop verb's grace reaches the agent via SIGTERM only; the agent uses the spec's grace
    # (30 s) so the stop verb SIGKILLs the group after its own grace + 5 s
    assert result["stopped"] is True and result["agent_was_running"] is True
    assert elapsed < 15
    assert agent.wait(5) is not None
    assert not pid_alive(grandchild)
    assert group_members(pgid) == []
    final = final_state(task_dir)
    assert final is not None and final["state"] == "stopped"
    assert states(read_events(task_dir)).count("stopped") == 1


def test_sigterm_to_agent_uses_spec_grace_then_sigkills_the_group(host):
    task_dir, agent, grandchild, pgid = _stubborn_task(host, grace_seconds=1)
    t0 = time.monotonic()
    agent.send_signal(signal.SIGTERM)
    assert agent.wait(15) == 0
    assert 0.9 <= time.monotonic() - t0 < 10
    final = final_state(task_dir)
    assert final is not None
    assert (final["state"], final["exit_code"], final["reason"]) == ("stopped", 137, "stopped on request")
    assert read_events(task_dir)[-1] == final
    assert not pid_alive(grandchild) and group_members(pgid) == []


def test_a_task_that_honours_sigterm_is_stopped_with_143(host):
    task_dir = host.task("exec sleep 120")
    agent = host.start(task_dir)
    wait_for(lambda: "running" in states(read_events(task_dir)), 30, "running")
    result = host.agent("stop", "--task-dir", str(task_dir))
    assert result["stopped"] is True and result["agent_killed"] is False
    assert agent.wait(5) == 0
    final = final_state(task_dir)
    assert final is not None and (final["state"], final["exit_code"]) == ("stopped", 143)


def test_stop_does_not_trust_a_reused_agent_pid_but_still_cleans_the_group(host):
    task_dir = host.task("sleep 120")
    stranger = subprocess.Popen(["sleep", "120"], start_new_session=True)
    task = subprocess.Popen(["sh", "-c", "sleep 120 & sleep 120"], start_new_session=True,
                            env=dict(os.environ, DISTLAUNCH_RUN_ID=RUN_ID))
    host.procs += [stranger, task]
    (task_dir / "agent.pid").write_text(f"{stranger.pid}\n")
    (task_dir / "task.pgid").write_text(f"{task.pid}\n")
    wait_for(lambda: len(group_members(task.pid)) >= 2, 5, "the task's child")
    result = host.agent("stop", "--task-dir", str(task_dir), "--grace", "1")
    assert result["agent_was_running"] is False and result["group_killed"] is True
    assert task.wait(5) == -signal.SIGKILL
    assert group_members(task.pid) == []
    assert stranger.poll() is None


def test_orphaned_task_is_stopped_when_no_launcher_touches_the_lease(host):
    task_dir = host.task("exec sleep 120", orphan_grace_seconds=2)
    t0 = time.monotonic()
    agent = host.start(task_dir)
    final = wait_for(lambda: final_state(task_dir), 10, "the orphaned task to be stopped")
    elapsed = time.monotonic() - t0
    assert 2.0 <= elapsed < 6.0
    assert final["state"] == "stopped" and "launcher lost" in final["reason"]
    assert agent.wait(5) == 0


def test_lease_touches_keep_the_task_alive(host):
    task_dir = host.task("exec sleep 120", orphan_grace_seconds=1)
    agent = host.start(task_dir)
    lease = host.root / "lease"
    lease.touch()
    # the agent handles SIGTERM once it runs its task; on a loaded machine that can take seconds
    wait_for(lambda: "running" in states(read_events(task_dir)), 30, "the task to run")
    deadline = time.monotonic() + 3.0
    while time.monotonic() < deadline:
        lease.touch()
        assert final_state(task_dir) is None
        time.sleep(0.2)
    agent.send_signal(signal.SIGTERM)
    assert agent.wait(10) == 0
    assert final_state(task_dir)["reason"] == "stopped on request"


def test_workdir_that_does_not_exist_fails_with_a_reason(host):
    final = host.run_to_end(host.task("true", workdir="/nonexistent/dir"))[-1]
    assert final["state"] == "failed" and "could not start" in final["reason"]


def _zipapp_with(tmp_path: Path, sampling_source: str | None) -> Path:
    files = agentpack.agent_sources()
    files.pop("launcher/agent/sampling.py", None)
    if sampling_source is not None:
        files["launcher/agent/sampling.py"] = sampling_source.encode()
    path = tmp_path / "custom-agent.pyz"
    path.write_bytes(agentpack.pack_zipapp(files))
    return path


# Stands in for launcher/agent/sampling.py at its agreed seam: TaskSampler(pid, gpu_indices).sample().
SAMPLER_STUB = """
class HostSampler:
    def sample(self, tasks):
        return {key: {"cpu_percent": 12.5, "rss_bytes": pid, "source": "stub",
                      "gpus": [{"index": i, "util_percent": 1.0, "mem_used_bytes": 2, "mem_total_bytes": 3}
                               for i in gpus]}
                for key, (pid, gpus) in tasks.items()}
"""


def test_samples_come_from_the_sampler_every_interval(tmp_path):
    harness = AgentHarness(tmp_path / "host", _zipapp_with(tmp_path, SAMPLER_STUB))
    harness.root.mkdir()
    try:
        task_dir = harness.task("sleep 1", sample_interval=0.1, gpus=[0, 1])
        evs = harness.run_to_end(task_dir)
    finally:
        harness.cleanup()
    samples = [e for e in evs if e["kind"] == "sample"]
    assert len(samples) >= 3
    running = next(e for e in evs if e["kind"] == "state" and e["state"] == "running")
    assert samples[0]["rss_bytes"] == running["pid"] and samples[0]["source"] == "stub"
    assert [g["index"] for g in samples[0]["gpus"]] == [0, 1]
    assert evs[-1]["kind"] == "state"


def test_no_sampling_module_means_no_sample_events(tmp_path):
    harness = AgentHarness(tmp_path / "host", _zipapp_with(tmp_path, None))
    harness.root.mkdir()
    try:
        evs = harness.run_to_end(harness.task("sleep 0.5", sample_interval=0.1))
    finally:
        harness.cleanup()
    assert [e for e in evs if e["kind"] == "sample"] == []
    assert evs[-1]["state"] == "succeeded"


def _old_python() -> str | None:
    pyenv = sorted(glob.glob(os.path.expanduser("~/.pyenv/versions/3.9*/bin/python")))
    for candidate in ("python3.9", *pyenv):
        found = shutil.which(candidate)
        if found:
            try:
                subprocess.run([found, "-c", "import sys; assert sys.version_info[:2] == (3, 9)"],
                               check=True, capture_output=True, timeout=10)
            except (subprocess.SubprocessError, OSError):
                continue
            return found
    return None


def test_agent_runs_on_python_3_9(tmp_path, pyz):
    python = _old_python()
    if python is None:
        pytest.skip("no Python 3.9 interpreter on this machine")
    harness = AgentHarness(tmp_path / "host", pyz, python=python)
    harness.root.mkdir()
    try:
        command = "echo '@distlaunch {\"kind\": \"metric\", \"step\": 1}'; exit 4"
        evs = harness.run_to_end(harness.task(command))
    finally:
        harness.cleanup()
    assert [e["step"] for e in evs if e["kind"] == "metric"] == [1]
    assert evs[-1]["exit_code"] == 4
    assert harness.agent("preflight")["python"].startswith("3.9.")
    assert len(harness.agent("ports", "--bind", "127.0.0.1", "--pick", "2")["picked"]) == 2
    assert harness.agent("sweep", "--run-id", "no-such-run-" + str(os.getpid())) == {"left": []}
    follow = subprocess.run([python, str(pyz), "follow", "--run-dir", str(harness.root)],
                            input=b"", capture_output=True, timeout=10)
    assert follow.returncode == 0 and b"Traceback" not in follow.stderr


@pytest.mark.skipif(not (Path(agentpack.__file__).parent.parent / "agent" / "sampling.py").exists(),
                    reason="launcher/agent/sampling.py is not in this tree")
def test_the_packed_sampler_measures_a_busy_task(host):
    script = host.root / "busy.py"
    script.write_text("import time\nend = time.time() + 1.5\nwhile time.time() < end:\n    pass\n")
    evs = host.run_to_end(host.task(f"{sys.executable} busy.py", sample_interval=0.3))
    samples = [e for e in evs if e["kind"] == "sample"]
    assert len(samples) >= 2
    assert max(s["cpu_percent"] or 0 for s in samples) > 20
    assert samples[0]["rss_bytes"] > 1_000_000, samples
    assert all(s["source"] for s in samples)


@pytest.mark.skipif(not (Path(agentpack.__file__).parent.parent / "report.py").exists(),
                    reason="launcher/report.py is not in this tree")
def test_report_module_from_the_zipapp_reaches_the_agent(host):
    script = host.root / "train.py"
    script.write_text(textwrap.dedent("""
        from launcher import report
        report.configure(min_interval=0)
        report.report(step=3, loss=1.5, acc=0.75)
        report.flush()
    """))
    evs = host.run_to_end(host.task(f"{sys.executable} train.py"))
    metrics = [e for e in evs if e["kind"] == "metric"]
    assert [(m["step"], m["loss"], m["values"]) for m in metrics] == [(3, 1.5, {"acc": 0.75})]
    assert not [e for e in evs if e["kind"] == "log" and "@distlaunch" in e["line"]]


def _seqs(evs: list[dict]) -> list[int]:
    return [e["seq"] for e in evs]


def test_event_numbers_run_gap_free_across_incarnations(host):
    task_dir = host.task("echo first")
    first = host.run_to_end(task_dir)
    assert _seqs(first) == list(range(len(first)))
    spec = json.loads((task_dir / "spec.json").read_text())
    spec.update(command="echo second", restarts=1, incarnation=1)
    (task_dir / "spec.json").write_text(json.dumps(spec))
    both = host.run_to_end(task_dir)
    assert len(both) > len(first) and _seqs(both) == list(range(len(both)))
    assert (task_dir / "events.jsonl").stat().st_mode & 0o777 == 0o600  # private, whatever the umask


WAITS_FOR_A_FULL_DISK = """
import os, time
def wait_for(name):
    deadline = time.monotonic() + 60
    while not os.path.exists(name) and time.monotonic() < deadline:
        time.sleep(0.02)
for i in range(5):
    print("before", i, flush=True)
wait_for("full")
for i in range(100):  # more than the event file's last page holds
    print("while full", i, flush=True)
wait_for("go")
for i in range(5):
    print("after", i, flush=True)
"""


def test_a_full_host_disk_leaves_a_numbered_gap_the_task_runs_on_and_the_loss_is_told(tmp_path, pyz):
    if os.geteuid() != 0:
        pytest.skip("needs root to mount a tmpfs")
    mnt = tmp_path / "tiny"
    mnt.mkdir()
    subprocess.run(["mount", "-t", "tmpfs", "-o", "size=512k", "tmpfs", str(mnt)], check=True)
    harness = AgentHarness(mnt, pyz)
    agent_err = tmp_path / "agent.err"  # off the full disk, so the test can read what the agent says
    try:
        (mnt / "task.py").write_text(WAITS_FOR_A_FULL_DISK)
        task_dir = harness.task(f"{sys.executable} task.py", sample_interval=60.0)
        with agent_err.open("wb") as err:
            proc = subprocess.Popen([sys.executable, str(pyz), "run", "--task-dir", str(task_dir)],
                                    stdin=subprocess.DEVNULL, stdout=err, stderr=err, start_new_session=True,
                                    env=dict(os.environ, DISTLAUNCH_RUN_ID=RUN_ID))
        harness.procs.append(proc)
        wait_for(lambda: any(e.get("line") == "before 4" for e in read_events(task_dir)), 30, "the first lines")
        with (mnt / "filler").open("wb", buffering=0) as fh, contextlib.suppress(OSError):
            while True:
                fh.write(b"x" * 65536)
        (mnt / "full").touch()  # no blocks needed
        wait_for(lambda: b"cannot write events" in agent_err.read_bytes(), 30, "the agent to hit the full disk")
        (mnt / "filler").unlink()
        (mnt / "go").touch()
        assert proc.wait(timeout=30) == 0, agent_err.read_text()
        evs = read_events(task_dir)
    finally:
        harness.cleanup()
        subprocess.run(["umount", "-l", str(mnt)], check=False)
    lines = [e["line"] for e in evs if e["kind"] == "log"]
    assert [ln for ln in lines if ln.startswith(("before", "after"))] == \
        [f"before {i}" for i in range(5)] + [f"after {i}" for i in range(5)]
    told = [ln for ln in lines if "could not be written" in ln]
    assert len(told) == 1 and "No space left on device" in told[0], lines
    lost = int(told[0].split("distlaunch agent: ")[1].split(" ")[0])
    seqs = _seqs(evs)
    assert seqs == sorted(seqs) and seqs[-1] - seqs[0] + 1 == len(seqs) + lost and lost >= 1
    assert evs[-1]["kind"] == "state" and evs[-1]["state"] == "succeeded"


def test_samples_carry_the_whole_machines_cpu_and_memory(host):
    task_dir = host.task(f"{sys.executable} -c 'import time; time.sleep(1.5)'", sample_interval=0.3)
    samples = [e for e in host.run_to_end(task_dir) if e["kind"] == "sample"]
    machine = [s["host"] for s in samples if s.get("host")]
    assert machine and all(m["mem_total_bytes"] > m["mem_used_bytes"] > 0 and m["cpus"] >= 1 for m in machine)
    # the host agent's sampling loop: the process state too (the `run` verb's own copy had dropped it)
    assert samples and all(s.get("proc_state") for s in samples), samples
