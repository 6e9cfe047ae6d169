"""A real host agent from the real zipapp, for every test of this folder."""

from __future__ import annotations

from pathlib import Path

import pytest

from launcher.remote import agentpack
from tests.unit.agent.test_agent_run import AgentHarness


@pytest.fixture(scope="module")
def pyz(tmp_path_factory) -> Path:
    path = tmp_path_factory.mktemp("agent") / "agent.pyz"
    path.write_bytes(agentpack.build_agent_zipapp())
    return path


@pytest.fixture
def host(tmp_path, pyz):
    harness = AgentHarness(tmp_path / "host", pyz)
    harness.root.mkdir()
    yield harness
    harness.cleanup()
