"""One deadline per request for every storage wait (SQLite writer turn, busy timeout, retries).

A request that meets a locked database must end in `STORAGE_BUSY` (503,
retryable) well before the web server's worker timeout would kill it and
answer HTML: `StorageDeadlineMiddleware` opens a deadline of
`LEASEHOLD_STORAGE_DEADLINE_SECONDS` (default 20) for each request, and
`core.db.write_transaction` and `core.sqlite_writer` bound every wait and
retry by what is left of it. Outside a request (jobs, commands) there is no
deadline and each wait keeps its own bound. `serve` runs gunicorn with a
timeout above it.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from contextvars import ContextVar

from django.conf import settings
from django.http import HttpRequest, HttpResponse

_deadline: ContextVar[float | None] = ContextVar("leasehold_storage_deadline", default=None)


@contextmanager
def storage_deadline(seconds: float) -> Iterator[None]:
    """Every storage wait inside ends within `seconds` from now (monotonic)."""
    token = _deadline.set(time.monotonic() + seconds)
    try:
        yield
    finally:
        _deadline.reset(token)


def seconds_left() -> float | None:
    """What is left of the current deadline; None when there is none."""
    deadline = _deadline.get()
    return None if deadline is None else deadline - time.monotonic()


def bounded(seconds: float) -> float:
    """`seconds`, or less when the deadline comes sooner (never below zero)."""
    left = seconds_left()
    return seconds if left is None else max(0.0, min(seconds, left))


class StorageDeadlineMiddleware:
    def __init__(self, get_response: Callable[[HttpRequest], HttpResponse]) -> None:
        self.get_response = get_response

    def __call__(self, request: HttpRequest) -> HttpResponse:
        with storage_deadline(settings.LEASEHOLD_STORAGE_DEADLINE_SECONDS):
            return self.get_response(request)
