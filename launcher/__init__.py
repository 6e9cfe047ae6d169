"""distlaunch: a terminal-dashboard launcher for distributed TensorFlow.

This package is imported on remote hosts from the uploaded agent zipapp, so importing it
must stay cheap and stdlib-only.
"""

__version__ = "0.1.0"
