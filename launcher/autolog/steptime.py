"""Where a task's step time goes: input, compute, waiting for peers, other (issue 37).

The clock the patches of ``launcher.autolog.stepwatch`` feed. What is measured, and where:

- a **train call** (a ``tf.function`` call that applies or takes gradients or reads an iterator,
  found by ``patches`` and ``trainfn``; a TF1 ``Session.run`` of a train op; a
  ``ClusterCoordinator.schedule`` of a train step): two clock reads on the training thread
  around the call; every one counted (``calls``: the step where nothing else gives one);
- **input**, outside a call: the eager ``IteratorGetNext`` of a Python loop (``for x in dataset``),
  timed around the op; inside a call (Keras ``fit``, ``train_step(iterator)``): the graph's own
  ``IteratorGetNext``, between two ``Timestamp`` ops added beside it when the function is traced,
  summed into a float64 resource on this task's CPU that the reader thread reads once a tick;
- **peers**, inside a call: the graph's collective all-reduce / all-gather (MultiWorkerMirrored),
  timed the same way (from its input being ready to its output being ready: mostly waiting for
  the slowest peer); on a ParameterServerStrategy coordinator, the time ``schedule`` blocks on a
  full closure queue and ``join`` waits;
- **compute** = the calls' time less the input and peers inside them; **other** = the wall time
  between the ends of consecutive calls less the calls and the eager input (Python, callbacks,
  logging, checkpoints).

Shares are over the steps that ended in the last ``WINDOW_S`` seconds and sum to 1; a job younger
than that: over the steps since its train calls stopped tracing (``StepClock.origin``). The reader
thread turns them into metric values (``step_time/input`` ... ``step_time/seconds_per_step``) and,
on a coordinator, each worker's ``closures_per_s/worker:N`` and ``closure_latency_s/worker:N``
(their names: ``launcher/protocol/metricnames.py``).

Stdlib-only at import (Python >= 3.9); ``stepwatch`` does the TensorFlow parts.
"""

from __future__ import annotations

import math
import threading
import time
from collections import deque
from typing import Callable, Deque, Dict, List, NamedTuple, Optional, Tuple

from launcher.protocol.metricnames import CLOSURE_LATENCY_S, CLOSURES_PER_S, STEP_TIME, UNTIMED_CALLS

#: the window the shares are over (seconds of steps that ended, newest last)
WINDOW_S = 10.0
#: what a timed call costs (seconds): the timed twin's Timestamp ops, and above all TensorFlow
#: switching between two functions (measured by benchmarks/step_time_overhead.py --micro)...
SAMPLE_COST_S = 200e-6
#: ...kept at this share of the training time by timing one call in N (N from the steps' length:
#: every call for steps of 80 ms or more, one in 200 for steps of 0.4 ms)
TARGET_SHARE = 0.0025
MAX_EVERY = 256
#: ...after the first this many calls, all timed: one call's length stands for no job's (the first
#: steps may take batches an input pipeline buffered while the function traced; a short job has
#: few calls to sample), and they cost a few milliseconds once
TIMED_FIRST = 20
#: agent -> task: the port autolog starts TensorFlow's profiler server on (`distlaunch profile`)
PROFILER_PORT_ENV = "DISTLAUNCH_PROFILER_PORT"
#: the file in a task's dir that asks for its profiler server (launcher/commands/profile.py)
PROFILER_WANTED = "profiler-wanted"

_now = time.perf_counter
#: the attribute patches sets on a tf.function known to train (its value says how it holds its loss)
TRAIN_MARK = "_distlaunch_trains"
#: per thread, the outermost tf.function being called (``fn``): the owner of what its trace adds
calling = threading.local()


def between_calls() -> bool:
    """On the thread that runs train calls, outside any tf.function call."""
    return threading.get_ident() == clock.train_thread and calling.__dict__.get("fn") is None


class Snapshot(NamedTuple):
    at: float
    last_end: Optional[float]
    calls: int
    sampled: int
    call_s: float
    eager_input_s: float
    wait_s: float
    outside_wait_s: float
    graph_input_s: float
    graph_peers_s: float
    timed_call_s: float
    step: Optional[int]


class StepClock:
    """Counters the training thread bumps (plain float adds: the GIL makes each one whole) and the
    reader thread snapshots once a tick."""

    def __init__(self) -> None:
        self.calls = 0  # every train call
        self.sampled = 0  # the calls timed (every one for long steps, else one in `every`)
        self.call_s = 0.0  # the timed calls' seconds
        #: one train call in this many is timed (TARGET_SHARE of the steps' time at most)
        self.every = 1
        self.last_end: Optional[float] = None
        self.eager_input_s = 0.0
        self.wait_s = 0.0  # coordinator: schedule blocked (peers, inside a call)
        self.outside_wait_s = 0.0  # coordinator: join waiting (peers, between calls)
        #: readers of the in-graph accumulators (seconds so far): input, peers
        self.graph_reads: Dict[str, Callable[[], float]] = {}
        self.history: Deque[Snapshot] = deque()
        #: coordinator: worker index -> [closures finished, their seconds]; and the window's history
        self.closures: Dict[int, List[float]] = {}
        self.closure_history: Deque[Tuple[float, Dict[int, Tuple[float, float]]]] = deque()
        self.timed_call_s = 0.0  # the calls the timed twin ran (what the in-graph parts are a share of)
        #: the in-graph parts' shares of a timed call, as last measured (a window without a timed call)
        self.ratios = (0.0, 0.0)
        self.on = True
        self.train_thread: Optional[int] = None  # the thread of the latest train call
        #: the counters after the latest call that traced while none was timed: a split of a job
        #: younger than the window starts there (the steps before the first tick count, tracing not)
        self.origin: Optional[Snapshot] = None
        self.splits = 0  # splits given so far

    # -- the training thread -------------------------------------------------------------------

    def call_done(self, started: float, ended: float, waited: float = 0.0, timed: bool = False,
                  counted: bool = False) -> None:
        """A timed train call ended; ``counted``: ``calls`` already counts it; ``timed``: the timed twin ran it."""
        self.train_thread = threading.get_ident()
        if not counted:
            self.calls += 1
        self.sampled += 1
        self.call_s += ended - started
        if timed:
            self.timed_call_s += ended - started
        self.wait_s += waited
        self.last_end = ended
        if self.sampled >= TIMED_FIRST:
            mean = self.call_s / self.sampled
            self.every = max(1, min(MAX_EVERY, math.ceil(SAMPLE_COST_S / (TARGET_SHARE * mean)) if mean > 0 else 1))

    def skip(self) -> bool:
        """Count this train call; True: do not time it (all but one in ``every``)."""
        self.calls += 1
        return self.calls % self.every != 0

    def first_call(self, ended: float, new: bool = False) -> None:
        """A call that traced: its time is not a step's, but the next step starts at its end;
        ``new``: a train function's first call (a step ``calls`` counts)."""
        self.train_thread = threading.get_ident()
        self.last_end = ended
        if new:
            self.calls += 1
        if self.sampled == 0:  # reads the in-graph parts: once or twice a process
            try:
                self.origin = self.snapshot(None)._replace(at=ended)
            except Exception:  # on the training thread, after the user's call: never into it
                self.origin = None

    def closure_done(self, worker: int, seconds: float) -> None:
        counts = self.closures.get(worker)
        if counts is None:
            counts = self.closures[worker] = [0.0, 0.0]
        counts[0] += 1
        counts[1] += seconds

    # -- the reader thread ---------------------------------------------------------------------

    def snapshot(self, step: Optional[int]) -> Snapshot:
        graph = {name: read() for name, read in list(self.graph_reads.items())}
        return Snapshot(at=_now(), last_end=self.last_end, calls=self.calls, sampled=self.sampled,
                        call_s=self.call_s,
                        eager_input_s=self.eager_input_s, wait_s=self.wait_s,
                        outside_wait_s=self.outside_wait_s,
                        graph_input_s=graph.get("input", 0.0), graph_peers_s=graph.get("peers", 0.0),
                        timed_call_s=self.timed_call_s,
                        step=step)

    def tick(self, step: Optional[int]) -> Dict[str, float]:
        """The values to report now: the split over the window, and closures per worker."""
        values: Dict[str, float] = {}
        now = self.snapshot(step)
        self.history.append(now)
        while len(self.history) > 2 and now.at - self.history[1].at >= WINDOW_S:
            self.history.popleft()
        # since a step ended; in a job younger than the window, since its calls stopped tracing
        base = next((s for s in list(self.history)[:-1] if s.last_end is not None), None)
        if self.origin is not None and (base is None or self.origin.at > base.at):
            base = self.origin
        if base is not None:
            measured = inside_ratios(base, now)
            if measured is not None:
                self.ratios = measured
        split = shares(base, now, self.ratios) if base is not None else None
        if split is not None:
            self.splits += 1
            values.update({STEP_TIME + name: round(value, 4) for name, value in split.items()})
        elif self.splits == 0 and now.calls > 0:
            values[UNTIMED_CALLS] = float(now.calls)
        values.update(self._closure_values(now.at))
        return values

    def _closure_values(self, at: float) -> Dict[str, float]:
        if not self.closures:
            return {}
        current = {w: (c[0], c[1]) for w, c in list(self.closures.items())}
        self.closure_history.append((at, current))
        while len(self.closure_history) > 2 and at - self.closure_history[1][0] >= WINDOW_S:
            self.closure_history.popleft()
        then, before = self.closure_history[0]
        span = at - then
        values: Dict[str, float] = {}
        if span <= 0:
            return values
        for worker, (count, seconds) in current.items():
            done = count - before.get(worker, (0.0, 0.0))[0]
            spent = seconds - before.get(worker, (0.0, 0.0))[1]
            values[CLOSURES_PER_S + "worker:%d" % worker] = round(done / span, 3)
            if done > 0:
                values[CLOSURE_LATENCY_S + "worker:%d" % worker] = round(spent / done, 5)
        return values


def inside_ratios(old: Snapshot, new: Snapshot) -> Optional[Tuple[float, float]]:
    """The in-graph input's and peers' shares of the timed twin's calls between two snapshots."""
    timed = new.timed_call_s - old.timed_call_s
    if timed <= 0:
        return None
    graph_input = max(0.0, new.graph_input_s - old.graph_input_s)
    graph_peers = max(0.0, new.graph_peers_s - old.graph_peers_s)
    inside = graph_input + graph_peers
    scale = 1.0 / max(timed, inside)  # overlapping collectives are summed: never more than the calls
    return graph_input * scale, graph_peers * scale


def shares(old: Snapshot, new: Snapshot, ratios: Tuple[float, float] = (0.0, 0.0)) -> Optional[Dict[str, float]]:
    """input / compute / peers / other as shares of the wall time between two snapshots (the
    timed calls' mean standing for every call), and ``seconds_per_step``; ``ratios``: the in-graph
    input's and peers' shares of a train call (the timed twin's, applied to every call). None
    when no timed step ended."""
    calls, sampled = new.calls - old.calls, new.sampled - old.sampled
    if calls <= 0 or sampled <= 0 or new.last_end is None or old.last_end is None:
        return None
    wall = new.at - old.at
    if wall <= 0:
        return None
    per_call = calls / sampled  # the timed calls stand for all of them
    in_calls = min(wall, (new.call_s - old.call_s) * per_call)
    eager_input = max(0.0, new.eager_input_s - old.eager_input_s)
    waited = max(0.0, new.wait_s - old.wait_s) * per_call
    between = max(0.0, new.outside_wait_s - old.outside_wait_s)
    graph_input, graph_peers = ratios[0] * in_calls, ratios[1] * in_calls
    if graph_input + graph_peers + waited > in_calls > 0:
        scale = in_calls / (graph_input + graph_peers + waited)
        graph_input, graph_peers, waited = graph_input * scale, graph_peers * scale, waited * scale
    parts = {
        "input": graph_input + eager_input,
        "compute": max(0.0, in_calls - graph_input - graph_peers - waited),
        "peers": graph_peers + waited + between,
        "other": max(0.0, wall - in_calls - eager_input - between),
    }
    total = sum(parts.values())
    if total <= 0:
        return None
    result = {name: value / total for name, value in parts.items()}
    steps = (new.step - old.step) if new.step is not None and old.step is not None else 0
    result["seconds_per_step"] = wall / (steps if steps > 0 else calls)
    return result


clock = StepClock()
