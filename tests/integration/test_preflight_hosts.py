"""Preflight proves the hosts together before anything starts: every host reaches every other
host's task ports at the TF_CONFIG addresses (a firewall DROP times out, a REJECT is refused), the
hosts side by side (`check --json`), low disk at the outputs (a small tmpfs) and a skewed clock.

Two hosts on one machine: local-transport hosts (or two sshds) whose tf_address is 127.0.0.2 and
127.0.0.3. The firewall rules (iptables, root) match only this test's ports on 127.0.0.3 and are
removed in a finally; without root or iptables these tests skip here and fail in CI.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import socket
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.integration.jobtools import cli, kill_run_processes, pids_with_run_id, read_events
from tests.profiles import build_profile, local_host, ssh_table, sshd_host
from tests.sshd import PrivateSshd, free_port, require_sshd

#: a task that binds its own port on every address, as TF's gRPC server does: it fails if the
#: preflight still held the port
BIND_PORT = "{python} -c 'import socket, sys; s = socket.socket(); s.bind((\"0.0.0.0\", int(sys.argv[1])))' {port}"


def require_root_tool(tool: str) -> None:
    reason = ("needs root" if os.geteuid() != 0 else
              f"{tool} not found (apt-get install {tool})" if shutil.which(tool) is None else "")
    if not reason:
        return
    if os.environ.get("CI") == "true" or os.environ.get("DISTLAUNCH_REQUIRE_SSHD") == "1":
        pytest.fail(f"this test must run here but it {reason}")
    pytest.skip(reason)


@contextlib.contextmanager
def firewall(*rules: list[str]) -> Iterator[None]:
    """iptables INPUT rules for the duration; each removed again whatever happens."""
    added = []
    try:
        for rule in rules:
            subprocess.run(["iptables", "-I", "INPUT", *rule], check=True, capture_output=True, timeout=30)
            added.append(rule)
        yield
    finally:
        for rule in added:
            subprocess.run(["iptables", "-D", "INPUT", *rule], capture_output=True, timeout=30)


def two_local_hosts(tmp: Path, *, command: str, ports: tuple[int, int] | None = None, top: str = "",
                    worker_python: str = sys.executable) -> Path:
    return build_profile(tmp / "two.toml", name="it-preflight-hosts", strategy="custom", top=top, command=command,
                         defaults={"python": sys.executable}, workdir=tmp, restart="never",
                         hosts=[local_host("a", tf_address="127.0.0.2"), local_host("b", tf_address="127.0.0.3")],
                         roles={"ps": {"hosts": ["a"]},
                                "worker": {"count": 2, "hosts": ["b"], "python": worker_python,
                                           "port": ports[0] if ports else None}})


def test_a_dropped_port_times_out_a_rejected_one_is_refused_and_nothing_starts(tmp_path: Path) -> None:
    require_root_tool("iptables")
    first = free_port("127.0.0.3")
    while not _free_pair(first):  # worker:0 and worker:1 take two ports in a row
        first = free_port("127.0.0.3")
    profile = two_local_hosts(tmp_path, command="{python} -c pass", ports=(first, first + 1))
    drop = ["-p", "tcp", "-d", "127.0.0.3", "--dport", str(first), "-j", "DROP"]
    reject = ["-p", "tcp", "-d", "127.0.0.3", "--dport", str(first + 1), "-j", "REJECT", "--reject-with", "tcp-reset"]
    run_id = "it-reach-firewall"
    try:
        with firewall(drop, reject):
            for args in (["check", str(profile)],
                         ["up", str(profile), "--no-tui", "--run-dir", str(tmp_path / "run"), "--run-id", run_id]):
                result = cli(*args, timeout=120)
                assert result.returncode == 2, result.stderr
                assert "Traceback" not in result.stderr
                lines = [ln.removeprefix("distlaunch: error: ") for ln in result.stderr.splitlines()
                         if "cannot reach" in ln]
                assert sorted(ln.split(";")[0] for ln in lines) == [
                    f"host a cannot reach worker:0 at 127.0.0.3:{first} (timed out: a firewall?)",
                    f"host a cannot reach worker:1 at 127.0.0.3:{first + 1} (refused)"], result.stderr
                assert "fix hosts.b.tf_address" in lines[0]
        assert not [e for e in read_events(tmp_path / "run") if e["kind"] == "state"]
        assert pids_with_run_id(run_id) == []
    finally:
        kill_run_processes(run_id)


def _free_pair(port: int) -> bool:
    with contextlib.suppress(OSError), socket.socket() as a, socket.socket() as b:
        a.bind(("0.0.0.0", port))
        b.bind(("0.0.0.0", port + 1))
        return True
    return False


def test_hosts_that_reach_each_other_start_and_their_tasks_bind_the_checked_ports(tmp_path: Path) -> None:
    """The reach check passes (2 hosts, 3 pairs) and lets the ports go before the tasks bind them."""
    # every task must bind its port and exit 0: with the default policy, worker:0's exit ends the job
    # and a worker:1 still starting on a loaded machine is stopped, not succeeded
    profile = two_local_hosts(tmp_path, command=BIND_PORT, top='success_policy = "all_workers"')
    check = cli("check", str(profile), timeout=120)
    assert check.returncode == 0, check.stderr
    assert "every host reaches the other hosts' task ports (3 pairs" in check.stdout
    result = cli("up", str(profile), "--no-tui", "--run-dir", str(tmp_path / "run"), timeout=120)
    assert result.returncode == 0, result.stderr[-2000:]
    assert "reach the other hosts" in result.stderr or "reaches the other hosts" in result.stderr
    states = [e for e in read_events(tmp_path / "run") if e["kind"] == "state" and e.get("state") == "succeeded"]
    assert {e["task"] for e in states} == {"ps:0", "worker:0", "worker:1"}


def test_outputs_on_a_small_tmpfs_warn_once_naming_host_path_and_space(tmp_path: Path) -> None:
    require_root_tool("mount")
    small = tmp_path / "small"
    small.mkdir()
    subprocess.run(["mount", "-t", "tmpfs", "-o", "size=16m", "tmpfs", str(small)], check=True, timeout=30)
    try:
        profile = two_local_hosts(tmp_path, command="{python} -c pass", top=f'outputs = "{small}/out"')
        check = cli("check", str(profile), timeout=120)
        assert check.returncode == 0, check.stderr
        warnings = [ln for ln in check.stderr.splitlines() if "free at" in ln]
        assert sorted(warnings) == [f"distlaunch: warning: host {h}: only 16 MiB free at {small}/out (outputs); "
                                    "min_free_disk = 1 GiB" for h in ("a", "b")]
        result = cli("up", str(profile), "--no-tui", "--run-dir", str(tmp_path / "run"), timeout=120)
        assert result.returncode == 0, result.stderr[-2000:]
        assert result.stderr.count(f"only 16 MiB free at {small}/out") == 2  # once per host, not per step
        quiet = two_local_hosts(tmp_path, command="{python} -c pass", top=f'outputs = "{small}/out"\n'
                                                                      'min_free_disk = "8MiB"')
        assert "free at" not in cli("check", str(quiet), timeout=120).stderr
    finally:
        subprocess.run(["umount", str(small)], timeout=30)


@pytest.mark.skipif(shutil.which("faketime") is None and not os.environ.get("CI"),
                    reason="needs faketime (apt-get install faketime)")
def test_a_host_whose_clock_is_five_minutes_ahead_is_told(tmp_path: Path) -> None:
    skewed = tmp_path / "python-ahead"
    skewed.write_text("#!/bin/sh\nFAKETIME_DONT_FAKE_MONOTONIC=1 "
                      f"exec faketime -f +300s {sys.executable} \"$@\"\n")
    skewed.chmod(0o755)
    profile = two_local_hosts(tmp_path, command="{python} -c pass", worker_python=str(skewed))
    result = cli("check", "--json", str(profile), timeout=120)
    assert result.returncode == 0, result.stderr
    table = json.loads(result.stdout)
    offsets = {row["host"]: row["clock_offset"] for row in table["hosts"]}
    assert abs(offsets["a"]) < 2 and 299 < offsets["b"] < 302, offsets
    assert [w for w in table["warnings"] if w.startswith("host b: clock is 300")], table["warnings"]


@pytest.mark.sshd
@pytest.mark.slow  # `check` imports TensorFlow on each host
def test_two_ssh_hosts_side_by_side_and_a_launch_over_both(tmp_path: Path) -> None:
    """`check --json` on two real sshds (127.0.0.2 and .3, TensorFlow imported on each), then `up`
    through the one-exec path, whose reach check rides the same channel."""
    require_sshd()
    with PrivateSshd(address="127.0.0.2") as one, PrivateSshd(address="127.0.0.3") as two:
        hosts = [sshd_host(server, name, server.address, **ssh_table(server, ssh_config=False))
                 for name, server in (("a", one), ("b", two))]
        profile = build_profile(tmp_path / "ssh.toml", name="it-preflight-ssh", strategy="parameter_server",
                                command=BIND_PORT, defaults={"python": sys.executable}, workdir=tmp_path,
                                restart="never", hosts=hosts,
                                roles={"ps": {"hosts": ["a"]}, "worker": {"count": 2, "hosts": ["b"]}})
        result = cli("check", "--json", str(profile), timeout=240)
        assert result.returncode == 0, result.stderr
        table = json.loads(result.stdout)
        rows = {row["host"]: row for row in table["hosts"]}
        assert set(rows) == {"a", "b"} and table["differs"] == [] and table["errors"] == []
        assert {row["python"] for row in rows.values()} == {".".join(map(str, sys.version_info[:3]))}
        assert {row["tensorflow"] for row in rows.values()} == {_tf_version()}  # the hosts are this machine
        assert all(row["disk"]["outputs"]["free_bytes"] > 0 and row["mem_available_bytes"] > 0 for row in rows.values())
        assert table["reach_pairs"] == 3
        run = cli("up", str(profile), "--no-tui", "--run-dir", str(tmp_path / "run"), timeout=240)
        assert run.returncode == 0, run.stderr[-2000:]


def _tf_version() -> str:
    done = subprocess.run([sys.executable, "-c", "import tensorflow as tf; print(tf.__version__)"],
                          capture_output=True, text=True, timeout=120, check=True)
    return done.stdout.split()[-1]


#: pynvml as a host with one busy GPU answers it: the one seam where a GPU may be faked
FAKE_PYNVML = '''
class NVMLError(Exception):
    pass
class _Memory:
    total, used, free = 80 << 30, 3 << 30, 77 << 30
class _Process:
    pid, usedGpuMemory = 4242, 3 << 30
def nvmlInit(): pass
def nvmlShutdown(): pass
def nvmlDeviceGetCount(): return 1
def nvmlDeviceGetHandleByIndex(index):
    if index >= 1:
        raise NVMLError("invalid argument")
    return index
def nvmlSystemGetDriverVersion(): return "550.54.15"
def nvmlDeviceGetName(handle): return b"NVIDIA H100 80GB HBM3"
def nvmlDeviceGetMemoryInfo(handle): return _Memory
def nvmlDeviceGetUtilizationRates(handle): return None
def nvmlDeviceGetComputeRunningProcesses(handle): return [_Process]
'''


@pytest.mark.parametrize("policy", ["warn", "refuse"])
def test_gpus_a_host_lacks_refuse_and_busy_ones_warn_or_refuse(tmp_path: Path, policy: str) -> None:
    fake = tmp_path / "fake-nvml"
    fake.mkdir()
    (fake / "pynvml.py").write_text(FAKE_PYNVML)
    profile = two_local_hosts(tmp_path, command="{python} -c pass", top=f'gpu_busy = "{policy}"')
    text = profile.read_text().replace('tf_address = "127.0.0.3"', 'tf_address = "127.0.0.3"\ngpus = [0, 1]')
    profile.write_text(text.replace("count = 2", "count = 2\ngpus_per_task = 1"))
    env = {"PYTHONPATH": f"{fake}:{os.environ.get('PYTHONPATH', '')}"}
    result = cli("check", "--json", str(profile), timeout=120, env=env)
    assert result.returncode == 2, result.stderr
    table = json.loads(result.stdout)
    rows = {row["host"]: row for row in table["hosts"]}
    assert rows["b"]["gpus"][0]["name"] == "NVIDIA H100 80GB HBM3" and rows["b"]["gpus"][0]["others_pids"] == [4242]
    missing = "host b has 1 GPU(s) but worker:1 is given GPU 1; fix hosts.b.gpus (or the roles' gpus_per_task)"
    busy = "host b: GPU 0, given to worker:0, holds 3 GiB of other processes (pids 4242)"
    refused = [busy + '; stop them or set gpu_busy = "warn"'] if policy == "refuse" else []
    assert table["errors"] == [missing, *refused]
    run = cli("up", str(profile), "--no-tui", "--run-dir", str(tmp_path / "run"), timeout=120, env=env)
    assert run.returncode == 2 and missing in run.stderr and "Traceback" not in run.stderr
    told = f"distlaunch: warning: {busy}" if policy == "warn" else f'{busy}; stop them or set gpu_busy = "warn"'
    assert told in run.stderr and run.stderr.count(busy) == 1
    assert table["warnings"] == ([busy] if policy == "warn" else [])
    assert not [e for e in read_events(tmp_path / "run") if e["kind"] == "state"]
