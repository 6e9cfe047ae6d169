"""The host agent's network and disk figures (issue 58 §2): bytes per second over the interval
between two readings of /proc's counters, loopback left out; none where /proc has none. And the
hosts view's line of them."""

from __future__ import annotations

import pytest

from launcher.agent import readings
from launcher.agent.readings import HostReader
from tui.hosts_view import io_text


def test_rates_are_the_counters_difference_over_the_interval(monkeypatch: pytest.MonkeyPatch) -> None:
    counters = iter([(1000, 500), (1000 + 4_000_000, 500 + 1_000_000)])
    written = iter([10_000, 10_000 + 2_000_000])
    clock = iter([100.0, 102.0])
    monkeypatch.setattr(HostReader, "_net_totals", staticmethod(lambda: next(counters)))
    monkeypatch.setattr(HostReader, "_disk_written", staticmethod(lambda: next(written)))
    monkeypatch.setattr(readings.time, "monotonic", lambda: next(clock))
    reading = HostReader().read()
    assert (reading["net_rx_bytes_per_s"], reading["net_tx_bytes_per_s"], reading["disk_write_bytes_per_s"]) == (
        2_000_000.0, 500_000.0, 1_000_000.0)


def test_no_counters_give_no_rates_and_a_reset_counter_gives_none(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(HostReader, "_net_totals", staticmethod(lambda: None))
    monkeypatch.setattr(HostReader, "_disk_written", staticmethod(lambda: None))
    reading = HostReader().read()
    assert reading["net_rx_bytes_per_s"] is None and reading["disk_write_bytes_per_s"] is None
    written = iter([5_000, 100])  # a device went away: the total fell
    monkeypatch.setattr(HostReader, "_disk_written", staticmethod(lambda: next(written)))
    monkeypatch.setattr(HostReader, "_net_totals", staticmethod(lambda: (0, 0)))
    assert HostReader().read()["disk_write_bytes_per_s"] is None


def test_this_machines_counters_read_as_rates_of_at_least_zero() -> None:
    reader = HostReader()
    reading = reader.read()
    for key in ("net_rx_bytes_per_s", "net_tx_bytes_per_s", "disk_write_bytes_per_s"):
        assert reading[key] is None or reading[key] >= 0


def test_the_hosts_view_says_network_disk_and_free_space() -> None:
    line = io_text({"net_rx_bytes_per_s": 1_234_567.0, "net_tx_bytes_per_s": 3000.0,
                    "disk_write_bytes_per_s": 10_000_000, "outputs_free_bytes": 120 * 2**30,
                    "run_dir_free_bytes": 88 * 2**30})
    assert line == "network in 1.2M/s out 2.9K/s  disk writes 9.5M/s  free: outputs 120G, run dir 88G"
    assert io_text({}) == ""
