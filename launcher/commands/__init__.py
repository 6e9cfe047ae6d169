"""The verbs: one module per family of `distlaunch` commands. Runs on the user's machine.
"""
