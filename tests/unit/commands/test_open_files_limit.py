"""`up` raises the open-files soft limit to the hard one, and says so when even that is short."""

from __future__ import annotations

import subprocess
import sys

CHILD = """
import resource, sys
resource.setrlimit(resource.RLIMIT_NOFILE, (int(sys.argv[1]), int(sys.argv[2])))
from launcher.commands.up import raise_open_files_limit
raise_open_files_limit(int(sys.argv[3]))
print(resource.getrlimit(resource.RLIMIT_NOFILE)[0])
"""


def run_child(soft: int, hard: int, hosts: int) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-c", CHILD, str(soft), str(hard), str(hosts)],
                          capture_output=True, text=True, timeout=60, check=True)


def test_the_soft_limit_goes_up_to_the_hard_one_without_a_word() -> None:
    result = run_child(256, 4096, 32)
    assert result.stdout.strip() == "4096" and result.stderr == ""


def test_a_hard_limit_too_low_for_the_hosts_is_one_warning_naming_the_fix() -> None:
    result = run_child(200, 300, 100)
    assert result.stdout.strip() == "300"
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and "100 hosts may need 464 open files and the limit is 300" in lines[0]
    assert "ulimit -n" in lines[0]
