"""LineSplitter's bounded line cutting, and what only LocalHost promises (real child processes)."""

from __future__ import annotations

import random
import signal
import time
from pathlib import Path

import pytest

from launcher.errors import HostError
from launcher.model import HostConfig
from launcher.transport import CommandTimeout, LineSplitter, LocalHost, make_host


def split(chunks: list[bytes], limit: int = 8) -> list[str]:
    lines: list[str] = []
    splitter = LineSplitter(lines.append, max_line_bytes=limit)
    for chunk in chunks:
        splitter.feed(chunk)
    splitter.finish()
    return lines


def test_lines_split_across_chunks_and_last_partial_line_is_kept() -> None:
    assert split([b"ab", b"c\nde", b"f\n\ng"]) == ["abc", "def", "", "g"]


def test_multibyte_characters_split_across_chunks_survive() -> None:
    data = "héllo wörld\n".encode()
    assert split([data[:2], data[2:7], data[7:]], limit=64) == ["héllo wörld"]


def test_line_at_the_limit_is_whole_and_longer_is_cut_once() -> None:
    assert split([b"12345678\n"]) == ["12345678"]
    assert split([b"1234", b"5678", b"\n"]) == ["12345678"]
    assert split([b"123456789abc\nnext\n"]) == ["12345678", "next"]
    assert split([b"1234567", b"89", b"abc", b"def\nnext"]) == ["12345678", "next"]
    assert split([b"12345678", b"9"]) == ["12345678"]  # cut tail without newline at the end


def test_any_chunking_gives_the_lines_of_the_whole_stream() -> None:
    """Runs of whole lines are split in one go; whatever the chunk borders, the lines are those of
    the stream read at once, each cut to the limit (a multi-byte character cut shows as U+FFFD)."""
    rng = random.Random(11)
    alphabet = [b"a", b"b", "é".encode(), "€".encode(), b"\n", b"\n", b"\xff"]
    for _ in range(300):
        data = b"".join(rng.choice(alphabet) for _ in range(rng.randrange(0, 60)))
        cuts = sorted(rng.sample(range(len(data) + 1), rng.randrange(0, min(6, len(data) + 1))))
        chunks = [data[a:b] for a, b in zip([0, *cuts], [*cuts, len(data)], strict=True)]
        parts = data.split(b"\n")
        expected = [p[:8].decode("utf-8", errors="replace") for p in parts[:-1]]
        if parts[-1]:
            expected.append(parts[-1][:8].decode("utf-8", errors="replace"))
        assert split(chunks) == expected, (data, cuts)


def local_host() -> LocalHost:
    host = make_host(HostConfig(name="local", address="localhost", transport="local"))
    assert isinstance(host, LocalHost)
    return host


def test_run_reports_death_by_signal_as_128_plus_n() -> None:
    assert local_host().run("kill -TERM $$").exit_code == 128 + signal.SIGTERM


def running(pid: int) -> bool:
    """True while ``pid`` exists and is not a zombie waiting to be reaped."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat.rsplit(") ", 1)[1][0] != "Z"


def test_run_timeout_kills_the_whole_command_group(tmp_path: Path) -> None:
    pid_file = tmp_path / "pid"
    started = time.monotonic()
    with pytest.raises(CommandTimeout, match=r"^host local: `.*` did not finish within 0.3s$"):
        local_host().run(f"sh -c 'echo $$ > {pid_file}; exec sleep 30'; true", timeout=0.3)
    assert time.monotonic() - started < 5
    grandchild = int(pid_file.read_text())
    deadline = time.monotonic() + 5
    while running(grandchild):
        assert time.monotonic() < deadline, "the timed-out command's child is still running"
        time.sleep(0.02)


def test_start_detached_in_a_missing_directory_names_it(tmp_path: Path) -> None:
    missing = tmp_path / "nope"
    with pytest.raises(HostError, match=f"working directory {missing} does not exist"):
        local_host().start_detached("true", str(tmp_path / "log"), cwd=str(missing))


def test_stream_of_a_failing_command_reports_its_code_and_keeps_stderr() -> None:
    host = local_host()
    codes: list[int | None] = []
    stream = host.stream_lines("echo one; echo oops >&2; exit 7", lambda _: None, codes.append)
    assert stream.wait(10.0) == 7
    assert codes == [7]
    assert stream.stderr_tail() == "oops\n"
