"""A secret never reaches a preemption notice (issue 59, item 4): the agent runs the notice as
``/bin/sh -c COMMAND`` every few seconds (``ps`` shows it to every user) and the command was kept in
spec.json, state.json, events and `status`; a value from the launcher's environment there is
refused in one line, wherever the notice is written, and never shown in that line."""

from __future__ import annotations

from pathlib import Path

import pytest

from launcher.cli import main
from launcher.errors import ProfileError
from launcher.profile.reader import load_profile

SECRET = "s3cr3t-bearer-value"
BASE = """
[defaults]
command = "run"
{defaults}
[ssh]
{ssh}
[hosts.a]
address = "localhost"
transport = "local"
{host}
[roles.worker]
hosts = ["a"]
"""
NOTICE = "preemption_notice = \"curl -sf -H 'Authorization: Bearer ${env:NOTICE_TOKEN}' http://169.254.169.254/x\""


@pytest.mark.parametrize("where", ["host", "defaults", "ssh"])
def test_a_secret_in_a_preemption_notice_is_refused(where: str, tmp_path: Path,
                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("NOTICE_TOKEN", SECRET)
    path = tmp_path / "p.toml"
    parts = {"defaults": "", "ssh": "", "host": "", where: NOTICE}
    path.write_text(BASE.format(**parts), encoding="utf-8")
    with pytest.raises(ProfileError) as caught:
        load_profile(path)
    message = str(caught.value)
    key = "hosts.a" if where == "host" else where
    assert f"{key}.preemption_notice: holds a value from the launcher's environment" in message
    assert SECRET not in message and "\n" not in message


def test_check_says_it_in_one_line_and_exit_2(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                              capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setenv("NOTICE_TOKEN", SECRET)
    path = tmp_path / "p.toml"
    path.write_text(BASE.format(defaults="", ssh="", host=NOTICE), encoding="utf-8")
    assert main(["check", str(path)]) == 2
    err = capsys.readouterr().err
    assert len(err.strip().splitlines()) == 1 and SECRET not in err


def test_a_notice_without_secrets_still_loads(tmp_path: Path) -> None:
    path = tmp_path / "p.toml"
    path.write_text(BASE.format(defaults="", ssh="", host='preemption_notice = "cat ~/.config/notice-token"'),
                    encoding="utf-8")
    assert load_profile(path).hosts["a"].preemption_notice == "cat ~/.config/notice-token"
