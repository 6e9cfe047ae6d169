"""StopSignals' decisions, signal by signal, on a clock the test moves (the real processes are in
tests/integration/test_signals.py and tests/tui/test_dashboard_signals.py)."""

from __future__ import annotations

import signal

import pytest

from launcher.supervise.stopsignals import SAME_STOP_SECONDS, JobSignals, StoppedBeforeStart, StopSignals


class Recorder:
    def __init__(self) -> None:
        self.now = 100.0
        self.stops: list[tuple[str, str]] = []
        self.hangups = 0
        self.leaves = 0
        self.signals = StopSignals(lambda reason, origin: self.stops.append((reason, origin)), self.hangup,
                                   clock=lambda: self.now)
        self.signals.leave = self.leave

    def hangup(self) -> None:
        self.hangups += 1

    def leave(self) -> None:
        self.leaves += 1

    def send(self, signum: int) -> None:
        self.signals._on_signal(signum, None)


def test_sigterm_twice_is_one_stop_and_a_later_sigterm_too() -> None:
    r = Recorder()
    r.send(signal.SIGTERM)
    r.send(signal.SIGTERM)
    r.now += SAME_STOP_SECONDS + 5
    r.send(signal.SIGTERM)
    assert r.stops == [("stopped by SIGTERM", "SIGTERM")] and r.leaves == 1
    assert r.signals.exit_code == 143


def test_a_second_ctrl_c_within_2s_is_the_same_stop_later_it_abandons_the_wait() -> None:
    r = Recorder()
    r.send(signal.SIGINT)
    r.now += SAME_STOP_SECONDS - 0.5
    r.send(signal.SIGINT)
    r.send(signal.SIGTERM)
    assert r.stops == [("stopped by SIGINT (Ctrl-C)", "SIGINT")] and r.signals.exit_code == 130
    r.now += 1.0
    with pytest.raises(KeyboardInterrupt):
        r.send(signal.SIGINT)


def test_sighup_detaches_once_and_not_during_a_stop() -> None:
    r = Recorder()
    r.send(signal.SIGHUP)
    r.send(signal.SIGHUP)
    r.send(signal.SIGTERM)  # the job is being detached: it is not torn down as well
    assert (r.hangups, r.stops, r.leaves, r.signals.exit_code) == (1, [], 1, None)
    stopping = Recorder()
    stopping.send(signal.SIGTERM)
    stopping.send(signal.SIGHUP)
    assert (stopping.hangups, len(stopping.stops)) == (0, 1)


def test_a_stop_before_the_launch_is_no_exception_an_except_exception_takes() -> None:
    signals = JobSignals("r")
    swallowed = False
    with pytest.raises(StoppedBeforeStart, match="stopped by SIGTERM"):
        try:
            signals._on_signal(signal.SIGTERM, None)
        except Exception:  # a host's error handler on the preflight's way must not end the stop
            swallowed = True
    assert not swallowed and signals.exit_code == 143


def test_a_stop_lost_on_its_way_up_stops_the_launch_at_bind() -> None:
    signals = JobSignals("r")
    with pytest.raises(StoppedBeforeStart):
        signals._on_signal(signal.SIGINT, None)
    with pytest.raises(StoppedBeforeStart, match=r"stopped by SIGINT \(Ctrl-C\)"):
        signals.bind(object())  # type: ignore[arg-type]
    assert signals.sup is None
