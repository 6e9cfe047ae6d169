"""The Host contract, checked on both implementations: LocalHost and SshHost (real private sshd).

Both reach this same machine, so the tests look at the started processes through /proc.
"""

from __future__ import annotations

import contextlib
import os
import signal
import time
import tracemalloc
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from launcher.model import HostConfig
from launcher.transport import MAX_LINE_BYTES, CommandTimeout, Host, LocalHost, SshHost
from tests.sshd import PrivateSshd

DEADLINE = 10.0


def wait_for(predicate: Callable[[], bool], timeout: float = DEADLINE) -> bool:
    """Poll ``predicate`` until true or ``timeout`` (for state another process changes)."""
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if predicate():
            return True
        time.sleep(0.02)
    return predicate()


def proc_stat(pid: int) -> list[str] | None:
    """Fields of /proc/PID/stat after the command name: [state, ppid, pgrp, session, ...]."""
    try:
        text = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    return text[text.rindex(")") + 2:].split()


def gone(pid: int) -> bool:
    stat = proc_stat(pid)
    return stat is None or stat[0] in ("Z", "X")


@pytest.fixture(params=["local", "ssh"])
def host(request: pytest.FixtureRequest) -> Iterator[Host]:
    made: Host
    if request.param == "local":
        made = LocalHost(HostConfig(name="local", address="localhost", transport="local"))
    else:  # the session-wide private sshd of tests/sshd.py (skips where sshd is missing)
        server: PrivateSshd = request.getfixturevalue("sshd")
        made = SshHost(server.host_config("ssh1"))
    made.connect()
    yield made
    made.close()


def test_run_returns_exit_code_stdout_and_stderr(host: Host) -> None:
    result = host.run("echo out; echo err >&2; exit 3")
    assert (result.exit_code, result.stdout, result.stderr) == (3, "out\n", "err\n")
    assert not result.ok
    assert host.run("true").ok


def test_run_feeds_stdin_and_closes_it(host: Host) -> None:
    result = host.run("tr a-z A-Z", stdin=b"hello\nworld\n", timeout=10)
    assert result.stdout == "HELLO\nWORLD\n"


def test_run_timeout_is_bounded(host: Host) -> None:
    started = time.monotonic()
    with pytest.raises(CommandTimeout, match=r"did not finish within 0.5s"):
        host.run("sleep 30", timeout=0.5)
    assert time.monotonic() - started < 5


def test_home_is_the_users_home(host: Host) -> None:
    assert host.home() == os.path.expanduser("~")


def kill_group(pgid: int, sig: int) -> None:
    """The group a start made, signalled as the host agent signals its tasks (the same machine)."""
    with contextlib.suppress(ProcessLookupError):
        os.killpg(pgid, sig)


def test_start_detached_is_its_own_group_survives_close_and_dies_by_its_group(
        host: Host, tmp_path: Path) -> None:
    log = tmp_path / "logs" / "task.log"
    # a child in the background plus the shell waiting on it: one group signal must take both
    pid = host.start_detached("sleep 120 & echo child=$!; echo cwd=$(pwd); wait", str(log),
                              cwd=str(tmp_path))
    stat = proc_stat(pid)
    assert stat is not None
    assert int(stat[2]) == pid and int(stat[3]) == pid  # process group and session leader
    assert os.getpgid(pid) == pid
    assert wait_for(lambda: "cwd=" in (log.read_text() if log.exists() else ""))
    lines = dict(line.split("=", 1) for line in log.read_text().splitlines())
    child = int(lines["child"])
    assert lines["cwd"] == str(tmp_path)
    assert os.getpgid(child) == pid

    host.close()  # the task must not depend on the connection that started it
    assert not host.connected
    assert not gone(pid) and not gone(child)

    kill_group(pid, signal.SIGTERM)
    assert wait_for(lambda: gone(pid) and gone(child))


def test_start_detached_task_does_not_inherit_ignored_sigint(host: Host, tmp_path: Path) -> None:
    # a shell background job (`cmd &`) would start with SIGINT ignored; tasks must not
    pid = host.start_detached("exec sleep 60", str(tmp_path / "t.log"))
    try:
        assert wait_for(lambda: Path(f"/proc/{pid}/comm").read_text().strip() == "sleep")
        status = Path(f"/proc/{pid}/status").read_text()
        ignored = int(next(line for line in status.splitlines() if line.startswith("SigIgn:")).split()[1], 16)
        assert not ignored & (1 << (signal.SIGINT - 1))
    finally:
        kill_group(pid, signal.SIGKILL)
    assert wait_for(lambda: gone(pid))


def test_stream_delivers_every_line_in_order_then_exit_code(host: Host) -> None:
    lines: list[str] = []
    closed: list[int | None] = []
    stream = host.stream_lines("seq 1 10000; exit 4", lines.append, closed.append)
    assert stream.wait(DEADLINE) == 4
    assert lines == [str(i) for i in range(1, 10001)]
    assert closed == [4]
    assert not stream.alive


def test_stream_cuts_a_huge_line_with_bounded_memory(host: Host) -> None:
    lines: list[str] = []
    size = 20 * MAX_LINE_BYTES
    tracemalloc.start()
    try:
        stream = host.stream_lines(f"head -c {size} /dev/zero | tr '\\0' x; echo; echo after; printf tail",
                                   lines.append)
        assert stream.wait(30.0) == 0
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert [len(line) for line in lines] == [MAX_LINE_BYTES, 5, 4]
    assert lines[1:] == ["after", "tail"]
    assert peak < size / 2  # the 20 MiB line never sat in memory whole


def test_stream_close_ends_the_command_with_stdin_eof(host: Host, tmp_path: Path) -> None:
    marker = tmp_path / "saw-eof"
    script = f"import sys; print('ready', flush=True); sys.stdin.read(); open({str(marker)!r}, 'w').close()"
    lines: list[str] = []
    closed: list[int | None] = []
    stream = host.stream_lines(f"python3 -c \"{script}\"", lines.append, closed.append)
    assert wait_for(lambda: lines == ["ready"])
    assert stream.alive
    stream.close()
    assert wait_for(lambda: marker.exists())
    assert not stream.alive
    assert closed == [None]  # closed by us: no exit code to report
    stream.close()  # idempotent
