"""Rate limits (issue 14): failed authentications per client address, and requests per agent.

Fixed one-minute windows counted in Django's cache: one `add` and one
`incr` per request, no history list to rewrite. With `LEASEHOLD_REDIS_URL`
the cache is Redis, shared by every server process; without it each process
counts in its own memory (documented: docs/operations.md, "Security").

- Failed bearer authentications: `LEASEHOLD_AUTH_FAILURES_PER_MINUTE`
  (default 20) per client address. A valid token is always served; a bad
  one past the limit answers `RATE_LIMITED` (429, `Retry-After`) instead of
  `AUTHENTICATION_FAILED`. Tokens carry ~256 random bits, so guessing is
  hopeless either way: the limit bounds what failures cost the server, and
  never locks out the valid agents that share an address with a bad one.
- Requests per agent: `LEASEHOLD_AGENT_REQUESTS_PER_MINUTE` (default 6000,
  100 a second; 0 turns it off), the DRF throttle every API view runs.

The client address is `client_address`: the socket's, or read from
X-Forwarded-For through `LEASEHOLD_TRUSTED_PROXIES` proxies.
"""

from __future__ import annotations

import logging
import time
from typing import Any

from django.conf import settings
from django.core.cache import cache
from redis.exceptions import RedisError
from rest_framework.request import Request
from rest_framework.throttling import BaseThrottle

from ledger import clock

WINDOW_SECONDS = 60

logger = logging.getLogger("leasehold.api")
_unavailable_logged_at = -float("inf")


def client_address(request: Any) -> str:
    """The client's address: the socket's, or through `LEASEHOLD_TRUSTED_PROXIES` proxies the entry of
    `X-Forwarded-For` the nearest trusted proxy appended (entries further left are the client's to forge).

    The API's throttles and the admin's lockout (`AXES_CLIENT_IP_CALLABLE`) both read it.
    """
    meta = request.META
    proxies = settings.LEASEHOLD_TRUSTED_PROXIES
    forwarded = [part.strip() for part in meta.get("HTTP_X_FORWARDED_FOR", "").split(",") if part.strip()]
    if proxies and len(forwarded) >= proxies:
        return forwarded[-proxies]
    return str(meta.get("REMOTE_ADDR", ""))


def _window() -> tuple[int, float]:
    """The current window's number and the seconds left in it, by the one clock (SPEC §1.9)."""
    now = clock.now().timestamp()
    return int(now // WINDOW_SECONDS), WINDOW_SECONDS - now % WINDOW_SECONDS


def _count(key: str) -> int:
    """Count one more in this window; returns the count so far (0 while the shared cache is unreachable)."""
    try:
        if cache.add(key, 1, timeout=WINDOW_SECONDS * 2):
            return 1
        try:
            return int(cache.incr(key))
        except ValueError:  # expired between add and incr
            cache.add(key, 1, timeout=WINDOW_SECONDS * 2)
            return 1
    except RedisError as exc:
        _cache_unavailable(exc)
        return 0


def _cache_unavailable(exc: Exception) -> None:
    """Redis down: the limits are off rather than every request failing; said once a minute."""
    global _unavailable_logged_at
    now = time.monotonic()
    if now - _unavailable_logged_at >= WINDOW_SECONDS:
        _unavailable_logged_at = now
        logger.warning("rate limits not counted: the cache (LEASEHOLD_REDIS_URL) is unreachable: %s", exc)


class AgentRateThrottle(BaseThrottle):
    """Requests per agent per minute; staff sessions are not limited."""

    def __init__(self) -> None:
        self.seconds_left = 0.0

    def allow_request(self, request: Request, view: Any) -> bool:
        limit = settings.LEASEHOLD_AGENT_REQUESTS_PER_MINUTE
        agent = getattr(request.user, "agent", None)
        if not limit or agent is None:
            return True
        window, self.seconds_left = _window()
        return _count(f"lh-throttle:agent:{agent.pk}:{window}") <= limit

    def wait(self) -> float | None:
        return self.seconds_left


class FailedAuthentications:
    """Bad bearer tokens per client address; used by the authentication class itself, after the token
    was found not valid (a valid token is never refused for its neighbours' failures)."""

    def __init__(self, request: Request) -> None:
        window, self.seconds_left = _window()
        self.key = f"lh-throttle:auth:{client_address(request)}:{window}"

    def exhausted(self) -> bool:
        try:
            return int(cache.get(self.key, 0)) >= settings.LEASEHOLD_AUTH_FAILURES_PER_MINUTE
        except RedisError as exc:
            _cache_unavailable(exc)
            return False

    def record(self) -> None:
        _count(self.key)
