"""The hosts view shows each GPU's health (issue 58 §2): temperature and power with their trends,
power against its limit, SM clock, what holds it back, ECC errors and the latest Xid; the network
rates with theirs. Driven through Pilot on a recorded job whose worker:0 GPU heats and then errs."""

from __future__ import annotations

from launcher import events as ev
from launcher.telemetry.celltext import SPARK_LEVELS
from tests.tui.tui_support import RUN, T0, load, make_app, recorded_job


def _heating(steps: int) -> list[ev.Event]:
    out: list[ev.Event] = []
    for s in range(steps):
        ts = T0 + 20 + s
        xid = {"xid_count": 1, "xid": 79} if s == steps - 1 else {"xid_count": 0, "xid": None}
        out.append(ev.sample_event(
            RUN, "worker:0", cpu_percent=90.0, rss_bytes=2**30, ts=ts, source="psutil+nvml",
            gpus=[{"index": 0, "util_percent": 95.0 - s, "mem_used_bytes": 3 * 2**30, "mem_total_bytes": 16 * 2**30,
                   "temp_c": 70.0 + 3 * s, "power_w": 650.0 + s, "power_limit_w": 700.0,
                   "sm_clock_mhz": 1980.0 - 50 * s, "sm_clock_max_mhz": 1980.0,
                   "throttle": ["hw_thermal"] if s > 2 else [],
                   "ecc_corrected": 12, "ecc_uncorrected": 0, **xid}],
            host={"cpu_percent": 40.0, "cpus": 16, "mem_used_bytes": 8 * 2**30, "mem_total_bytes": 64 * 2**30,
                  "net_rx_bytes_per_s": 1e6 * (1 + s % 3), "net_tx_bytes_per_s": 2e5}))
    out.append(ev.condition_event(RUN, "worker:0", ev.GPU_ERROR, True, "GPU 0 on gpu1: Xid 79 (fell off the bus)",
                                  ts=T0 + 20 + steps))
    return out


async def test_the_hosts_view_shows_each_gpus_health_and_its_trends() -> None:
    events = recorded_job(steps=3, fail_worker=False) + _heating(6)
    app = make_app(events)
    async with app.run_test(size=(220, 50)) as pilot:
        await load(pilot, app, len(events))
        await pilot.press("h")
        text = app.widgets.hosts_panel.plain
        host = text[text.index("gpu1"):]
        lines = host.splitlines()
        gpu = next(i for i, line in enumerate(lines) if "GPU0" in line)
        health = lines[gpu + 1]
        assert "85°C" in health and "655/700 W" in health and "SM 1730/1980 MHz" in health
        assert "ECC 12 corrected, 0 uncorrectable" in health
        assert "throttled: hw_thermal" in health and "Xid 79 (fell off the bus)" in health
        temp = health[health.index("85°C") + 4:].split()[0]
        assert len(temp) == 6 and set(temp) <= set(SPARK_LEVELS) and temp[0] == SPARK_LEVELS[0]  # rising
        assert temp[-1] == SPARK_LEVELS[-1]
        assert "util " in health
        network = next(line for line in lines if "network in" in line)
        assert "network in 2.9M/s ▁▅█▁▅█ out 195K/s ▄▄▄▄▄▄" in network  # in: 1, 2, 3 MB/s twice; out: steady
        worker = next(line for line in lines if line.strip().startswith("worker:0"))
        assert "GPU_ERROR" in worker


async def test_a_gpu_without_health_readings_has_no_health_line() -> None:
    events = recorded_job(steps=3, fail_worker=False)
    app = make_app(events)
    async with app.run_test(size=(200, 50)) as pilot:
        await load(pilot, app, len(events))
        await pilot.press("h")
        lines = app.widgets.hosts_panel.plain.splitlines()
        gpu = next(i for i, line in enumerate(lines) if "GPU0" in line)
        assert lines[gpu + 1].strip().startswith("chief:0")  # straight on to the tasks
        assert "°C" not in app.widgets.hosts_panel.plain
