"""Shared test setup: every test gets its own distlaunch state dir; sshd fixtures from tests.sshd."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.containers import docker_image  # noqa: F401
from tests.webhook import hook  # noqa: F401

pytest_plugins = ["tests.sshd"]

REPO = Path(__file__).resolve().parent.parent


@pytest.fixture(autouse=True)
def distlaunch_home(tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """Runs, logs and preflight files of a test stay in a temp dir, never in ~/.local/state."""
    home = tmp_path_factory.mktemp("distlaunch-home")
    monkeypatch.setenv("DISTLAUNCH_HOME", str(home))
    yield home
