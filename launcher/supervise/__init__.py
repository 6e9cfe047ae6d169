"""The controller of a live job: the coordinator and its parts (host links, the restart policy and
the executor of its decisions, teardown, stack capture).

Runs on the user's machine (the launcher process of `up` or `attach`).
"""
