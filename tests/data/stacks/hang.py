"""The hung program the samples in this directory were taken from (see README.md)."""
import faulthandler
import signal
import sys
import threading
import time

faulthandler.register(signal.SIGUSR2, open(sys.argv[1], "a"), all_threads=True, chain=False)  # noqa: SIM115


def heartbeat():
    while True:
        time.sleep(1)


def wait_for_peer():
    threading.Thread(target=heartbeat, name="heartbeat", daemon=True).start()
    while True:
        time.sleep(1)


wait_for_peer()
