"""A cause for every failure, from real processes: a MemoryError under `ulimit -v`, a SIGKILL from
outside, the kernel OOM killer in a memory cgroup of the test's own, a CUDA out-of-memory line; shown
in the state event, the report's root cause, `status` (text and --json) and the notify hook."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.integration.jobtools import (
    cli,
    kill_run_processes,
    local_ps_profile,
    pids_with_run_id,
    read_events,
    start_cli,
    wait_for_event,
)
from tests.profiles import build_profile

OOM_SCRIPT = "import sys\n# a list of 2 GiB under `ulimit -v` 1 GiB\nhog = bytearray(2 * 1024 ** 3)\n"


def one_task_profile(tmp: Path, command: str, *, setup: list[str] | None = None, top: str = "",
                     notify: str = "") -> Path:
    return build_profile(tmp / "p.toml", name="it-causes", strategy="custom", top="sample_interval = 0.2\n" + top,
                         command=command, workdir=tmp, restart="never", grace=2,
                         defaults={"setup": setup}, roles={"worker": {}},
                         notify={"command": notify} if notify else None)


def failed_state(events: list[dict[str, Any]], task: str = "worker:0") -> dict[str, Any]:
    return next(e for e in events if e["kind"] == "state" and e["task"] == task and e["state"] == "failed")


def up_failing(tmp: Path, profile: Path, run_id: str) -> tuple[str, dict[str, Any]]:
    """Run a one-task job that fails; its `up` output and worker:0's failed state event."""
    run_dir = tmp / "run"
    try:
        up = cli("up", str(profile), "--no-tui", "--run-dir", str(run_dir), "--run-id", run_id, timeout=120)
    finally:
        kill_run_processes(run_id)
    assert up.returncode == 1, up.stdout[-2000:] + up.stderr[-2000:]
    return up.stdout, failed_state(read_events(run_dir))


def test_a_memory_error_is_named_with_the_users_line_everywhere(tmp_path: Path) -> None:
    (tmp_path / "oom.py").write_text(OOM_SCRIPT)
    seen = tmp_path / "seen"
    seen.mkdir()
    profile = one_task_profile(tmp_path, "{python} oom.py", setup=["ulimit -v 1048576"],
                               notify=f'echo "$DISTLAUNCH_CAUSE" > {seen}/"$DISTLAUNCH_EVENT"')
    out, failed = up_failing(tmp_path, profile, "it-cause-memerr")
    assert failed["cause"] == "MemoryError at oom.py:3"
    assert "root cause: worker:0 failed first (exit code 1: MemoryError at oom.py:3)" in out
    assert "worker:0     failed (on local, exit 1, exit code 1): MemoryError at oom.py:3" in out  # as it happens
    run_dir = tmp_path / "run"
    status = cli("status", str(run_dir))
    assert "worker:0 failed: MemoryError at oom.py:3" in status.stdout
    assert "root cause: worker:0 failed first (exit code 1: MemoryError at oom.py:3)" in status.stdout
    summary = json.loads(cli("status", str(run_dir), "--json").stdout)
    assert summary["tasks"]["worker:0"]["cause"] == "MemoryError at oom.py:3"
    assert (seen / "task_failed").read_text().strip() == "MemoryError at oom.py:3"
    assert (seen / "job_ended").read_text().strip() == "worker:0 failed first (exit code 1: MemoryError at oom.py:3)"


def test_a_sigkill_from_outside_is_not_blamed_on_distlaunch(tmp_path: Path) -> None:
    (tmp_path / "sleepy.py").write_text("import time\nprint('up', flush=True)\ntime.sleep(600)\n")
    profile = one_task_profile(tmp_path, "{python} sleepy.py")
    run_dir, run_id = tmp_path / "run", "it-cause-sigkill"
    proc = start_cli("up", str(profile), "--no-tui", "--run-dir", str(run_dir), "--run-id", run_id,
                     log=tmp_path / "up.log")
    try:
        wait_for_event(run_dir, lambda e: e["kind"] == "log" and e.get("line") == "up", 60, "the task's output")
        running = wait_for_event(run_dir, lambda e: e["kind"] == "state" and e["state"] == "running", 5, "running")
        os.killpg(running["pid"], signal.SIGKILL)  # the task's process group: its wrapper and its Python
        assert proc.wait(timeout=60) == 1
    finally:
        kill_run_processes(run_id)
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
    failed = failed_state(read_events(run_dir))
    assert (failed["signal"], failed["oom_kill"]) == ("SIGKILL", False)
    assert failed["cause"] == "killed by SIGKILL (not by distlaunch)"
    assert "root cause: worker:0 failed first (killed by SIGKILL (not by distlaunch))" in \
        (tmp_path / "up.log").read_text()


def test_a_cuda_out_of_memory_line_is_told_as_gpu_out_of_memory(tmp_path: Path) -> None:
    (tmp_path / "cuda.py").write_text(
        "import sys\nprint('2026-01-01 E cuda_driver.cc:1234] failed to allocate 15.75G (16911433728 bytes) from "
        "device: CUDA_ERROR_OUT_OF_MEMORY: out of memory', file=sys.stderr)\nsys.exit(1)\n")
    profile = one_task_profile(tmp_path, "{python} cuda.py")
    out, failed = up_failing(tmp_path, profile, "it-cause-cuda")
    assert failed["cause"] == "GPU out of memory"
    assert "root cause: worker:0 failed first (exit code 1: GPU out of memory)" in out


def memory_cgroup() -> Path | None:
    """This process's cgroup v1 memory cgroup, or a cgroup v2 one with the memory controller, where
    this user may make a child in it; None elsewhere."""
    for line in Path("/proc/self/cgroup").read_text().splitlines():
        _, controllers, path = line.split(":", 2)
        if "memory" in controllers.split(","):
            base = Path("/sys/fs/cgroup/memory") / path.lstrip("/")
        elif controllers == "":
            base = Path("/sys/fs/cgroup") / path.lstrip("/")
            if "memory" not in (base / "cgroup.controllers").read_text() if base.exists() else True:
                continue
        else:
            continue
        if base.is_dir() and os.access(base, os.W_OK):
            return base
    return None


@pytest.fixture
def limited_cgroup() -> Iterator[Path]:
    base = memory_cgroup()
    if base is None:
        pytest.skip("no writable memory cgroup here (needs root and cgroup v1 memory or v2 with memory)")
    group = base / f"distlaunch-test-{uuid.uuid4().hex[:8]}"
    group.mkdir()
    try:
        if (group / "memory.limit_in_bytes").exists():  # v1: memory, and memory+swap where accounted
            (group / "memory.limit_in_bytes").write_text(str(128 * 2**20))
            if (group / "memory.memsw.limit_in_bytes").exists():
                (group / "memory.memsw.limit_in_bytes").write_text(str(128 * 2**20))
        else:
            (group / "memory.max").write_text(str(128 * 2**20))
            (group / "memory.swap.max").write_text("0")
        yield group
    finally:
        for pid in (group / "cgroup.procs").read_text().split():
            os.kill(int(pid), signal.SIGKILL)
        group.rmdir()


def test_the_kernel_oom_killer_is_named_with_the_peak_rss(tmp_path: Path, limited_cgroup: Path) -> None:
    """A real OOM kill: the task moves itself into a memory cgroup of 128 MiB, then outgrows it."""
    (tmp_path / "grow.py").write_text(
        "import time\ntime.sleep(1)\nblocks = []\nwhile True:\n    blocks.append(bytearray(4 * 2**20))\n"
        "    time.sleep(0.05)\n")
    profile = one_task_profile(tmp_path, "exec {python} grow.py",
                               setup=[f"echo $$ > {limited_cgroup}/cgroup.procs"])
    out, failed = up_failing(tmp_path, profile, "it-cause-oomkill")
    assert (failed["signal"], failed["oom_kill"]) == ("SIGKILL", True), failed
    assert failed["cause"].startswith("killed by the kernel OOM killer (peak RSS "), failed["cause"]
    assert "root cause: worker:0 failed first (killed by the kernel OOM killer (peak RSS " in out
    assert 50 * 2**20 < failed["peak_rss_bytes"] < 256 * 2**20  # RSS counts pages the cgroup does not



def test_a_chief_losing_its_ps_names_the_ps_as_the_root_cause(tmp_path: Path) -> None:
    """A real ParameterServerStrategy job whose ps's Python is killed (its task's shell lives on, so
    the job goes on until the chief fails): the chief's UnavailableError is mapped to ps:0."""
    profile = local_ps_profile(tmp_path, steps=100000, name="it-cause-ps", defaults={"restart": "never"},
                               roles={"ps": {"command": "{python} examples/ps_mnist.py; sleep 600"}})
    run_dir, run_id = tmp_path / "run", "it-cause-ps"
    proc = start_cli("up", str(profile), "--no-tui", "--run-dir", str(run_dir), "--run-id", run_id,
                     log=tmp_path / "up.log")
    try:
        wait_for_event(run_dir, lambda e: e["kind"] == "metric" and e["task"] == "chief:0", 240, "a chief step")
        ps = next(e for e in read_events(run_dir) if e["kind"] == "state" and e["task"] == "ps:0" and e.get("pid"))
        for pid in pids_with_run_id(run_id):
            with contextlib.suppress(OSError):
                argv = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
                if os.getpgid(pid) == ps["pid"] and any(arg.endswith(b"ps_mnist.py") for arg in argv):
                    os.kill(pid, signal.SIGKILL)  # its Python only: not the shells whose command names it
        assert proc.wait(timeout=240) == 1
    finally:
        kill_run_processes(run_id)
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
    chief = failed_state(read_events(run_dir), "chief:0")
    assert chief["culprit"] == "ps:0", chief
    assert chief["cause"].startswith("lost contact with ps:0"), chief["cause"]
    log = (tmp_path / "up.log").read_text()
    assert "root cause: ps:0 (chief:0 failed first: exit code 1: lost contact with ps:0" in log, log[-3000:]


def test_a_missing_package_is_named_with_its_host(tmp_path: Path) -> None:
    (tmp_path / "needs.py").write_text("import sys\nimport no_such_pkg_x.sub\n")
    out, failed = up_failing(tmp_path, one_task_profile(tmp_path, "{python} needs.py"), "it-cause-module")
    assert failed["cause"] == "package no_such_pkg_x missing on host local (ModuleNotFoundError at needs.py:2)"
    assert f"root cause: worker:0 failed first (exit code 1: {failed['cause']})" in out
