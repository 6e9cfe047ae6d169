"""autolog's SIGTERM during Keras ``fit`` (launcher/autolog/drainsave.py): a stop asked is carried out
at a batch end, or as the fit ends; never swallowed."""

from __future__ import annotations

import os
import signal
import threading
from collections.abc import Iterator

import pytest

from launcher.autolog import drainsave, groupstop


class BackupAndRestore:
    """Named as Keras' (drainsave knows a backup by its class name); saves every batch."""

    def __init__(self) -> None:
        self.save_freq = 1
        self.saves = 0

    def _save_model(self) -> None:
        self.saves += 1


@pytest.fixture
def sigterm_default() -> Iterator[None]:
    previous = signal.signal(signal.SIGTERM, signal.SIG_DFL)
    yield
    signal.signal(signal.SIGTERM, previous)


def test_sigterm_in_the_last_batch_ends_the_process_as_the_fit_ends(sigterm_default: None) -> None:
    """It came after the last batch end checked: the fit ends normally, then the stop is carried out
    (before, the handler was put back and the signal lost: the task trained on until SIGKILL)."""
    stop, backup = drainsave.FitStop(), BackupAndRestore()
    stop.begin([backup], model=None)
    stop.batch_end(0)
    os.kill(os.getpid(), signal.SIGTERM)  # taken by the handler: only a flag
    with pytest.raises(SystemExit) as ended:
        stop.after_fit()
    assert ended.value.code == drainsave.EXIT_CODE == 143
    assert signal.getsignal(signal.SIGTERM) is signal.SIG_DFL


def test_a_fit_without_a_stop_ends_quietly_and_gives_sigterm_back(sigterm_default: None) -> None:
    stop = drainsave.FitStop()
    stop.begin([BackupAndRestore()], model=None)
    stop.batch_end(0)
    stop.after_fit()
    assert signal.getsignal(signal.SIGTERM) is signal.SIG_DFL


def test_a_stop_the_group_agreed_on_past_this_fits_end_is_carried_out_as_it_ends(sigterm_default: None) -> None:
    """A peer asked after the last batch: its batch is never reached in this fit, and the next fit
    (its count starts again) must not stop at an unrelated batch: this worker stops now."""
    stop = drainsave.FitStop()
    stop.begin([BackupAndRestore()], model=None)
    group = groupstop.GroupStop(1, 2)
    group.target, stop.group = 5, group
    group.agreed.set()
    for batch in range(4):
        stop.batch_end(batch)
    with pytest.raises(SystemExit):
        stop.after_fit()


def test_off_the_main_thread_sigterm_is_left_alone(sigterm_default: None) -> None:
    stop = drainsave.FitStop()
    thread = threading.Thread(target=stop.begin, args=([BackupAndRestore()], None))
    thread.start()
    thread.join()
    assert signal.getsignal(signal.SIGTERM) is signal.SIG_DFL
    stop.after_fit()
