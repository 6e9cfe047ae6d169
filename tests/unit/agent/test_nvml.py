"""The NVML gate against the real ``pynvml`` on a host without a driver (this CI machine).

On a GPU host the "no driver" tests skip and the "real GPU" ones run instead.
"""

from __future__ import annotations

import logging
import os
import subprocess
import sys
from collections.abc import Iterator

import pytest

from launcher.agent import nvml

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))


@pytest.fixture(autouse=True)
def fresh_nvml() -> Iterator[None]:
    nvml.reset()
    yield
    nvml.reset()


def _driver_present() -> bool:
    present = nvml.available()
    nvml.reset()
    return present


needs_no_driver = pytest.mark.skipif(_driver_present(), reason="an NVIDIA driver is present here")
needs_driver = pytest.mark.skipif(not _driver_present(), reason="no NVIDIA driver here")


@needs_no_driver
def test_missing_library_is_not_available_and_logged_once(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.DEBUG, logger="launcher.agent.nvml")
    for _ in range(50):
        assert nvml.available() is False
        assert nvml.query("nvmlDeviceGetCount", default=-7) == -7
        assert nvml.device_handle(0) is None
        assert nvml.gpu_stats(0) is None
        assert nvml.compute_processes(0) is None
        assert nvml.process_utilization(0) is None
    assert nvml.device_count() == 0
    init_records = [r for r in caplog.records if r.name == "launcher.agent.nvml"]
    assert len(init_records) == 1, [r.getMessage() for r in init_records]
    assert "LibraryNotFound" in init_records[0].getMessage()


@needs_no_driver
def test_reset_allows_a_second_attempt_and_a_second_log(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.DEBUG, logger="launcher.agent.nvml")
    assert nvml.available() is False
    nvml.reset()
    assert nvml.available() is False
    assert len([r for r in caplog.records if r.name == "launcher.agent.nvml"]) == 2


def test_pynvml_not_installed_is_not_available() -> None:
    # sys.modules[name] = None makes `import pynvml` raise ImportError, as on a host without it
    code = (
        "import sys, logging; sys.modules['pynvml'] = None\n"
        "logging.basicConfig(level=logging.INFO, format='%(message)s')\n"
        "from launcher.agent import nvml\n"
        "print(nvml.available(), nvml.query('nvmlDeviceGetCount', default='dflt'), nvml.gpu_stats(0))\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60,
                          check=True, cwd=REPO, env={**os.environ, "PYTHONPATH": REPO})
    assert done.stdout.split() == ["False", "dflt", "None"]
    assert done.stderr.count("pynvml is not installed") == 1


@needs_driver
def test_real_gpu_stats_and_missing_function_logged_once(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.DEBUG, logger="launcher.agent.nvml")
    assert nvml.available() is True
    assert nvml.device_count() >= 1
    stats = nvml.gpu_stats(0)
    assert stats is not None and stats["mem_total_bytes"] > 0
    assert isinstance(nvml.compute_processes(0), dict)
    for _ in range(5):
        assert nvml.query("nvmlNoSuchFunctionAnywhere", default="x") == "x"
    missing = [r for r in caplog.records if "nvmlNoSuchFunctionAnywhere" in r.getMessage()]
    assert len(missing) == 1
