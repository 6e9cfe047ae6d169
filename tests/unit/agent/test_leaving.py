"""A host's preemption notice as the agent runs it (issue 59, items 5-7): whatever the command does,
the agent keeps a few KiB of its output, never waits past the timeout (a background process that
holds the output open included), and its first line is shown with every terminal control
character written out, never obeyed."""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
import sys
import threading
import time
from pathlib import Path

from launcher.agent.leaving import OUTPUT_BYTES, notice_says_go, retire, retired_reason, shown

REPO = Path(__file__).resolve().parents[3]

_MEASURE = """
import json, resource, sys
from launcher.agent.leaving import notice_says_go
before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
said = notice_says_go(sys.argv[1], timeout=30)
after = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
print(json.dumps({"said": said, "grew_kib": after - before}))
"""


def _measured(command: str) -> dict[str, object]:
    done = subprocess.run([sys.executable, "-c", _MEASURE, command], capture_output=True, text=True, timeout=60,
                          cwd=REPO, env={**os.environ, "PYTHONPATH": str(REPO)})
    assert done.returncode == 0, done.stderr
    result: dict[str, object] = json.loads(done.stdout)
    return result


def test_a_notice_that_prints_hundreds_of_megabytes_costs_the_agent_a_few_kib() -> None:
    # one line of 300 MiB: the agent once held all of it (and more) in memory every poll
    result = _measured("printf 'go now '; head -c 314572800 /dev/zero | tr '\\0' x; echo; exit 0")
    assert isinstance(result["said"], str) and result["said"].startswith("go now xxx")
    assert len(result["said"]) <= 200
    assert isinstance(result["grew_kib"], int) and result["grew_kib"] < 64 * 1024, result


def test_a_notice_that_never_stops_printing_is_a_no_within_the_timeout() -> None:
    started = time.monotonic()
    assert notice_says_go("yes", timeout=2) is None
    assert time.monotonic() - started < 8


def test_a_background_process_holding_the_output_never_blocks_the_watch(tmp_path: Path) -> None:
    """``setsid`` takes the holder out of the command's process group: it cannot be killed with it,
    and the agent once waited on its output for ever."""
    pid_file = tmp_path / "holder.pid"
    answers: list[str | None] = []
    command = f"setsid sh -c 'echo $$ > {pid_file}; exec sleep 60' & echo leaving soon; exit 0"
    watch = threading.Thread(target=lambda: answers.append(notice_says_go(command, timeout=3)), daemon=True)
    started = time.monotonic()
    try:
        watch.start()
        watch.join(15)
        assert not watch.is_alive(), "the notice command's background child blocked the watch"
        assert answers == ["leaving soon"] and time.monotonic() - started < 6
    finally:
        if pid_file.exists() and pid_file.read_text().strip():
            with contextlib.suppress(ProcessLookupError):
                os.kill(int(pid_file.read_text()), 9)


def _running(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return False
    return state != "Z"


def test_a_notice_that_hangs_after_printing_is_killed_at_the_timeout(tmp_path: Path) -> None:
    pid_file = tmp_path / "sleep.pid"
    started = time.monotonic()
    assert notice_says_go(f"echo go; sleep 30 & echo $! > {pid_file}; wait", timeout=1) is None
    assert time.monotonic() - started < 6
    pid, deadline = int(pid_file.read_text()), time.monotonic() + 5
    while _running(pid) and time.monotonic() < deadline:  # SIGKILL sent before the call returned; death is async
        threading.Event().wait(0.05)
    assert not _running(pid)


def test_terminal_control_sequences_in_a_notice_are_written_out() -> None:
    said = notice_says_go("printf 'go\\033]52;c;ZXZpbA==\\007 \\033[2J\\033]0;title\\007 \\302\\233 done\\n'")
    assert said is not None
    assert not any(ch in said for ch in "\x1b\x07\x9b"), repr(said)
    assert said == "go\\x1b]52;c;ZXZpbA==\\x07 \\x1b[2J\\x1b]0;title\\x07 \\x9b done"


def test_shown_keeps_printable_text_as_it_is() -> None:
    assert shown("drained by alice: maintenance (é, 日本)") == "drained by alice: maintenance (é, 日本)"
    assert shown("a\u2028b\rc\x00") == "a\\u2028b\\rc\\x00"
    assert OUTPUT_BYTES <= 8192


def test_a_fifo_named_retired_is_read_as_retired_never_waited_on(tmp_path: Path) -> None:
    """Issue 59, item 8: a FIFO ``retired`` in the host run dir once blocked the agent's start for ever."""
    os.mkfifo(tmp_path / "retired")
    answers: list[str | None] = []
    reader = threading.Thread(target=lambda: answers.append(retired_reason(str(tmp_path))), daemon=True)
    reader.start()
    reader.join(10)
    assert not reader.is_alive(), "reading the retired mark blocked on a FIFO"
    assert answers == [f"{tmp_path}/retired: not a regular file; remove it"]


def test_the_retired_mark_is_read_back_as_written_and_shown_safely(tmp_path: Path) -> None:
    assert retired_reason(str(tmp_path)) is None
    retire(str(tmp_path), "drained: \x1b]0;owned\x07 maintenance")
    assert retired_reason(str(tmp_path)) == "drained: \\x1b]0;owned\\x07 maintenance"


def test_status_shows_a_hosts_reason_escaped() -> None:
    """Issue 59, item 7: a reason recorded before the agent escaped it (or by another writer) is
    still written out when `status` shows it."""
    from launcher.commands.status import hosts_text

    reason = "notice (x): \x1b]52;c;ZXZpbA==\x07 \x1b[2J"
    lines = hosts_text({"b": {"state": "drained", "reason": reason, "since": None}}, 0.0)
    assert lines == ["host b: drained (notice (x): \\x1b]52;c;ZXZpbA==\\x07 \\x1b[2J)"]
