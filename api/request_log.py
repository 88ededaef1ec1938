"""The request id and the request log (SPEC §18): every response says `X-Request-Id`; with
LEASEHOLD_LOG_FORMAT=json every request is one log line (`leasehold.request`) with its id, method, path,
status, duration, the calling agent's handle, the attempt it concerned and the error code it answered.

A client may send its own `X-Request-Id` (letters, digits, `-`, `_`, `.`, at
most 64) to correlate its logs with ours; anything else is replaced by a new
one. The path is logged without its query string; headers and bodies never
are, so no token reaches the log.
"""

from __future__ import annotations

import logging
import re
import time
import uuid
from collections.abc import Callable
from typing import Any

from django.conf import settings
from django.http import HttpRequest, HttpResponseBase

logger = logging.getLogger("leasehold.request")
_CLIENT_ID = re.compile(r"^[A-Za-z0-9._-]{1,64}$")


def _error_code(response: Any) -> str | None:
    data = getattr(response, "data", None)
    if isinstance(data, dict) and isinstance(data.get("error"), dict):
        code = data["error"].get("code")
        return str(code) if code else None
    return None


def _attempt_id(request: HttpRequest, response: Any) -> int | None:
    match = getattr(request, "resolver_match", None)
    if match is not None and "attempt_id" in match.kwargs:
        return int(match.kwargs["attempt_id"])
    data = getattr(response, "data", None)
    attempt = data.get("attempt") if isinstance(data, dict) else None
    if isinstance(attempt, dict) and isinstance(attempt.get("id"), int):
        return int(attempt["id"])
    return None


def _agent_handle(request: HttpRequest) -> str | None:
    user = getattr(request, "user", None)
    agent = getattr(user, "agent", None)
    if agent is not None:
        return str(agent.handle)
    runner = getattr(user, "runner", None)  # api.auth.RunnerPrincipal: a runner's register and heartbeat
    if runner is not None:
        return f"runner:{runner.name}"
    if user is not None and getattr(user, "is_authenticated", False):
        return f"user:{user.get_username()}"
    return None


class RequestLogMiddleware:
    def __init__(self, get_response: Callable[[HttpRequest], HttpResponseBase]) -> None:
        self.get_response = get_response
        self.json_lines = settings.LEASEHOLD_LOG_FORMAT == "json"

    def __call__(self, request: HttpRequest) -> HttpResponseBase:
        started = time.monotonic()
        offered = request.headers.get("X-Request-Id", "")
        request_id = offered if _CLIENT_ID.match(offered) else uuid.uuid4().hex
        request.request_id = request_id  # type: ignore[attr-defined]
        response = self.get_response(request)
        response["X-Request-Id"] = request_id
        if self.json_lines:
            status = response.status_code
            logger.log(
                logging.WARNING if status >= 500 else logging.INFO,
                "%s %s %s",
                request.method,
                request.path,
                status,
                extra={
                    "request_id": request_id,
                    "method": request.method,
                    "path": request.path,
                    "status": status,
                    "duration_ms": round((time.monotonic() - started) * 1000, 1),
                    "agent": _agent_handle(request),
                    "attempt": _attempt_id(request, response),
                    "code": _error_code(response),
                },
            )
        return response
