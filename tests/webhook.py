"""A webhook receiver on 127.0.0.1 for [notify] tests: every POST's JSON body, in arrival order."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest


class Webhook(ThreadingHTTPServer):
    def __init__(self) -> None:
        super().__init__(("127.0.0.1", 0), _Handler)
        self.posts: list[dict[str, str]] = []

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server_address[1]}/hook"

    def alerts(self) -> list[tuple[str, str, str]]:
        """(alert, active "1"/"0", subject) of every alert post so far."""
        return [(p["alert"], p["active"], p["subject"]) for p in self.posts if p.get("event") == "alert"]


class _Handler(BaseHTTPRequestHandler):
    server: Webhook

    def do_POST(self) -> None:
        length = int(self.headers.get("Content-Length", "0"))
        self.server.posts.append(json.loads(self.rfile.read(length)))
        self.send_response(200)
        self.end_headers()

    def log_message(self, *args: object) -> None:
        pass


@pytest.fixture
def hook() -> Iterator[Webhook]:
    server = Webhook()
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield server
    finally:
        server.shutdown()
        server.server_close()
