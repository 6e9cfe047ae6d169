"""What distlaunch's processes say to each other: the control socket's lines (``controllines``),
the agent stream's lines and the requests to a host agent (``agentlines``), what both share
(``message``), and the names inside a metric's values (``metricnames``). Shipped to every host with
the agent, so stdlib-only and Python >= 3.9, like the agent itself."""
