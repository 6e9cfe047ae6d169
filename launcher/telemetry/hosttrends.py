"""Each host's recent readings as series, for the hosts view's sparklines: network in and out,
and per GPU its utilisation, temperature and power. A trend says more than a number where a value
moves (a GPU that heats and then slows, a network that stalls every few seconds).

Every task on a host carries the same machine reading in its sample, and tasks sharing a GPU the
same GPU reading: a series takes a point at most every ``EVERY_S`` seconds of event time.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from launcher import events as ev

#: points kept per series
POINTS = 60
#: the least event time between two points of one series
EVERY_S = 0.5

#: the machine's series, by the reading's key
MACHINE_SERIES = ("net_rx_bytes_per_s", "net_tx_bytes_per_s")
#: each GPU's series, by its entry's key
GPU_SERIES = ("util_percent", "temp_c", "power_w")


@dataclass
class Series:
    points: deque[float] = field(default_factory=lambda: deque(maxlen=POINTS))
    last_ts: float = float("-inf")

    def add(self, ts: float, value: Any) -> None:
        number = ev.finite(value) if value is not None else None
        if number is None or ts - self.last_ts < EVERY_S:
            return
        self.points.append(number)
        self.last_ts = ts


class HostTrends:
    """``series(host, name)``: the points of one series (``net_rx_bytes_per_s``, ``gpu1/temp_c``)."""

    def __init__(self) -> None:
        self._series: dict[tuple[str, str], Series] = {}

    def _add(self, host: str, name: str, ts: float, value: Any) -> None:
        key = (host, name)
        series = self._series.get(key)
        if series is None:
            series = self._series[key] = Series()
        series.add(ts, value)

    def add(self, host: str, ts: float, machine: Mapping[str, Any] | None,
            gpus: Iterable[Mapping[str, Any]]) -> None:
        if machine is not None:
            for name in MACHINE_SERIES:
                self._add(host, name, ts, machine.get(name))
        for gpu in gpus:
            index = gpu.get("index")
            if type(index) is int:
                for name in GPU_SERIES:
                    self._add(host, f"gpu{index}/{name}", ts, gpu.get(name))

    def series(self, host: str, name: str) -> list[float]:
        found = self._series.get((host, name))
        return list(found.points) if found is not None else []
