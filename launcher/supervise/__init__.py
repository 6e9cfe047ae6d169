"""The controller of a live job: host links, the task state machine and restarts, teardown.

Runs on the user's machine (the launcher process of `up` or `attach`).
"""
