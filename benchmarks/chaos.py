"""Chaos run: a ParameterServer job over three network-namespace hosts under seeded faults.

    sudo benchmarks/chaos.py --minutes 10 --seed 7

Needs root (namespaces, tests/netns.py) and sshd. The job (examples/ps_mnist.py: ps:0 on a,
worker:0 on b, worker:1 and chief:0 on c) trains for ``--minutes`` while kill -9 of tasks, of
host agents and of the launcher (then `distlaunch attach`), and link cuts of 5-60 s hit it one
after another (tests/chaos.py has the schedule and the checks). It prints each fault, then the
figures and whether each invariant held; exit 0 only when all held.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from tests.chaos import FAULT_KINDS, ChaosConfig, ChaosRun  # noqa: E402
from tests.integration.jobtools import kill_run_processes  # noqa: E402
from tests.netns import NetnsLab, netns_available  # noqa: E402


def loadavg() -> str:
    return " ".join(Path("/proc/loadavg").read_text().split()[:3])


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--minutes", type=float, default=10.0, help="length of the fault window (default 10)")
    parser.add_argument("--seed", type=int, default=1, help="seed of the fault schedule (default 1)")
    parser.add_argument("--gap", type=float, nargs=2, default=(10.0, 30.0), metavar=("MIN", "MAX"),
                        help="seconds between faults (default 10 30)")
    parser.add_argument("--kinds", default=",".join(FAULT_KINDS),
                        help=f"fault kinds, in shuffled rounds of one each (default {','.join(FAULT_KINDS)})")
    args = parser.parse_args(argv)
    kinds = [k for k in args.kinds.split(",") if k]
    unknown = sorted(set(kinds) - set(FAULT_KINDS))
    if unknown:
        parser.error(f"unknown fault kind(s) {', '.join(unknown)}; choose from {', '.join(FAULT_KINDS)}")
    ok, why = netns_available()
    if not ok:
        print(f"chaos: cannot run here: {why}", file=sys.stderr)
        return 2
    config = ChaosConfig(minutes=args.minutes, seed=args.seed, gap_seconds=tuple(args.gap),
                         kinds=tuple(kinds))
    print(f"chaos: seed {args.seed}, {args.minutes:g} min, faults {', '.join(kinds)}, "
          f"gap {args.gap[0]:g}-{args.gap[1]:g} s; command: {' '.join(sys.argv)}")
    print(f"load average at start: {loadavg()}  ({time.strftime('%Y-%m-%d %H:%M:%S')})", flush=True)
    with tempfile.TemporaryDirectory(prefix="distlaunch-chaos-") as tmp, NetnsLab(3) as lab:
        run = ChaosRun(lab, Path(tmp), config, log=lambda line: print(line, flush=True))
        try:
            report = run.run()
        finally:
            kill_run_processes(run.run_id)  # only after a hang is anything left: the namespaces do not end it
        print()
        for line in report.lines():
            print(line)
        print(f"load average at end: {loadavg()}  ({time.strftime('%Y-%m-%d %H:%M:%S')})")
        problems = report.problems()
        for problem in problems:
            print(f"FAILED: {problem}")
        if problems:
            for log in report.launcher_logs:
                print(f"--- {log.name} (last lines)")
                print("\n".join(log.read_text(errors="replace").splitlines()[-15:]))
        else:
            print("all invariants held")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
