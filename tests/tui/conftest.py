"""Fixtures of the dashboard tests."""

from __future__ import annotations

import time
from collections.abc import Iterator

import pytest


@pytest.fixture
def utc_clock(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """Views that show wall times of day show the same picture in every time zone."""
    monkeypatch.setenv("TZ", "UTC")
    time.tzset()
    yield
    monkeypatch.undo()
    time.tzset()
