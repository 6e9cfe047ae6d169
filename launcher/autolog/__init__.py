"""Autolog: runs INSIDE each task's Python (the agent puts it on the task's path).

Stdlib-only at import, Python >= 3.9; shipped in the agent zipapp. Kept empty: the start-up hook
imports ``launcher.autolog.hook`` in every Python process of a task, and this file with it.
"""
