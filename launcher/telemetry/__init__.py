"""What the launcher makes of the events: the job view, timeline, stall watchdog, printers.

Runs on the user's machine. The samplers that run on hosts live in launcher/agent/.
"""
