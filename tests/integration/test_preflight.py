"""Preflight refuses hosts whose interpreter is missing or lacks TensorFlow, before anything starts."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from tests.integration.jobtools import REPO, cli, read_events
from tests.profiles import build_profile


def profile_with_python(tmp: Path, python: str) -> Path:
    return build_profile(tmp / "p.toml", name="it-preflight", command="{python} examples/ps_mnist.py --steps 10",
                         defaults={"python": python}, workdir=REPO, hosts=(), roles={"ps": {}, "worker": {}})


def _one_error(stderr: str) -> str:
    errors = [ln for ln in stderr.splitlines() if "error" in ln]
    assert len(errors) == 1, stderr
    assert "Traceback" not in stderr
    return errors[0]


def test_missing_python_is_named_with_the_fix(tmp_path: Path) -> None:
    profile = profile_with_python(tmp_path, "/nonexistent/python3")
    for args in (["check", str(profile)], ["up", str(profile), "--no-tui", "--run-dir", str(tmp_path / "run")]):
        result = cli(*args, timeout=120)
        assert result.returncode == 2
        line = _one_error(result.stderr)
        assert "/nonexistent/python3" in line and "not found" in line and "python" in line
    assert not [e for e in read_events(tmp_path / "run") if e["kind"] == "state"]


@pytest.mark.slow
def test_python_without_tensorflow_is_refused(tmp_path: Path) -> None:
    bare = tmp_path / "bare"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(bare)], check=True, timeout=120)
    profile = profile_with_python(tmp_path, str(bare / "bin" / "python"))
    result = cli("up", str(profile), "--no-tui", "--run-dir", str(tmp_path / "run"), timeout=180)
    assert result.returncode == 2
    line = _one_error(result.stderr)
    assert "import tensorflow" in line and "ModuleNotFoundError" in line
    assert not [e for e in read_events(tmp_path / "run") if e["kind"] == "state"]


def test_outputs_that_cannot_be_created_are_named_before_anything_starts(tmp_path: Path) -> None:
    """The launch's one exec per host makes the run dir and the outputs first (exit 98)."""
    blocker = tmp_path / "a-file"
    blocker.write_text("not a directory\n")
    profile = profile_with_python(tmp_path, sys.executable)
    profile.write_text(f'outputs = "{blocker}/outputs"\n' + profile.read_text())
    result = cli("up", str(profile), "--no-tui", "--run-dir", str(tmp_path / "run"), timeout=120)
    assert result.returncode == 2, result.stderr
    line = _one_error(result.stderr)
    assert f"{blocker}/outputs" in line and "cannot create" in line
    assert not [e for e in read_events(tmp_path / "run") if e["kind"] == "state"]
