"""A task's container against its runtime's client: stops with the grace when no agent runs the task,
removal confirmed before the final event, a stop that comes before the container exists, the
sweep's runtimes, the image probe's container, the host pid's polling.

The runtime's client is a shell script named docker (or podman) first on the PATH that logs its
arguments and answers as each test says: what the agent asks the runtime and in which order is
the point here, and a unit test must not need (or disturb) a Docker daemon;
tests/integration/test_containers.py runs the same paths against the real one.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import threading
import time
from pathlib import Path

import pytest

from launcher import events
from launcher.agent import clients, containercheck, taskcontainer
from launcher.agent.output import EventWriter
from launcher.agent.runner import TaskRunner
from launcher.agent.spec import AgentSpec

RUN = "r1"


def fake_client(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, name: str = "docker", **answers: str) -> Path:
    """``name`` on the PATH: logs ``$*`` to the returned file, then runs ``answers[subcommand]``
    (``container`` for ``container inspect``; anything not given exits 0)."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir(exist_ok=True)
    log = tmp_path / f"{name}.log"
    cases = "".join(f"  {verb}) {script} ;;\n" for verb, script in answers.items())
    script = bin_dir / name
    script.write_text(f'#!/bin/sh\necho "$*" >> {log}\ncase "$1" in\n{cases}  *) exit 0 ;;\nesac\n')
    script.chmod(0o755)
    if not os.environ.get("PATH", "").startswith(f"{bin_dir}:"):
        monkeypatch.setenv("PATH", f"{bin_dir}:{os.environ.get('PATH', '')}")
    return log


def logged(log: Path) -> list[str]:
    return log.read_text().splitlines() if log.exists() else []


def task_dir_with(tmp_path: Path, slug: str = "worker-0", grace: float = 3, **task_info: object) -> Path:
    task_dir = tmp_path / "run" / "tasks" / slug
    task_dir.mkdir(parents=True)
    spec = {"run": RUN, "task": slug.replace("-", ":"), "command": "python3 t.py", "workdir": str(tmp_path),
            "grace_seconds": grace, "container": {"image": "img"}}
    (task_dir / "spec.json").write_text(json.dumps(spec))
    if task_info:
        (task_dir / "task.json").write_text(json.dumps(task_info))
    return task_dir


def runner_for(tmp_path: Path, grace: float = 2) -> tuple[TaskRunner, Path]:
    task_dir = tmp_path / "run" / "tasks" / "worker-0"
    task_dir.mkdir(parents=True)
    spec = AgentSpec(run=RUN, task="worker:0", command="python3 t.py", workdir=str(tmp_path),
                     grace_seconds=grace, container={"image": "img"})
    events_path = task_dir / "events.jsonl"
    return TaskRunner(str(task_dir), spec, EventWriter(str(events_path)), set()), events_path


def final_of(events_path: Path) -> dict:
    states = [json.loads(line) for line in events_path.read_text().splitlines()]
    states = [e for e in states if e["kind"] == "state"]
    assert states and states[-1]["state"] in events.FINAL_TASK_STATES, states
    return states[-1]


@pytest.fixture
def our_group() -> object:
    """A live process group carrying the run id, as a task's client's group would."""
    proc = subprocess.Popen(["sleep", "120"], start_new_session=True, env={**os.environ, "DISTLAUNCH_RUN_ID": RUN})
    yield proc
    if proc.poll() is None:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(5)


def test_a_task_stopped_with_no_agent_gets_the_runtimes_stop_with_its_grace_then_removal(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, our_group: subprocess.Popen[bytes]) -> None:
    """Before: its client's group was SIGKILLed and the container `rm -f`ed (SIGKILL), no grace."""
    alive = f"kill -0 -{our_group.pid} 2>/dev/null && echo client-alive >> {tmp_path / 'docker.log'}"
    log = fake_client(tmp_path, monkeypatch, stop=alive)
    task_dir = task_dir_with(tmp_path, pid=our_group.pid, container="dl-r1-worker-0-0")
    (task_dir / "task.pgid").write_text(f"{our_group.pid}\n")
    answer = clients.stop_without_agent(str(task_dir), None)
    assert logged(log) == ["stop -t 3 dl-r1-worker-0-0", "client-alive", "rm -f dl-r1-worker-0-0"]
    assert answer["group_killed"] is True and our_group.wait(5) == -signal.SIGKILL


def test_the_stop_verb_without_an_agent_stops_all_containers_at_once(tmp_path: Path,
                                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    """The graces run side by side (one `docker stop` for all), not one after the other."""
    log = fake_client(tmp_path, monkeypatch)
    for slug in ("worker-0", "worker-1"):
        task_dir_with(tmp_path, slug, grace=4, pid=2**22 + 1, container=f"dl-r1-{slug}-0")
    task_dir_with(tmp_path, "ps-0")  # never started: no task.json, nothing to stop
    clients.cmd_stop(str(tmp_path / "run"), ["worker-0", "worker-1", "ps-0"], 2.0)
    assert logged(log) == ["stop -t 2 dl-r1-worker-0-0 dl-r1-worker-1-0", "rm -f dl-r1-worker-0-0 dl-r1-worker-1-0"]


def test_a_containers_end_removes_it_and_confirms_it_gone_before_the_final_event(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The final event may restart the task: its next container must not meet this one (ports).
    Before: the final event came first, then one `rm -f`, unconfirmed."""
    runner, events_path = runner_for(tmp_path)
    seen = tmp_path / "inspected"
    log = fake_client(tmp_path, monkeypatch, run="exit 3", rm=f"cp {events_path} {tmp_path / 'at-rm.jsonl'}",
                      # the first look still finds it (the daemon's own --rm in progress), the next not
                      container=f"[ -e {seen} ] && exit 1; touch {seen}; exit 0")
    assert runner.start() is not None
    runner.wait()
    name = "dl-r1-worker-0-0"
    removal = [line for line in logged(log) if line.startswith(("rm ", "container "))]
    assert removal == [f"rm -f {name}", f"container inspect --format {{{{.Id}}}} {name}"] * 2
    at_rm = [json.loads(line) for line in (tmp_path / "at-rm.jsonl").read_text().splitlines()]
    assert not [e for e in at_rm if e["kind"] == "state" and e["state"] in events.FINAL_TASK_STATES]
    final = final_of(events_path)
    assert (final["state"], final["exit_code"]) == ("failed", 3)


def test_a_program_that_exits_125_itself_is_an_ordinary_failure(tmp_path: Path,
                                                                monkeypatch: pytest.MonkeyPatch) -> None:
    """Only the runtime's own error line makes 125 "container did not start" (permanent: no restart)."""
    runner, events_path = runner_for(tmp_path)
    fake_client(tmp_path, monkeypatch, run='echo "loss diverged, giving up" >&2; exit 125', container="exit 1")
    runner.start()
    runner.wait()
    final = final_of(events_path)
    assert (final["state"], final["exit_code"]) == ("failed", 125)
    assert not final.get("permanent") and "container did not start" not in final["reason"], final


def test_a_stop_before_the_container_exists_ends_the_task_stopped_at_once(tmp_path: Path,
                                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    """The client is still creating the container: the runtime's stop finds none, so the client's
    group gets SIGTERM (docker run ends on it before it starts one); nothing waits for a kill."""
    runner, events_path = runner_for(tmp_path, grace=2)
    ready = tmp_path / "client-started"
    log = fake_client(tmp_path, monkeypatch, run=f"trap 'exit 143' TERM; touch {ready}; sleep 30 & wait",
                      stop='echo "Error response from daemon: No such container: $4" >&2; exit 1',
                      kill="exit 1", container="exit 1")
    runner.start()
    waiter = threading.Thread(target=runner.wait)
    waiter.start()
    deadline = time.monotonic() + 10
    while not ready.exists() and time.monotonic() < deadline:
        time.sleep(0.02)
    t0 = time.monotonic()
    runner.request_stop("stopped on request")
    waiter.join(15)
    assert not waiter.is_alive()
    assert time.monotonic() - t0 < taskcontainer.RUNTIME_SECONDS  # no `docker kill` round: the client ended
    final = final_of(events_path)
    assert (final["state"], final["exit_code"]) == ("stopped", 143), final
    lines = logged(log)
    assert "stop -t 2 dl-r1-worker-0-0" in lines and "rm -f dl-r1-worker-0-0" in lines
    assert not [line for line in lines if line.startswith("kill ")]


def test_the_host_pid_is_looked_for_as_long_as_the_task_runs_less_and_less_often(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """Before: twice a second per task, and given up after 120 s (no sampling, stacks or OOM evidence)."""
    answers = iter([None] * 40 + [4242])
    waits: list[float] = []
    monkeypatch.setattr(taskcontainer, "host_pid", lambda container, name: next(answers))
    monkeypatch.setattr(taskcontainer, "pause", waits.append)
    spec = taskcontainer.rt.ContainerSpec(image="img")
    assert taskcontainer.learn_host_pid(spec, "n", lambda: True) == 4242
    assert waits[:6] == [0.2, 0.4, 0.8, 1.6, 3.2, 5.0] and max(waits) == 5.0
    assert sum(waits) > 120
    assert taskcontainer.learn_host_pid(spec, "n", lambda: False) is None


def test_the_sweep_asks_the_runtimes_on_the_path_too(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The run's task dirs may be gone (or name no runtime): docker and podman on the PATH are
    asked all the same; one that does not answer (a client without its daemon) is no leftover."""
    listed = tmp_path / "listed"
    docker = fake_client(tmp_path, monkeypatch, ps=f"[ -e {listed} ] && exit 0; touch {listed}; echo dl-r1-ps-0-0")
    fake_client(tmp_path, monkeypatch, "podman", ps='echo "Error: cannot connect to Podman" >&2; exit 125')
    (tmp_path / "run").mkdir()
    assert taskcontainer.sweep(str(tmp_path / "run"), RUN, kill_them=True) == []
    ps = f"ps -a --filter label=distlaunch.run={RUN} --format {{{{.Names}}}}"
    assert logged(docker) == [ps, "rm -f dl-r1-ps-0-0", ps]
    assert taskcontainer.SWEEP_SECONDS == 3 * taskcontainer.RUNTIME_SECONDS * 2


def test_a_runtime_the_specs_name_that_does_not_answer_is_reported(tmp_path: Path,
                                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    fake_client(tmp_path, monkeypatch, ps='echo "Cannot connect to the Docker daemon" >&2; exit 1')
    task_dir_with(tmp_path)
    left = taskcontainer.sweep(str(tmp_path / "run"), RUN, kill_them=True)
    assert left == [{"container": "?", "cmdline": "docker did not list the run's containers: Cannot connect to the "
                                                  "Docker daemon"}]


def test_the_tensorflow_probe_is_named_labelled_and_removed_when_it_does_not_answer(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Killing `docker run`'s client on the timeout leaves its container running; before, it had no
    name or label to remove it by."""
    log = fake_client(tmp_path, monkeypatch, version="echo 20.10.24", image="echo sha256:0123456789abcdef",
                      run="exec sleep 30")
    monkeypatch.setattr(containercheck, "TF_SECONDS", 0.5)
    answer = containercheck.check_image({"container": {"image": "img"}, "python": "python3",
                                         "tensorflow": "metadata", "run": RUN})
    assert answer["tf_error"] == "no answer within 0.5 s" and answer["digest"] == "0123456789ab"
    run = next(line.split() for line in logged(log) if line.startswith("run "))
    name = run[run.index("--name") + 1]
    assert name.startswith(f"dl-{RUN}-preflight-{os.getpid()}-") and "--init" in run
    assert f"distlaunch.run={RUN}" in run and "distlaunch.task=preflight" in run
    assert logged(log)[-1] == f"rm -f {name}"
