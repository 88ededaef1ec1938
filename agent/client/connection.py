"""How every call to the agent API is sent (SPEC §8), with the retry rule of SPEC §13.

- Errors raise the `agent.client.errors` class registered for the envelope's code.
- Retries: only errors whose envelope says `retryable` (STORAGE_BUSY,
  RATE_LIMITED, ENVIRONMENT_UNAVAILABLE, gateway 502/503/504) and connection
  failures, with exponential backoff and jitter, a bounded number of times.
  Every POST/PATCH carries an `Idempotency-Key` (generated when the caller
  gives none) and every retry re-sends the same key, so a retried call is
  answered, never done twice; GETs are safe to repeat as they are, and so is
  a call its caller sends `keyed=False` (a renewal that reports no usage: a
  retry only extends the lease again), which saves the server the key's
  record (issue 34: a key costs the server a read and two writes).
- Holder calls send `X-Lease-Token`/`X-Lease-Epoch`, unless the bearer token
  is the lease's own credential (an attempt token, SPEC §23.2, which the
  server takes as the proof). Once a holder call is
  answered with a lease-ending code, or `forget_lease` is called, the
  connection refuses to send that token again (`LeaseLost`) without asking the
  server.
- The wire: `agent.client.wire` (one kept-alive `http.client` connection, or
  httpx when a transport is injected, requests are observed or a proxy is
  configured).

`agent.client.api.LeaseholdClient` adds one method per endpoint on top. This
module talks HTTP only; it imports nothing of the server.
"""

from __future__ import annotations

import json
import os
import time
import urllib.parse
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Self

if TYPE_CHECKING:
    import httpx  # the wire imports it only when it is the wire

    from agent.client.usage import Usage

from agent import __version__
from agent.client.errors import (
    LEASE_LOSS_CODES,
    CallAbandoned,
    ConnectionFailed,
    LeaseholdError,
    LeaseLost,
    error_from_envelope,
)
from agent.client.models import Lease, lease_fingerprint
from agent.client.wire import (
    API_PREFIX,
    MUTATING_METHODS,
    Abandon,
    HttpxWire,
    KeepAliveWire,
    Wire,
    WireFailed,
    api_root,
    proxied,
)


def new_idempotency_key() -> str:
    """`lh-` and a random UUID (version 4) in hex, as `uuid.uuid4().hex`, without importing `uuid` (and `platform`)."""
    random_bytes = bytearray(os.urandom(16))
    random_bytes[6] = (random_bytes[6] & 0x0F) | 0x40  # version 4
    random_bytes[8] = (random_bytes[8] & 0x3F) | 0x80  # the RFC 4122 variant
    return f"lh-{random_bytes.hex()}"


def drop_none(values: dict[str, Any]) -> dict[str, Any]:
    """The fields that have a value: an absent field lets the server apply its default."""
    return {name: value for name, value in values.items() if value is not None}


def usage_body(usage: Usage | None) -> dict[str, Any] | None:
    """A request's `usage` (`agent.client.usage.usage_body`), imported with `decimal` only when there is some."""
    if not usage:
        return None
    from agent.client.usage import usage_body as reported

    return reported(usage)


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
        base_headers = {
            "Authorization": f"Bearer {token}",
            "Accept": "application/json",
            "User-Agent": f"leasehold-agent/{__version__}",
        }
        self._wire: Wire
        if transport is None and on_request is None and not proxied(self.url):
            self._wire = KeepAliveWire(self.url, base_headers)
        else:
            self._wire = HttpxWire(self.url, base_headers, timeout=timeout, transport=transport, on_request=on_request)

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
        self._wire.close()

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    # --- lost leases ------------------------------------------------------------------

    def forget_lease(self, lease: Lease) -> None:
        """Never send this lease's token again."""
        self._lost.add(lease_fingerprint(lease.token))

    def is_lost(self, lease: Lease) -> bool:
        return bool(self._lost) and lease_fingerprint(lease.token) in self._lost

    # --- transport ----------------------------------------------------------------------

    def _trace(self, method: str, path: str, headers: dict[str, str]) -> None:
        """Append one JSON line per request sent (never a token: only its fingerprint)."""
        token = headers.get("X-Lease-Token")
        line = {
            "at": round(time.time(), 3),
            "method": method,
            "path": urllib.parse.urlsplit(self.url).path.rstrip("/") + API_PREFIX + path,  # as sent
            "lease": lease_fingerprint(token) if token else None,
            "idempotency_key": headers.get("Idempotency-Key"),
        }
        assert self._trace_path is not None
        with open(self._trace_path, "a", encoding="utf-8") as trace:
            trace.write(json.dumps(line) + "\n")

    def backoff_delay(self, retry: int, error: LeaseholdError | None = None) -> float:
        """Exponential backoff with jitter: between half and all of base * 2**retry, capped."""
        import random  # only a retry waits

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
        abandon: Abandon | None = None,
        keyed: bool = True,
    ) -> Any:
        """Send one API call (retrying as the module docstring says); the parsed JSON, or None for 204.

        `abandon` lets another thread cut the call short (`Abandon.abandon`): it raises `CallAbandoned`,
        and is neither sent again nor retried once abandoned; an answer that came first is returned."""
        method = method.upper()
        sent_headers = dict(headers or {})
        if lease is not None:
            if self.is_lost(lease):
                raise LeaseLost(
                    f"The lease on {lease.task} (attempt {lease.attempt_id}) is lost; its token is not sent again.",
                    details={"attempt": lease.attempt_id, "task": lease.task},
                )
            if lease.token != self._token:
                sent_headers["X-Lease-Token"] = lease.token
                sent_headers["X-Lease-Epoch"] = str(lease.epoch)
        if method in MUTATING_METHODS and (keyed or idempotency_key is not None):
            # Fixed before the first try: every retry of this call sends the same key.
            sent_headers["Idempotency-Key"] = idempotency_key or new_idempotency_key()
        query = drop_none(params or {})
        budget = self.max_retries if retries is None else retries
        retry = 0
        sent_body = body if method in MUTATING_METHODS else None
        while True:
            if abandon is not None and abandon.abandoned:
                raise CallAbandoned(f"{method} {path}: abandoned before its answer came")
            if self._trace_path:
                self._trace(method, path, sent_headers)
            try:
                status, content = self._wire.send(
                    method,
                    path,
                    query=query,
                    headers=sent_headers,
                    body=sent_body,
                    timeout=self._timeout if timeout is None else timeout,
                    abandon=abandon,
                )
            except WireFailed as failed:
                if abandon is not None and abandon.abandoned:
                    raise CallAbandoned(f"{method} {path}: abandoned before its answer came") from failed
                error: LeaseholdError = ConnectionFailed(f"{method} {path}: {failed}")
                cause: BaseException | None = failed.cause
            else:
                if status < 400:
                    return _parsed(status, content)
                error = error_from_envelope(_json_or_none(content), http_status=status)
                cause = None
                if lease is not None and error.code in LEASE_LOSS_CODES:
                    self.forget_lease(lease)
            if not error.retryable or retry >= budget:
                raise error from cause
            if abandon is None:
                self._sleep(self.backoff_delay(retry, error))
            else:
                abandon.wait(self.backoff_delay(retry, error))
            retry += 1


def _json_or_none(content: bytes) -> Any:
    try:
        return json.loads(content)
    except ValueError:
        return None


def _parsed(status: int, content: bytes) -> Any:
    if status == 204 or not content:
        return None
    try:
        return json.loads(content)
    except ValueError:
        raise LeaseholdError(
            f"HTTP {status} answered with something other than JSON.", code="BAD_RESPONSE", http_status=status
        ) from None
