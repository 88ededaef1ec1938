"""How every call to the agent API is sent (SPEC §8), with the retry rule of SPEC §13.

- Errors raise the `agent.errors` class registered for the envelope's code.
- Retries: only errors whose envelope says `retryable` (STORAGE_BUSY,
  RATE_LIMITED, ENVIRONMENT_UNAVAILABLE, gateway 502/503/504) and connection
  failures, with exponential backoff and jitter, a bounded number of times.
  Every POST/PATCH carries an `Idempotency-Key` (generated when the caller
  gives none) and every retry re-sends the same key, so a retried call is
  answered, never done twice; GETs are safe to repeat as they are.
- Holder calls send `X-Lease-Token`/`X-Lease-Epoch`. Once a holder call is
  answered with a lease-ending code, or `forget_lease` is called, the
  connection refuses to send that token again (`LeaseLost`) without asking the
  server.

`agent.client.LeaseholdClient` adds one method per endpoint on top. This
module talks HTTP only; it imports nothing of the server.
"""

from __future__ import annotations

import functools
import json
import random
import ssl
import time
import uuid
from collections.abc import Callable
from typing import Any, Self

import httpx

from agent import __version__
from agent.errors import (
    LEASE_LOSS_CODES,
    ConnectionFailed,
    LeaseholdError,
    LeaseLost,
    error_from_envelope,
)
from agent.models import Lease, lease_fingerprint

API_PREFIX = "/api/v1"
MUTATING_METHODS = frozenset({"POST", "PATCH", "PUT", "DELETE"})


def api_root(url: str) -> str:
    """`http://host:8000`, `http://host:8000/` and `http://host:8000/api/v1/` all name the same API."""
    root = url.strip().rstrip("/")
    if root.endswith(API_PREFIX):
        root = root[: -len(API_PREFIX)]
    return root


@functools.cache
def tls_context() -> ssl.SSLContext:
    """httpx's default verifying context, built once per process: loading the CA bundle costs ~14 ms of CPU.

    httpx builds it for every `httpx.Client`, https or not; a client per lease
    (as `leasehold mcp` once made) paid that on every claim.
    """
    return httpx.create_ssl_context()


def drop_none(values: dict[str, Any]) -> dict[str, Any]:
    """The fields that have a value: an absent field lets the server apply its default."""
    return {name: value for name, value in values.items() if value is not None}


class ApiConnection:
    """The agent API's HTTP connection for one agent token. Safe to share between threads for independent calls."""

    def __init__(
        self,
        url: str,
        token: str,
        *,
        timeout: float = 10.0,
        max_retries: int = 4,
        backoff_base: float = 0.25,
        backoff_max: float = 8.0,
        transport: httpx.BaseTransport | None = None,
        trace_path: str | None = None,
        on_request: Callable[[httpx.Request], None] | None = None,
        sleep: Callable[[float], None] = time.sleep,
    ) -> None:
        """`trace_path` appends a JSON line per request (no tokens); `on_request` sees each request as sent."""
        self.url = api_root(url)
        self.max_retries = max_retries
        self.backoff_base = backoff_base
        self.backoff_max = backoff_max
        self._token = token
        self._timeout = timeout
        self._transport = transport
        self._trace_path = trace_path
        self._on_request = on_request
        self._sleep = sleep
        self._lost: set[str] = set()
        self._http = httpx.Client(
            base_url=self.url + API_PREFIX,
            headers={
                "Authorization": f"Bearer {token}",
                "Accept": "application/json",
                "User-Agent": f"leasehold-agent/{__version__}",
            },
            timeout=timeout,
            verify=tls_context(),
            transport=transport,
            event_hooks={"request": [hook for hook in (self._trace if trace_path else None, on_request) if hook]},
        )

    def clone(self) -> Self:
        """A client with the same settings and its own connections (e.g. for a background thread)."""
        twin = type(self)(
            self.url,
            self._token,
            timeout=self._timeout,
            max_retries=self.max_retries,
            backoff_base=self.backoff_base,
            backoff_max=self.backoff_max,
            transport=self._transport,
            trace_path=self._trace_path,
            on_request=self._on_request,
            sleep=self._sleep,
        )
        twin._lost = self._lost  # one registry: a lease lost to one is lost to both
        return twin

    def close(self) -> None:
        self._http.close()

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    # --- lost leases ------------------------------------------------------------------

    def forget_lease(self, lease: Lease) -> None:
        """Never send this lease's token again."""
        self._lost.add(lease_fingerprint(lease.token))

    def is_lost(self, lease: Lease) -> bool:
        return lease_fingerprint(lease.token) in self._lost

    # --- transport ----------------------------------------------------------------------

    def _trace(self, request: httpx.Request) -> None:
        """Append one JSON line per request sent (never a token: only its fingerprint)."""
        token = request.headers.get("X-Lease-Token")
        line = {
            "at": round(time.time(), 3),
            "method": request.method,
            "path": request.url.path,
            "lease": lease_fingerprint(token) if token else None,
            "idempotency_key": request.headers.get("Idempotency-Key"),
        }
        assert self._trace_path is not None
        with open(self._trace_path, "a", encoding="utf-8") as trace:
            trace.write(json.dumps(line) + "\n")

    def backoff_delay(self, retry: int, error: LeaseholdError | None = None) -> float:
        """Exponential backoff with jitter: between half and all of base * 2**retry, capped."""
        ceiling = min(self.backoff_max, self.backoff_base * (2**retry))
        delay = random.uniform(ceiling / 2, ceiling)
        retry_after = error.details.get("retry_after_seconds") if error is not None else None
        if isinstance(retry_after, int | float) and retry_after > 0:
            delay = max(delay, min(float(retry_after), 60.0))
        return delay

    def request(
        self,
        method: str,
        path: str,
        *,
        body: dict[str, Any] | None = None,
        params: dict[str, Any] | None = None,
        headers: dict[str, str] | None = None,
        lease: Lease | None = None,
        idempotency_key: str | None = None,
        retries: int | None = None,
        timeout: float | None = None,
    ) -> Any:
        """Send one API call (retrying as the module docstring says); the parsed JSON, or None for 204."""
        method = method.upper()
        sent_headers = dict(headers or {})
        if lease is not None:
            if self.is_lost(lease):
                raise LeaseLost(
                    f"The lease on {lease.task} (attempt {lease.attempt_id}) is lost; its token is not sent again.",
                    details={"attempt": lease.attempt_id, "task": lease.task},
                )
            sent_headers["X-Lease-Token"] = lease.token
            sent_headers["X-Lease-Epoch"] = str(lease.epoch)
        if method in MUTATING_METHODS:
            # Fixed before the first try: every retry of this call sends the same key.
            sent_headers["Idempotency-Key"] = idempotency_key or f"lh-{uuid.uuid4().hex}"
        query = drop_none(params or {})
        budget = self.max_retries if retries is None else retries
        retry = 0
        while True:
            try:
                response = self._http.request(
                    method,
                    path,
                    json=body if method in MUTATING_METHODS else None,
                    params=query,
                    headers=sent_headers,
                    timeout=self._timeout if timeout is None else timeout,
                )
            except httpx.TransportError as exc:
                error: LeaseholdError = ConnectionFailed(f"{method} {path}: {exc.__class__.__name__}: {exc}")
                cause: BaseException | None = exc
            else:
                if response.status_code < 400:
                    return _parsed(response)
                error = error_from_envelope(_json_or_none(response), http_status=response.status_code)
                cause = None
                if lease is not None and error.code in LEASE_LOSS_CODES:
                    self.forget_lease(lease)
            if not error.retryable or retry >= budget:
                raise error from cause
            self._sleep(self.backoff_delay(retry, error))
            retry += 1


def _json_or_none(response: httpx.Response) -> Any:
    try:
        return response.json()
    except ValueError:
        return None


def _parsed(response: httpx.Response) -> Any:
    if response.status_code == 204 or not response.content:
        return None
    try:
        return response.json()
    except ValueError:
        raise LeaseholdError(
            f"HTTP {response.status_code} answered with something other than JSON.",
            code="BAD_RESPONSE",
            http_status=response.status_code,
        ) from None
