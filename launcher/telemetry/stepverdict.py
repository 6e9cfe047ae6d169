"""Each task's step-time split and the verdict that names why it is slow (issue 37).

Autolog measures the split in each task (``launcher/autolog/steptime.py``: what each part is and
where it comes from) and sends it as metric values ``step_time/input`` ... ``step_time/other``
(shares of the step over the last ten seconds) and ``step_time/seconds_per_step``
(``launcher/protocol/metricnames.py`` declares every such name); a
ParameterServerStrategy coordinator also sends ``closures_per_s/worker:N`` and
``closure_latency_s/worker:N``. This module keeps them per task and judges each task against the
others, which only the launcher sees together:

- ``input-bound``: input is the largest part and at least 40 % of the step;
- ``waiting for worker:1``: peers is the largest part (>= 30 %) and one peer is why: under
  MultiWorkerMirrored, the worker that itself waits least for the others (its own input and
  compute hold every all-reduce); under ParameterServerStrategy, the worker the coordinator sees
  finish the fewest closures (below 75 % of the others' median), else a parameter server whose
  CPU is saturated (``waiting for ps:0``); with no culprit, ``waiting for peers``; and where the
  all-reduce is not timed (inside XLA) a task that reads compute-bound while a synchronous peer
  (the same seconds per step) is input-bound is waiting for that peer;
- ``compute-bound``: compute is at least half of the step;
- ``other-bound``: time between steps (Python, callbacks, checkpoints, logging) is the largest
  part and at least 40 %;
- ``balanced``: none of these.

A stall raised overrules the shares: they are the last window before the step stopped, and a
frozen task's window says nothing of the freeze (its peer, waiting on the frozen one in its
all-reduce, may even read as the one waited for). While a task is stalled, the culprit is the
suspect the stall's stacks capture named, else a task whose process is stopped (state T, as the
sampler saw it), else the stalled tasks themselves: a culprit reads ``stalled``, and a stalled
task or one whose shares say it waits reads ``waiting for <culprit>``, never for a healthy peer.

A task with train calls but no split yet (a job of two calls: the first traces its function, the
second the timed twin) sends ``step_time/untimed_calls``; ``missing`` says so in words, so that
status, ``--no-tui`` and the dashboard never leave the split out without a reason.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Mapping
from dataclasses import dataclass, field
from statistics import median
from typing import Any

from launcher.protocol.metricnames import (
    CLOSURE_LATENCY_S,
    CLOSURES_PER_S,
    PARTS,
    SECONDS_PER_STEP,
    STEP_TIME,
    UNTIMED_CALLS,
)

HISTORY_POINTS = 300
#: a split or closure rate older than this (seconds, event time) is no longer "now"
FRESH_S = 30.0
INPUT_BOUND = 0.4
PEERS_BOUND = 0.3
COMPUTE_BOUND = 0.5
OTHER_BOUND = 0.4
#: a worker below this fraction of the others' median closures/s is the slow one
SLOW_WORKER = 0.75
#: a ps at or above this CPU percent of every core of its host is saturated
BUSY_PS_CPU = 90.0
#: synchronous peers: seconds per step this close (a fraction) to each other
SYNC_TOLERANCE = 0.1
#: MultiWorkerMirrored: a peer waits this much less (share of its step) than the waiting task
MWMS_GAP = 0.2


@dataclass(frozen=True)
class Split:
    input: float
    compute: float
    peers: float
    other: float
    seconds_per_step: float | None
    ts: float

    def share(self, part: str) -> float:
        return float(getattr(self, part))

    def largest(self) -> str:
        return max(PARTS, key=self.share)


@dataclass
class Closures:
    per_s: float
    latency_s: float | None
    ts: float


@dataclass
class StepTimes:
    splits: dict[str, Split] = field(default_factory=dict)
    history: dict[str, deque[Split]] = field(default_factory=dict)
    #: worker task id -> its closures as the coordinator sees them
    closures: dict[str, Closures] = field(default_factory=dict)
    #: each task's latest CPU percent and its host's cores (JobView's samples): a saturated ps
    cpu: dict[str, float | None] = field(default_factory=dict)
    cores: dict[str, int] = field(default_factory=dict)
    #: task id -> its train calls while none was timed (no split yet)
    untimed: dict[str, int] = field(default_factory=dict)
    #: tasks with a stall raised (JobView keeps it with the `stalled` condition)
    stalled: set[str] = field(default_factory=set)
    #: workers lost with their host: the coordinator may still count their closures, but no one
    #: waits for them any more (issue 55: a PSS job goes on without them)
    gone: set[str] = field(default_factory=set)
    #: the suspect the latest stall's stacks capture named, while a stall lasts
    stall_suspect: str | None = None
    #: each task's process state as last sampled (R, S, D, T, ...)
    proc_states: dict[str, str] = field(default_factory=dict)

    def stall(self, task_id: str, active: bool) -> None:
        """A stall was raised on the task, or is over (its step advanced, or the task ended)."""
        if active:
            self.stalled.add(task_id)
        else:
            self.stalled.discard(task_id)
        if not self.stalled:
            self.stall_suspect = None

    def stall_culprits(self) -> list[str]:
        """Who holds the stalled job, best named first; empty while no stall is raised."""
        if not self.stalled:
            return []
        if self.stall_suspect:
            return [self.stall_suspect]
        frozen = sorted(t for t, state in self.proc_states.items() if state[:1] in ("T", "t"))
        return frozen or sorted(self.stalled)

    def apply(self, task_id: str, ts: float, values: Mapping[str, Any]) -> bool:
        """Take a metric event's values; True when they held a split or closures."""
        changed = False
        parts = {p: values.get(STEP_TIME + p) for p in PARTS}
        if all(isinstance(v, (int, float)) for v in parts.values()):
            sps = values.get(SECONDS_PER_STEP)
            split = Split(**{p: float(v) for p, v in parts.items() if v is not None},
                          seconds_per_step=float(sps) if isinstance(sps, (int, float)) else None, ts=ts)
            self.splits[task_id] = split
            self.history.setdefault(task_id, deque(maxlen=HISTORY_POINTS)).append(split)
            self.untimed.pop(task_id, None)
            changed = True
        elif isinstance(values.get(UNTIMED_CALLS), (int, float)) and task_id not in self.splits:
            self.untimed[task_id] = int(values[UNTIMED_CALLS])
            changed = True
        for name, value in values.items():
            if name.startswith(CLOSURES_PER_S) and isinstance(value, (int, float)):
                worker = name[len(CLOSURES_PER_S):]
                latency = values.get(CLOSURE_LATENCY_S + worker)
                self.closures[worker] = Closures(float(value), float(latency) if isinstance(
                    latency, (int, float)) else None, ts)
                changed = True
        return changed

    def fresh(self, task_id: str, now: float | None) -> Split | None:
        split = self.splits.get(task_id)
        if split is None or (now is not None and now - split.ts > FRESH_S):
            return None
        return split

    def slow_worker(self, now: float | None = None) -> str | None:
        """The worker the coordinator sees finish the fewest closures, when it is clearly slowest."""
        rates = {w: c.per_s for w, c in self.closures.items()
                 if w not in self.gone and (now is None or now - c.ts <= FRESH_S)}
        if len(rates) < 2:
            return None
        slowest = min(rates, key=lambda w: rates[w])
        others = [r for w, r in rates.items() if w != slowest]
        typical = median(others)
        return slowest if typical > 0 and rates[slowest] < SLOW_WORKER * typical else None

    def verdict(self, task_id: str, *, now: float | None = None,
                cpu: Mapping[str, float | None] | None = None) -> str | None:
        judged = self._verdict(task_id, now, cpu)
        culprits = self.stall_culprits()
        if not culprits:
            return judged
        if task_id in culprits:
            return "stalled"
        if task_id in self.stalled or (judged or "").startswith("waiting for "):
            return "waiting for " + culprits[0]
        return judged

    def _verdict(self, task_id: str, now: float | None, cpu: Mapping[str, float | None] | None) -> str | None:
        split = self.fresh(task_id, now)
        if split is None:
            if task_id in self.closures and task_id == self.slow_worker(now):
                return "slowest worker"
            return None
        largest = split.largest()
        if largest == "input" and split.input >= INPUT_BOUND:
            return "input-bound"
        if largest == "peers" and split.peers >= PEERS_BOUND:
            return "waiting for " + (self._culprit(task_id, now, self.cpu if cpu is None else cpu) or "peers")
        if split.compute >= COMPUTE_BOUND:
            held = self._input_bound_peer(task_id, split, now)
            return f"waiting for {held}" if held else "compute-bound"
        if largest == "other" and split.other >= OTHER_BOUND:
            return "other-bound"
        return "balanced"

    def _input_bound_peer(self, task_id: str, split: Split, now: float | None) -> str | None:
        """A synchronous peer (the same seconds per step, within 10 %) that is input-bound while this
        task computes: where the all-reduce is not timed (inside XLA), its wait reads as compute."""
        if split.seconds_per_step is None or not task_id.startswith(("worker:", "chief:")):
            return None
        for other, theirs in self.splits.items():
            if other == task_id or not other.startswith(("worker:", "chief:")) or theirs.seconds_per_step is None:
                continue
            if now is not None and now - theirs.ts > FRESH_S:
                continue
            if theirs.largest() == "input" and theirs.input >= INPUT_BOUND and \
                    abs(theirs.seconds_per_step - split.seconds_per_step) <= SYNC_TOLERANCE * split.seconds_per_step:
                return other
        return None

    def _culprit(self, task_id: str, now: float | None, cpu: Mapping[str, float | None]) -> str | None:
        slow = self.slow_worker(now)
        if slow is not None and slow != task_id:
            return slow
        mine = self.splits[task_id]
        peers = {t: s for t, s in self.splits.items()
                 if t != task_id and t.split(":")[0] in ("worker", "chief") and (now is None or now - s.ts <= FRESH_S)}
        if peers:
            least = min(peers, key=lambda t: peers[t].peers)
            if peers[least].peers <= mine.peers - MWMS_GAP:
                return least
        busy = {t: c for t, c in cpu.items()
                if t.startswith("ps:") and c is not None and c >= BUSY_PS_CPU * self.cores.get(t, 1)}
        if busy:
            return max(busy, key=lambda t: busy[t] or 0.0)
        return None

    def missing(self, task_id: str) -> str | None:
        """Why a task that made train calls has no split: ``no step timed in 2 train calls (...)``."""
        calls = self.untimed.get(task_id)
        if calls is None or task_id in self.splits:
            return None
        return (f"no step timed in {calls} train call{'s' if calls != 1 else ''} "
                "(a function's first call traces it, the second its timed twin)")

    def as_json(self, task_id: str, *, now: float | None = None,
                cpu: Mapping[str, float | None] | None = None) -> dict[str, Any] | None:
        """``status --json``'s ``step_time`` of a task (shares rounded to 0.001), or None."""
        split = self.splits.get(task_id)
        if split is None:
            return None
        return {"input": round(split.input, 3), "compute": round(split.compute, 3),
                "peers": round(split.peers, 3), "other": round(split.other, 3),
                "seconds_per_step": split.seconds_per_step, "verdict": self.verdict(task_id, now=now, cpu=cpu),
                "age_s": round(now - split.ts, 1) if now is not None else None}


def bar(split: Split, width: int = 10) -> list[tuple[str, int]]:
    """The parts as cells of a stacked bar of ``width`` cells (largest remainders, so they sum up)."""
    raw = {p: split.share(p) * width for p in PARTS}
    cells = {p: int(v) for p, v in raw.items()}
    spare = width - sum(cells.values())
    for p in sorted(PARTS, key=lambda p: raw[p] - cells[p], reverse=True)[:max(0, spare)]:
        cells[p] += 1
    return [(p, cells[p]) for p in PARTS if cells[p]]


def percent_text(split: Split) -> str:
    """``input 62% compute 30% peers 5% other 3%``: the split in words for a line of text."""
    return " ".join(f"{p} {split.share(p) * 100:.0f}%" for p in PARTS)
