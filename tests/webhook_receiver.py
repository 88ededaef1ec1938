"""A real HTTP receiver on loopback for webhook tests: checks every signature, and fails on purpose when told.

`Receiver.fail_next(n)` makes the next n requests answer 500; `fail_always`
makes every one answer 503. Every request is recorded with its headers, its
body and whether its signature verified against the secret (any `v1=`).
"""

from __future__ import annotations

import hashlib
import hmac
import json
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any


def signature_valid(header: str, body: bytes, secret: str) -> bool:
    """Exactly what docs/operations.md tells a receiver to do."""
    parts = [part.split("=", 1) for part in header.split(",")]
    timestamp = next(value for key, value in parts if key == "t")
    expected = hmac.new(secret.encode(), f"{timestamp}.".encode() + body, hashlib.sha256).hexdigest()
    return any(key == "v1" and hmac.compare_digest(value, expected) for key, value in parts)


@dataclass
class Received:
    headers: dict[str, str]
    body: bytes
    valid: bool
    answered: int
    at: float

    @property
    def document(self) -> dict[str, Any]:
        return json.loads(self.body)


class Receiver:
    def __init__(self) -> None:
        self.secrets: list[str] = []
        self.requests: list[Received] = []
        self.failures_left = 0
        self.fail_always = False
        self._lock = threading.Lock()
        self.server: ThreadingHTTPServer | None = None

    @property
    def url(self) -> str:
        assert self.server is not None
        return f"http://127.0.0.1:{self.server.server_address[1]}/hook"

    def fail_next(self, count: int) -> None:
        self.failures_left = count

    def delivered(self) -> list[Received]:
        with self._lock:
            return [request for request in self.requests if request.answered == 200]

    def handle(self, headers: dict[str, str], body: bytes) -> int:
        valid = any(signature_valid(headers.get("Leasehold-Signature", "t=0"), body, s) for s in self.secrets)
        with self._lock:
            if self.fail_always:
                answer = 503
            elif self.failures_left > 0:
                self.failures_left -= 1
                answer = 500
            else:
                answer = 200 if valid else 401
            self.requests.append(Received(headers, body, valid, answer, time.monotonic()))
        return answer


@contextmanager
def running_receiver() -> Iterator[Receiver]:
    receiver = Receiver()

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            body = self.rfile.read(int(self.headers.get("Content-Length", "0")))
            answer = receiver.handle(dict(self.headers.items()), body)
            self.send_response(answer)
            self.send_header("Content-Length", "0")
            self.end_headers()

        def log_message(self, format: str, *args: Any) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    receiver.server = server
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
    thread.start()
    try:
        yield receiver
    finally:
        server.shutdown()
        server.server_close()
