"""`make test`'s pytest: the integration tests (real TensorFlow clusters, sshd, namespaces; mostly
waiting on timers and processes) in the foreground, and the unit, dashboard and docs tests at once
beside them at a lower CPU priority, their output kept until the integration tests end.

Exit status: 0 only when both suites ran tests and passed; pytest's 5 (no tests collected) fails.
Both suites are self-contained (their own temp dirs; the unit tests start no sshd, namespace or
Slurm cluster), so running them side by side changes what they test in no way, only when.
Arguments are passed to both pytest runs."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
import time

FAST = ["tests/unit", "tests/tui", "tests/docs"]
SLOW = ["tests/integration"]


def main(extra: list[str]) -> int:
    began = time.monotonic()
    common = [sys.executable, "-m", "pytest", "-q", "-ra", "--durations=25", *extra]
    with tempfile.NamedTemporaryFile("w+", prefix="distlaunch-fast-tests-", suffix=".log") as log:
        # its own basetemp: the two runs never number (or clean up) the same pytest-of-<user> dirs
        basetemp = tempfile.mkdtemp(prefix="distlaunch-fast-tests-")
        fast = subprocess.Popen(["nice", "-n", "10", *common, "-p", "no:cacheprovider", f"--basetemp={basetemp}",
                                 *FAST], stdout=log, stderr=subprocess.STDOUT)
        try:
            slow_rc = subprocess.call([*common, *SLOW])
        finally:
            fast_rc = fast.wait()
        if fast_rc == 0:
            shutil.rmtree(basetemp, ignore_errors=True)  # a failure's files stay, for a look
        log.seek(0)
        print(f"\n===== {' '.join(FAST)} (run beside the integration tests) =====", flush=True)
        sys.stdout.write(log.read())
    minutes = (time.monotonic() - began) / 60
    print(f"\nintegration: exit {slow_rc}; unit, tui, docs: exit {fast_rc}; {minutes:.1f} min in all", flush=True)
    return 0 if slow_rc == 0 and fast_rc == 0 else 1


if __name__ == "__main__":
    os.environ.setdefault("PYTHONUNBUFFERED", "1")
    sys.exit(main(sys.argv[1:]))
