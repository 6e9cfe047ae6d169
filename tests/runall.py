"""`make test`'s pytest: every test, in two lanes side by side on the machine's cores.

The runs, longest first; each lane takes the next one when it is free:

- the integration test files marked ``sshd`` or ``netns`` or taking ``docker_image`` (the
  longest runs of their own servers and namespaces; a few other files start a private sshd
  through a helper and run with the local ones: every sshd, namespace and bridge has a name and
  port of its own, so the runs never meet there);
- the other integration tests (local TensorFlow clusters, the Slurm cluster);
- the unit tests; then the dashboard and docs tests. These two come last and go to whichever lane
  is free first, so neither lane waits long for the other at the end.

The integration tests mostly wait on TensorFlow processes and timers, so two of them at a time
use the cores a single run leaves idle. A file runs whole in one lane (its tests share run ids
and fixtures); each lane has its own pytest temp dir, and the lanes share no server, namespace or
run id. Each lane's output is kept in a log and printed whole at the end, lane by lane, with a
line of progress a minute meanwhile.

Exit status: 0 only when every run collected tests and passed (pytest's 5, no tests, fails;
except with ``-k`` or ``-m``, where a lane may well select nothing). Arguments are passed to every
pytest run (``python -m tests.runall -x``). SIGINT or SIGTERM ends the runs under way."""

from __future__ import annotations

import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
#: what puts an integration test file in lane 1
NEEDS_HOSTS = re.compile(r"mark\.sshd|mark\.netns|docker_image")
PROGRESS_EVERY_S = float(os.environ.get("DISTLAUNCH_TEST_PROGRESS_S", "60"))
#: runs side by side: the integration tests mostly wait on TensorFlow processes and timers, and
#: two of them keep a 2-core machine busy (vmstat showed 2-18 % idle CPU through a CI run)
LANES = 2


@dataclass
class Run:
    name: str
    paths: list[str]
    log: Path
    tmp: str  # its pytest temp dir's name, under the lanes' work dir
    rc: int | None = None
    started: float = 0.0
    took: float = 0.0


class Queue:
    """The runs not started yet, in order; each lane takes the next one when it is free."""

    def __init__(self, runs: list[Run]) -> None:
        self._runs = list(runs)
        self._lock = threading.Lock()

    def next(self) -> Run | None:
        with self._lock:
            return self._runs.pop(0) if self._runs else None


def integration_split() -> tuple[list[str], list[str]]:
    """The integration test files that need hosts (sshd, namespaces, Docker), and the others."""
    hosts: list[str] = []
    local: list[str] = []
    for path in sorted((ROOT / "tests" / "integration").glob("test_*.py")):
        relative = str(path.relative_to(ROOT))
        (hosts if NEEDS_HOSTS.search(path.read_text()) else local).append(relative)
    return hosts, local


def _percent(log: Path) -> str:
    try:
        text = log.read_text(errors="replace")
    except OSError:
        return "starting"
    found = re.findall(r"\[\s*(\d+)%\]", text)
    done = sum(len(line.rstrip().rsplit("[", 1)[0].strip()) for line in text.splitlines()
               if line and set(line.rstrip().rsplit("[", 1)[0].strip()) <= set(".FEsxX"))
    return f"{done} done" + (f" ({found[-1]}% at the last full line)" if found else "")


def _state(run: Run) -> str:
    if run.rc is not None:
        return f"{run.name} exit {run.rc}"
    return f"{run.name} {_percent(run.log) if run.started else 'waits'}"


#: the pytest processes under way, ended by SIGINT / SIGTERM to this one
_RUNNING: list[subprocess.Popen[bytes]] = []
_ENDING = threading.Event()


def _end_runs(signum: int, _frame: object) -> None:
    _ENDING.set()
    for proc in list(_RUNNING):
        if proc.poll() is None:
            proc.send_signal(signum)


def run_lane(queue: Queue, extra: list[str], workdir: Path) -> None:
    while not _ENDING.is_set():
        run = queue.next()
        if run is None:
            return
        basetemp = workdir / run.tmp
        run.started = time.monotonic()
        with open(run.log, "w") as out:
            proc = subprocess.Popen([sys.executable, "-m", "pytest", "-q", "-ra", "--durations=15",
                                     "-p", "no:cacheprovider", f"--basetemp={basetemp}", *extra, *run.paths],
                                    stdout=out, stderr=subprocess.STDOUT, cwd=ROOT)
            _RUNNING.append(proc)
            run.rc = proc.wait()
            _RUNNING.remove(proc)
        if run.rc == 5 and any(a in ("-k", "-m") or a.startswith(("-k", "-m")) for a in extra):
            run.rc = 0  # a selection that leaves this lane nothing is no failure
        run.took = time.monotonic() - run.started
        if run.rc == 0:
            shutil.rmtree(basetemp, ignore_errors=True)  # a failing run's files stay, for a look


def main(extra: list[str]) -> int:
    began = time.monotonic()
    hosts, local = integration_split()
    # short: tests place sockets under their tmp_path and some measure the length a socket path may
    # have, so a lane's temp dir must be no deeper than pytest's own /tmp/pytest-of-<user>/pytest-N
    workdir = Path(tempfile.mkdtemp(prefix="dlt-"))
    runs = [Run("integration-hosts", hosts, workdir / "integration-hosts.log", "h"),
            Run("integration-local", local, workdir / "integration-local.log", "l"),
            Run("unit", ["tests/unit"], workdir / "unit.log", "u"),
            Run("tui-docs", ["tests/tui", "tests/docs"], workdir / "tui-docs.log", "t")]
    queue = Queue(runs)
    print(f"tests: {len(hosts)} integration files with hosts | {len(local)} local ones, then unit, tui, docs "
          f"(logs in {workdir})", flush=True)
    signal.signal(signal.SIGINT, _end_runs)
    signal.signal(signal.SIGTERM, _end_runs)
    threads = [threading.Thread(target=run_lane, args=(queue, extra, workdir)) for _ in range(LANES)]
    for thread in threads:
        thread.start()
    while True:
        alive = [t for t in threads if t.is_alive()]
        if not alive:
            break
        alive[0].join(PROGRESS_EVERY_S)
        if any(t.is_alive() for t in threads):
            print(f"  {(time.monotonic() - began) / 60:4.1f} min: " + " | ".join(_state(r) for r in runs), flush=True)
    for run in runs:
        print(f"\n===== {run.name}: {' '.join(run.paths) if len(run.paths) < 4 else f'{len(run.paths)} files'} "
              f"=====", flush=True)
        sys.stdout.write(run.log.read_text(errors="replace") if run.log.exists() else "(not run: stopped before)\n")
    print("", flush=True)
    for run in runs:
        print(f"{run.name}: exit {run.rc} in {run.took / 60:.1f} min", flush=True)
    failed = [run.name for run in runs if run.rc != 0]  # one that never started (a stop) counts too
    verdict = f"FAILED: {', '.join(failed)}" if failed else "every run passed"
    print(f"{(time.monotonic() - began) / 60:.1f} min in all; {verdict}", flush=True)
    if not failed:
        shutil.rmtree(workdir, ignore_errors=True)
    return 1 if failed else 0


if __name__ == "__main__":
    os.environ.setdefault("PYTHONUNBUFFERED", "1")
    sys.exit(main(sys.argv[1:]))
