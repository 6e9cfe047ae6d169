"""A task's output is read to its end whatever handling a line meets: a reader that stopped once
(its own warning hit a full disk) left the task blocked on a full pipe."""

from __future__ import annotations

import errno
import os
import threading

from launcher.agent.output import read_lines


def test_a_handler_that_fails_does_not_stop_the_reader() -> None:
    read_end, write_end = os.pipe()
    seen: list[str] = []

    def handle(_stream: str, line: str) -> None:
        seen.append(line)
        if len(seen) % 2:
            raise OSError(errno.ENOSPC, "No space left on device")

    reader = threading.Thread(target=read_lines, args=(read_end, "stdout", handle))
    reader.start()
    lines = [f"line {i} " + "x" * 100 for i in range(2000)]  # more than a pipe holds: it must be drained
    with os.fdopen(write_end, "w") as out:
        for line in lines:
            out.write(line + "\n")
    reader.join(10)
    assert not reader.is_alive()
    assert seen == lines
