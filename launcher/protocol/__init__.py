"""The line protocols between distlaunch's processes (``lines``): shipped to every host with the
agent, so stdlib-only and Python >= 3.9, like the agent itself."""
