"""The launcher's side of every host: the agent zipapp, its upload and verbs, preflight, code sync.

Runs on the user's machine; what runs on the host is launcher/agent/.
"""
