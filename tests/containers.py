"""Fixtures for the container tests: a Docker daemon and the test image (tests/containerimage.py).

``docker_image`` (session scope) starts dockerd where none answers and we are root, makes sure the
image is present (seconds when it is; an import from the cached tarball, or a build, when not) and
returns its tag. Where Docker cannot be had it skips with the reason, unless
``DISTLAUNCH_REQUIRE_DOCKER=1`` (CI), where it fails instead. Registered in tests/conftest.py.
"""

from __future__ import annotations

import os

import pytest

from tests.containerimage import IMAGE, DockerUnavailable, ImageBuildError, ensure_dockerd, ensure_image


def docker_unavailable() -> str | None:
    """Why the container tests cannot run here, or None once a daemon answers and the image is present."""
    try:
        ensure_dockerd()
        ensure_image()
    except (DockerUnavailable, ImageBuildError) as e:
        return str(e)
    return None


@pytest.fixture(scope="session")
def docker_image() -> str:
    """The test image's tag (``distlaunch-test:tf2.21``), with a daemon that runs it."""
    reason = docker_unavailable()
    if reason is not None:
        if os.environ.get("DISTLAUNCH_REQUIRE_DOCKER") == "1":
            pytest.fail(f"DISTLAUNCH_REQUIRE_DOCKER=1 but {reason}")
        pytest.skip(f"Docker: {reason}")
    return IMAGE
