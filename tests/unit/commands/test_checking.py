"""``distlaunch check`` and ``distlaunch tfconfig`` through the real CLI entry point."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from launcher import __version__
from launcher.cli import main
from tests.profiles import profile_toml

REPO = Path(__file__).resolve().parents[3]

PROFILE = profile_toml(name="demo", command="{python} train.py --task {task}",
                       env={"TF_CPP_MIN_LOG_LEVEL": "2", "WANDB_API_KEY": "abc123secret"}, role_hosts=False,
                       roles={"ps": {"port": 23010}, "worker": {"count": 2, "port": 23020}, "chief": {},
                              "evaluator": {"port": 23040}})


def write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "demo.toml"
    path.write_text(text, encoding="utf-8")
    return path


def test_check_prints_an_aligned_plan_with_secrets_masked(tmp_path: Path,
                                                          capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["check", "--no-remote", str(write(tmp_path, PROFILE))]) == 0
    out, err = capsys.readouterr()
    assert err == ""
    assert "demo" in out and "parameter_server" in out and "chief (chief:0 exits 0)" in out
    lines = out.splitlines()
    header = next(i for i, line in enumerate(lines) if line.startswith("TASK"))
    rows = lines[header:header + 6]
    assert [r.split()[0] for r in rows] == ["TASK", "ps:0", "worker:0", "worker:1", "evaluator:0", "chief:0"]
    column = rows[0].index("ADDRESS:PORT")
    assert all(r[column:].split()[0] for r in rows[1:])  # every row has its address in that column
    assert rows[2][column:].startswith("localhost:23020")
    assert rows[3][column:].startswith("localhost:23021")
    assert rows[5][column:].startswith("localhost:auto")  # the chief's port is picked at launch
    assert "abc123secret" not in out
    assert "WANDB_API_KEY=****" in out
    assert "TF_CPP_MIN_LOG_LEVEL=2" in out


def test_check_warns_about_public_addresses(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    text = """
[defaults]
command = "run"
[hosts.public]
address = "203.0.114.7"
[hosts.private]
address = "10.1.2.3"
[roles.worker]
count = 2
hosts = ["public"]
[roles.chief]
hosts = ["private"]
"""
    assert main(["check", "--no-remote", str(write(tmp_path, text))]) == 0
    warnings = capsys.readouterr().err.splitlines()
    assert len(warnings) == 1
    assert "203.0.114.7" in warnings[0] and "worker:1" in warnings[0] and "no authentication" in warnings[0]
    assert "10.1.2.3" not in warnings[0]


def test_tfconfig_is_what_tensorflow_reads(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                           monkeypatch: pytest.MonkeyPatch) -> None:
    text = PROFILE.replace("[roles.chief]", "[roles.chief]\nport = 23030")
    path = write(tmp_path, text)
    assert main(["tfconfig", str(path), "worker:1"]) == 0
    printed = capsys.readouterr().out
    config = json.loads(printed)
    assert list(config) == ["cluster", "task"]
    assert "evaluator" not in config["cluster"]

    import tensorflow as tf

    monkeypatch.setenv("TF_CONFIG", printed)
    resolver = tf.distribute.cluster_resolver.TFConfigClusterResolver()
    assert resolver.cluster_spec().as_dict() == {
        "chief": ["localhost:23030"],
        "ps": ["localhost:23010"],
        "worker": ["localhost:23020", "localhost:23021"],
    }
    assert (resolver.task_type, resolver.task_id) == ("worker", 1)

    assert main(["tfconfig", str(path), "evaluator:0"]) == 0
    monkeypatch.setenv("TF_CONFIG", capsys.readouterr().out)
    resolver = tf.distribute.cluster_resolver.TFConfigClusterResolver()
    assert (resolver.task_type, resolver.task_id) == ("evaluator", 0)
    assert "evaluator" not in resolver.cluster_spec().as_dict()


def test_cli_help_and_version() -> None:
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    helped = subprocess.run([sys.executable, "-m", "launcher.cli", "--help"], cwd=REPO, env=env,
                            capture_output=True, text=True, timeout=60)
    assert helped.returncode == 0
    assert "check" in helped.stdout and "tfconfig" in helped.stdout
    version = subprocess.run([sys.executable, "-m", "launcher.cli", "--version"], cwd=REPO, env=env,
                             capture_output=True, text=True, timeout=60)
    assert version.returncode == 0
    assert version.stdout.strip() == f"distlaunch {__version__}"


def test_distlaunch_alone_lists_the_verbs(capsys: pytest.CaptureFixture[str]) -> None:
    assert main([]) == 2
    err = capsys.readouterr().err
    assert err.startswith("usage: distlaunch ")
    for verb in ("check", "up", "down", "status", "attach", "logs", "tfconfig", "init"):
        assert f"\n    {verb} " in err, verb
