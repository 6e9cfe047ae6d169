"""The ``sitecustomize`` the agent puts first on a task's path when autolog is on.

Packed into the agent zipapp as ``distlaunch_site/sitecustomize.py``; the agent adds
``agent.pyz/distlaunch_site`` to ``PYTHONPATH``. Python imports it at start-up; it installs
the import hook of ``launcher.autolog.hook`` (nothing of TensorFlow is imported here) and then runs the
``sitecustomize`` that would have run without it, if there is one further down the path.
Stdlib-only, Python >= 3.9, and it never stops the interpreter from starting.
"""

import importlib.machinery
import os
import sys


def _chain_to_next_sitecustomize() -> None:
    here = os.path.dirname(os.path.abspath(__file__))
    rest = [p for p in sys.path if os.path.abspath(p or ".") != here]
    spec = importlib.machinery.PathFinder.find_spec("sitecustomize", rest)
    if spec is None or spec.loader is None:
        return
    from importlib import util  # only now: it costs a few ms of start-up

    module = util.module_from_spec(spec)
    sys.modules["sitecustomize"] = module
    spec.loader.exec_module(module)


def _start() -> None:
    try:
        from launcher.autolog import hook as autolog_hook

        autolog_hook.install()
    except Exception as exc:  # never stop the task from starting
        sys.stderr.write("distlaunch autolog: not installed (%s: %s); the script runs without it\n"
                         % (type(exc).__name__, exc))
    try:
        _chain_to_next_sitecustomize()
    except Exception as exc:
        sys.stderr.write("distlaunch autolog: the sitecustomize after ours failed: %s: %s\n"
                         % (type(exc).__name__, exc))


_start()
