"""Autolog: runs INSIDE each task's Python (the agent puts it on the task's path).

``distlaunch_site/sitecustomize.py`` (source: ``launcher/autolog/startup.py``) installs the finder
of ``launcher/autolog/hook.py`` on ``sys.meta_path`` and then runs the next ``sitecustomize`` on the
path, if any. The finder finds nothing itself: for ``tensorflow``, ``keras`` and ``tf_keras`` it
wraps the real loader, and after the package ran, ``launcher/autolog/patches.py`` wraps methods
(optimizer ``__init__``/``apply_gradients``, ``Model.fit``, ``tf.function`` ``__call__``,
``ClusterCoordinator.schedule``, PSS ``_create_variable``, ``tf.summary.scalar``,
``FileWriter.add_summary``, ``BaseSession.run``; the TF1 global step's ways to be found, each
falling back to the next, are in ``launcher/autolog/global_step.py``, and only the last one's
failure is said). TF1 sessions (``launcher/autolog/tf1session.py``, ``trainloss.py``): the TF1
optimizer's ``minimize`` / ``compute_gradients`` / ``apply_gradients`` remember each train op's loss
(weakly, per graph); a ``Session.run`` that runs a known train op without its loss fetches the loss
alongside once per report interval (only when the few extra ops it needs are stateless, need no feed
and sit on the step's devices; the script gets exactly the structure it asked for), and a float
scalar fetched alone after training is kept as ``values/<tensor name>`` (at most 8 names).
Checkpoint writers (Keras ``BackupAndRestore`` / ``ModelCheckpoint``, ``CheckpointManager``,
``Checkpoint``, TF1 ``Saver``, ``PreemptionCheckpointHandler``) report each checkpoint once written:
``launcher/autolog/ckptwriters.py``. SIGTERM during Keras ``fit`` with a ``BackupAndRestore``
that saves by batches saves that batch, then exits 143 (a drain loses nothing):
``launcher/autolog/drainsave.py``. ``launcher/autolog/recorder.py`` holds the state (``fail`` turns
autolog off, ``degraded`` says once
that one way of reading failed and leaves it on), one ``report._MetricReporter`` marked ``source =
"autolog"`` and the step reader thread (optimizers by weak reference, the newest train-step
results). Report lines carry ``"source": "autolog"``; the agent drops an autolog value whose name an
explicit report or a ``[metrics]`` regex of the same task has already given (and autolog placements
once the script reported its own), then emits the usual ``metric``/``placement`` events (without the
field). ``launcher/autolog/trainfn.py`` recognises a train function by what it does while it is
traced: it applies gradients, takes gradients (``GradientTape.gradient``) or reads an iterator (the
last counts only while nothing takes gradients); nothing is added to the user's function. Where no
optimizer or global step gives a step, the train calls are the step (``values.step_is_calls = 1``,
shown as ``step (calls)``). A job younger than the split's window is split from its last tracing
call, the first 20 calls are always timed, and train calls none of which could be timed send
``step_time/untimed_calls``, which every view shows as ``-`` with the reason. A job can end between
two reads of the reader (TensorFlow's PSS tutorial: 21 steps in a second or two), so
``recorder.flush`` reads the step and the newest loss once more and sends them, with a pending
split: at the end of Keras ``fit`` (the callback's ``on_train_end``), after
``ClusterCoordinator.join`` (while flushing costs at most 5 % of the time), at TF1
``Session.close``, and at interpreter exit (an ``atexit`` handler that asks the reader thread to
read, waits at most 5 s and never raises, once, only in the process that loaded autolog). A step
sent never goes back, but for the exit's reading: it is the step the script ended with, sent even
below one sent before (Keras 3's ``iterations`` under ParameterServerStrategy can go back for good
when two workers' increments overlap), so the dashboard ends on the script's own count. The
``[metrics]`` number rules live in ``launcher/agent/metricregex.py``, shared with ``distlaunch check
--metrics-sample`` (``launcher/commands/check.py``).

Stdlib-only at import, Python >= 3.9; shipped in the agent zipapp. Kept empty: the start-up hook
imports ``launcher.autolog.hook`` in every Python process of a task, and this file with it.
"""
