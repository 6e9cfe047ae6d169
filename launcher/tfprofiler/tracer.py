"""TensorFlow's profiler client in a process of its own, which `distlaunch profile` can abandon.

``python -P tracer.py LOGDIR DURATION_MS ALARM_S`` (run by path: it imports nothing of distlaunch),
then one line on stdin: the servers to capture, ``host:port`` separated by commas (an empty line,
or none: it ends); the launcher checks the ports while TensorFlow imports here. TensorFlow's
client call cannot be bounded from Python: against a port that accepts a connection and never
answers it waits about 20 s per attempt whatever the capture's length. So the launcher runs it
here, with stdout and stderr to the capture's log (TensorFlow's C++ logs and progress lines go
there, never to the user's terminal), and takes its answers as JSON lines on the descriptor that
was stdout when it started:

- ``{"state": "ready"}`` once TensorFlow is imported (the capture's deadline starts when the
  launcher sends the servers);
- ``{"state": "done"}`` when the call returned, ``{"state": "failed", "detail": ...}`` when it
  raised (TensorFlow 2.21 raises ``RuntimeError``, older ones an ``OpError``);
- ``{"state": "noimport", "detail": ...}`` when TensorFlow cannot be imported here.

The launcher kills it (its whole process group) when an answer is late; ``ALARM_S`` ends it
besides, should the launcher itself be gone.
"""

from __future__ import annotations

import json
import os
import signal
import sys


def _answer(out: int, state: str, detail: str = "") -> None:
    data = (json.dumps({"state": state, "detail": detail[:4000]}) + "\n").encode("utf-8", "replace")
    while data:
        data = data[os.write(out, data):]


def _first_line(exc: BaseException) -> str:
    text = str(getattr(exc, "message", "") or exc or type(exc).__name__)
    return text.strip().splitlines()[0] if text.strip() else type(exc).__name__


def main(argv: list[str]) -> int:
    logdir, duration_ms, alarm_s = argv[0], int(argv[1]), int(argv[2])
    signal.alarm(max(1, alarm_s))  # the default action ends the process, even inside TensorFlow's C++
    out = os.dup(1)
    os.dup2(2, 1)  # TensorFlow prints its progress on stdout: to the log as well
    try:
        from tensorflow.python.profiler import profiler_client
    except Exception as exc:  # ImportError, or a TensorFlow that fails as it loads
        _answer(out, "noimport", f"{type(exc).__name__}: {_first_line(exc)}")
        return 0
    _answer(out, "ready")
    services = sys.stdin.readline().strip()
    if not services:
        return 0
    try:
        profiler_client.trace(services, logdir, duration_ms, num_tracing_attempts=1)
    except Exception as exc:
        _answer(out, "failed", _first_line(exc))
    else:
        _answer(out, "done")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
