"""The private-sshd harness itself: it skips or fails by environment, and serves only its own key."""

from __future__ import annotations

import pytest
from _pytest.outcomes import Failed, Skipped

from launcher.transport import SshHost
from tests import sshd as harness


def test_missing_sshd_skips_locally_and_fails_in_ci(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(harness, "SSHD", "/nonexistent/sshd")
    monkeypatch.delenv("DISTLAUNCH_REQUIRE_SSHD", raising=False)
    with pytest.raises(Skipped, match="/nonexistent/sshd not found"):
        harness.require_sshd()
    monkeypatch.setenv("DISTLAUNCH_REQUIRE_SSHD", "1")
    with pytest.raises(Failed, match="DISTLAUNCH_REQUIRE_SSHD=1 but /nonexistent/sshd not found"):
        harness.require_sshd()


def test_two_servers_run_side_by_side_and_stop(private_sshd: harness.PrivateSshd) -> None:
    with harness.PrivateSshd() as second:
        assert second.port != private_sshd.port
        for server in (private_sshd, second):
            host = SshHost(server.host_config("h"))
            host.connect()
            assert host.run("echo up").stdout == "up\n"
            host.close()
    assert not second.running
    assert not second.dir.exists()  # keys and config are thrown away
