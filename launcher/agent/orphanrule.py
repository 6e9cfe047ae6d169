"""The orphan rule: a run's tasks on a host stop when no supervisor was seen for the orphan grace.

One rule for the host agent and for the single-task ``run`` verb. A supervisor is seen as a fresh
follower (the host agent says so: ``present``), a touch of the run's ``lease`` file since the last
look (the host agent touches it while a follower is fresh; for ``run`` it is the only sign). The
grace is judged by the lease's time and by this process's monotonic clock, whichever says so
first: a wall clock set back must not keep tasks that a moved run replaced.

Stdlib-only, Python >= 3.9 (runs on hosts from the agent zipapp).
"""

from __future__ import annotations

import os
import time
from typing import Optional

LEASE_NAME = "lease"


class OrphanRule:
    def __init__(self, run_dir: str, grace: float) -> None:
        self.run_dir = run_dir
        self.grace = grace
        self._started_at = time.time()
        self._present_mono = time.monotonic()  # when a supervisor was last seen
        self._lease_seen: Optional[float] = None  # the lease's time at the last look

    def present(self) -> None:
        """A supervisor is there now."""
        self._present_mono = time.monotonic()

    def lost(self, now: Optional[float] = None) -> bool:
        """No supervisor for the grace."""
        now = time.time() if now is None else now
        mono = time.monotonic()
        try:
            lease = os.stat(os.path.join(self.run_dir, LEASE_NAME)).st_mtime
        except OSError:
            lease = 0.0
        if self._lease_seen is not None and lease != self._lease_seen:
            self._present_mono = mono  # touched since the last look
        self._lease_seen = lease
        if mono - self._present_mono > self.grace:
            return True
        return now - max(lease, self._started_at) > self.grace
