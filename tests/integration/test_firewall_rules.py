"""``check --firewall`` prints rules that really keep another local user off a job's task ports
(applied in a network namespace of the test's own, as root, with uid 65534 as the other user),
and ``up``/``check`` say in one line when other people share the machine."""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import sys
import uuid
from pathlib import Path

import pytest

from launcher.commands.exposure import local_users_warning
from launcher.plan import build_plan
from launcher.profile.reader import load_profile
from tests.integration.otheruser import OTHER_UID, require_other_user
from tests.netns import require_netns

_PROFILE = """
name = "fw"
strategy = "parameter_server"
[defaults]
command = "{python} -c pass"
[hosts.local]
address = "localhost"
transport = "local"
[roles.chief]
hosts = ["local"]
port = %d
[roles.ps]
hosts = ["local"]
port = %d
[roles.worker]
hosts = ["local"]
count = 2
port = %d
"""

_CONNECT = ("import socket,sys\n"
            "s=socket.socket()\ns.settimeout(5)\n"
            "try:\n s.connect(('127.0.0.1',%d)); print('open')\n"
            "except OSError as e: print('closed', type(e).__name__)\n")


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _profile(tmp_path: Path, base: int) -> Path:
    path = tmp_path / "fw.toml"
    path.write_text(_PROFILE % (base, base + 1, base + 2))
    return path


def test_the_printed_rules_refuse_another_user_and_let_the_owner_in(tmp_path: Path) -> None:
    require_netns()
    require_other_user()
    if shutil.which("iptables") is None:
        if os.environ.get("CI") == "true":
            pytest.fail("iptables is missing: .ci/run installs it")
        pytest.skip("iptables is missing")
    base = 24100
    profile = _profile(tmp_path, base)
    done = subprocess.run([sys.executable, "-m", "launcher.cli", "check", str(profile), "--firewall"],
                          capture_output=True, text=True, timeout=60, cwd=Path(__file__).parents[2])
    assert done.returncode == 0, done.stderr
    rules = done.stdout
    assert "--uid-owner root" in rules and f"{base}:{base + 3}" in rules, rules
    ns = "dl-fw-" + uuid.uuid4().hex[:8]
    subprocess.run(["ip", "netns", "add", ns], check=True, timeout=30)
    listener = None
    try:
        subprocess.run(["ip", "-n", ns, "link", "set", "lo", "up"], check=True, timeout=30)
        applied = subprocess.run(["ip", "netns", "exec", ns, "sh", "-e"], input=rules, text=True,
                                 capture_output=True, timeout=60)
        assert applied.returncode == 0, applied.stderr
        listener = subprocess.Popen(
            ["ip", "netns", "exec", ns, sys.executable, "-c",
             "import socket,sys\ns=socket.socket()\ns.setsockopt(socket.SOL_SOCKET,socket.SO_REUSEADDR,1)\n"
             f"s.bind(('0.0.0.0',{base + 2}))\ns.listen(8)\nprint('ready',flush=True)\n"
             "while True:\n c,_=s.accept(); c.close()\n"],
            stdout=subprocess.PIPE, text=True)
        assert listener.stdout is not None and listener.stdout.readline().strip() == "ready"
        mine = subprocess.run(["ip", "netns", "exec", ns, sys.executable, "-c", _CONNECT % (base + 2)],
                              capture_output=True, text=True, timeout=30)
        theirs = subprocess.run(["ip", "netns", "exec", ns, "setpriv", f"--reuid={OTHER_UID}",
                                 f"--regid={OTHER_UID}", "--clear-groups", sys.executable, "-c", _CONNECT % (base + 2)],
                                capture_output=True, text=True, timeout=30)
        assert mine.stdout.strip() == "open", mine
        assert theirs.stdout.strip().startswith("closed"), theirs
    finally:
        if listener is not None:
            listener.kill()
            listener.wait(timeout=10)
        subprocess.run(["ip", "netns", "delete", ns], timeout=30)


def test_a_local_job_is_named_when_other_people_have_processes_here(tmp_path: Path) -> None:
    plan = build_plan(load_profile(_profile(tmp_path, _free_port())))
    line = local_users_warning(plan, "fw.toml", people=[1001, 65534])
    assert line is not None
    assert line.startswith("ps:0, worker:0, worker:1, chief:0 run on this machine, where 2 other users")
    assert "any local user can reach them" in line and "distlaunch check fw.toml --firewall" in line
    assert local_users_warning(plan, "fw.toml", people=[]) is None
