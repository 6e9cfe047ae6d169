"""The names inside a metric event's ``values`` that distlaunch itself gives a meaning to.

Autolog sends them from inside each task (``launcher/autolog/steptime.py``, ``recorder.py``,
``profilersafety.py``); the launcher reads them back (``launcher/telemetry/steptime.py``, the job
view, ``launcher/tfprofiler/safety.py``). Any other name in ``values`` is a number of the user's,
shown as it came. A name is declared here once and imported by both sides.

Stdlib-only, Python >= 3.9 (the agent zipapp ships it; autolog imports it inside tasks).
"""

from __future__ import annotations

#: the step-time split: ``STEP_TIME + part`` for each of ``PARTS``, a share of the step over the
#: last ten seconds (the shares sum to 1)
STEP_TIME = "step_time/"
PARTS = ("input", "compute", "peers", "other")
#: seconds per step over the same window
SECONDS_PER_STEP = STEP_TIME + "seconds_per_step"
#: sent, until a split is, by a task whose train calls were none timed yet (their number)
UNTIMED_CALLS = STEP_TIME + "untimed_calls"
#: a ParameterServerStrategy coordinator's view of each worker: ``CLOSURES_PER_S + "worker:N"``
#: (closures finished per second) and ``CLOSURE_LATENCY_S + "worker:N"`` (seconds per closure)
CLOSURES_PER_S = "closures_per_s/"
CLOSURE_LATENCY_S = "closure_latency_s/"
#: 1 beside a step that counts train calls, where no optimizer or global step gives one
STEP_IS_CALLS = "step_is_calls"
#: 1, sent once, by a task that a TensorFlow profiler capture would crash
PROFILER_UNSAFE = "profiler_unsafe"
