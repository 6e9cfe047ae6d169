"""The example scripts, run by hand as real TensorFlow processes on localhost (no launcher).

Each TensorFlow task is its own process with its own TF_CONFIG, as a user would start them
from examples/README.md. Every process runs in its own session and is killed by process group
afterwards, so nothing outlives a test.
"""

from __future__ import annotations

import json
import math
import os
import re
import signal
import socket
import subprocess
import sys
from collections.abc import Iterator
from contextlib import suppress
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

REPO = Path(__file__).resolve().parents[2]
EXAMPLES = REPO / "examples"
REPORT_PREFIX = "@distlaunch "
PLAIN_METRIC = re.compile(r"global step: (\d+), loss = ([-+0-9.eE]+|nan|inf)")
PLAIN_PLACEMENT = re.compile(r"^placement: (\S+) \S+ on /job:(\w+)/replica:\d+/task:(\d+)/")
CHIEF_TIMEOUT = 150.0


@dataclass
class Output:
    """What a training script said: metric (step, loss) pairs and placement entries."""

    metrics: list[tuple[int, float | None]]
    placement: list[dict[str, Any]]
    text: str


def parse_output(text: str) -> Output:
    """Reads ``@distlaunch`` report lines, or the plain lines scripts print without report.py."""
    metrics: list[tuple[int, float | None]] = []
    placement: list[dict[str, Any]] = []
    for line in text.splitlines():
        if line.startswith(REPORT_PREFIX):
            message = json.loads(line[len(REPORT_PREFIX):])
            if message.get("kind") == "metric" and message.get("step") is not None:
                loss = message.get("loss")
                metrics.append((int(message["step"]), None if loss is None else float(loss)))
            elif message.get("kind") == "placement":
                placement.extend(message["variables"])
        elif match := PLAIN_METRIC.search(line):
            metrics.append((int(match.group(1)), float(match.group(2))))
        elif match := PLAIN_PLACEMENT.match(line):
            name = match.group(1).rsplit(":", 1)[0]
            placement.append({"name": name, "task": f"{match.group(2)}:{match.group(3)}"})
    return Output(metrics, placement, text)


def free_ports(count: int) -> list[int]:
    """Ports the kernel just handed out for port 0: free now, and distinct."""
    sockets = []
    try:
        for _ in range(count):
            sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            sock.bind(("127.0.0.1", 0))
            sockets.append(sock)
        return [sock.getsockname()[1] for sock in sockets]
    finally:
        for sock in sockets:
            sock.close()


def cluster_spec(**counts: int) -> dict[str, list[str]]:
    ports = iter(free_ports(sum(counts.values())))
    return {role: [f"localhost:{next(ports)}" for _ in range(n)] for role, n in counts.items() if n}


def tf_config(cluster: dict[str, list[str]], task_type: str, index: int) -> str:
    return json.dumps({"cluster": cluster, "task": {"type": task_type, "index": index}})


class Processes:
    """Starts task processes in their own sessions; kills every group on close."""

    def __init__(self, log_dir: Path) -> None:
        self.log_dir = log_dir
        self.started: list[subprocess.Popen[str]] = []
        self.logs: list[Any] = []

    def start(self, script: str, config: str | None, args: list[str], name: str,
              capture: bool = False) -> subprocess.Popen[str]:
        env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2", PYTHONPATH=str(REPO))
        env.pop("TF_CONFIG", None)
        if config is not None:
            env["TF_CONFIG"] = config
        log = open(self.log_dir / f"{name}.log", "w")  # noqa: SIM115 - closed in close()
        self.logs.append(log)
        proc = subprocess.Popen([sys.executable, str(EXAMPLES / script), *args], cwd=REPO, env=env,
                                stdout=subprocess.PIPE if capture else log,
                                stderr=log if capture else subprocess.STDOUT,
                                text=True, start_new_session=True)
        self.started.append(proc)
        return proc

    def run_to_end(self, script: str, config: str | None, args: list[str], name: str,
                   timeout: float = CHIEF_TIMEOUT) -> tuple[int, Output]:
        proc = self.start(script, config, args, name, capture=True)
        try:
            stdout, _ = proc.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            self.kill(proc)
            pytest.fail(f"{name} did not finish within {timeout} s; see {self.log_dir}")
        return proc.returncode, parse_output(stdout)

    @staticmethod
    def kill(proc: subprocess.Popen[str]) -> None:
        with suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(timeout=10)

    def close(self) -> None:
        for proc in self.started:
            self.kill(proc)
            if proc.stdout is not None:
                proc.stdout.close()
        for log in self.logs:
            log.close()


@pytest.fixture
def processes(tmp_path: Path) -> Iterator[Processes]:
    procs = Processes(tmp_path)
    try:
        yield procs
    finally:
        procs.close()


def start_servers(processes: Processes, cluster: dict[str, list[str]], script: str) -> None:
    for role in ("ps", "worker"):
        for index in range(len(cluster.get(role, []))):
            processes.start(script, tf_config(cluster, role, index), [], f"{role}-{index}")


def assert_training_progress(output: Output, first_step_at_least: int, last_step: int) -> None:
    steps = [step for step, _ in output.metrics]
    assert steps, f"no metric lines in:\n{output.text}"
    # Non-decreasing: a Keras epoch-end line may repeat the step of the batch before it.
    assert steps == sorted(steps) and len(set(steps)) > 1, steps
    assert steps[0] >= first_step_at_least, steps
    assert steps[-1] == last_step, steps
    # A restored chief first reports its resume step alone, without a loss.
    losses = [loss for _, loss in output.metrics if loss is not None]
    assert losses and all(math.isfinite(loss) for loss in losses), output.metrics


@pytest.mark.slow
@pytest.mark.timeout(400)
def test_ps_chief_trains_resumes_after_restart_and_reshards_over_two_ps(
        processes: Processes, tmp_path: Path) -> None:
    cluster = cluster_spec(chief=1, worker=1, ps=1)
    start_servers(processes, cluster, "ps_mnist.py")
    chief = tf_config(cluster, "chief", 0)
    checkpoints = tmp_path / "ckpt"
    common = ["--log-every", "20", "--checkpoint-every", "20", "--checkpoint-dir", str(checkpoints)]

    code, first = processes.run_to_end("ps_mnist.py", chief, ["--steps", "60", *common], "chief-first")
    assert code == 0, first.text
    assert_training_progress(first, first_step_at_least=1, last_step=60)
    assert "starting at step 0; training to step 60" in first.text.splitlines()
    assert first.placement, first.text
    assert {entry["task"] for entry in first.placement} == {"ps:0"}
    assert {"hidden/kernel", "output/bias", "global_step"} <= {entry["name"] for entry in first.placement}
    assert (checkpoints / "checkpoint").exists()

    # The chief alone is restarted against the same, still running ps and worker.
    code, second = processes.run_to_end("ps_mnist.py", chief, ["--steps", "80", *common], "chief-second")
    assert code == 0, second.text
    assert "restored" in second.text
    assert "resumed from step 60; training to step 80" in second.text.splitlines()
    assert_training_progress(second, first_step_at_least=60, last_step=80)

    # A new cluster with two ps tasks: the big kernel is now split over both, and training goes
    # on from the checkpoint written with one ps (weights re-sharded, global step kept).
    for proc in processes.started:
        processes.kill(proc)
    wider = cluster_spec(chief=1, worker=1, ps=2)
    start_servers(processes, wider, "ps_mnist.py")
    evaluator = processes.start("ps_mnist.py", tf_config(wider, "evaluator", 0), [], "evaluator")
    code, third = processes.run_to_end("ps_mnist.py", tf_config(wider, "chief", 0),
                                       ["--steps", "100", *common], "chief-two-ps")
    assert code == 0, third.text
    assert_training_progress(third, first_step_at_least=80, last_step=100)
    kernel_shards = {entry["name"]: entry["task"] for entry in third.placement
                     if entry["name"].startswith("hidden/kernel/part_")}
    assert set(kernel_shards.values()) == {"ps:0", "ps:1"}, third.placement
    assert {entry["task"] for entry in third.placement} == {"ps:0", "ps:1"}
    assert evaluator.wait(timeout=60) == 0

    # --train-seconds (make demo): a run trains that long more from the checkpoint, and says so first
    code, timed = processes.run_to_end("ps_mnist.py", tf_config(wider, "chief", 0),
                                       ["--steps", "1000000", "--train-seconds", "2", *common], "chief-timed")
    assert code == 0, timed.text
    assert "resumed from step 100; training for 2 s (at most to step 1000000)" in timed.text.splitlines()
    timed_steps = [step for step, _ in timed.metrics]
    assert timed_steps and 100 < timed_steps[-1] < 1_000_000, timed.text


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_mwms_keras_two_workers_both_report_steps(processes: Processes, tmp_path: Path) -> None:
    cluster = cluster_spec(worker=2)
    args = ["--epochs", "2", "--steps-per-epoch", "5", "--checkpoint-dir", str(tmp_path / "backup")]
    other = processes.start("mwms_keras.py", tf_config(cluster, "worker", 1), args, "worker-1",
                            capture=True)
    code, first = processes.run_to_end("mwms_keras.py", tf_config(cluster, "worker", 0), args, "worker-0")
    try:
        other_stdout, _ = other.communicate(timeout=60)
    except subprocess.TimeoutExpired:
        pytest.fail("worker:1 did not finish after worker:0")
    second = parse_output(other_stdout)
    assert code == 0, first.text
    assert other.returncode == 0, second.text
    for output in (first, second):
        assert_training_progress(output, first_step_at_least=1, last_step=10)
        assert "done" in output.text.splitlines()


def test_print_steps_prints_regex_friendly_lines_without_tensorflow() -> None:
    # -S: no site-packages, so the script provably needs neither TensorFlow nor distlaunch.
    proc = subprocess.run([sys.executable, "-S", "-I", str(EXAMPLES / "print_steps.py"), "--steps", "5",
                           "--sleep", "0"], capture_output=True, text=True, timeout=30, check=False)
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.splitlines()
    assert len(lines) == 5
    assert all(line.startswith("INFO: global step: ") for line in lines)
    output = parse_output(proc.stdout)
    assert [step for step, _ in output.metrics] == [1, 2, 3, 4, 5]
    losses = [loss for _, loss in output.metrics if loss is not None]
    assert len(losses) == 5 and losses == sorted(losses, reverse=True)
