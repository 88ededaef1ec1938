"""How every call to the agent API is sent (SPEC §8), with the retry rule of SPEC §13.

- Errors raise the `agent.client.errors` class registered for the envelope's code.
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
- The wire: one keep-alive connection (`KeepAliveWire`, the standard
  library's `http.client`), reused by every call and thread in turn (a call
  that finds it busy opens another, kept for the next). An idle connection
  the server closed is noticed before it is used and replaced; a call whose
  reused connection drops before any answer is sent once more at once on a
  fresh one (its Idempotency-Key makes that safe), then the retry rule above
  applies, so a server that is gone answers `CONNECTION_FAILED` within the
  timeouts, never a hang. httpx costs about three times its CPU per call
  (`leasehold mcp` makes three calls per task cycle); it is still the wire
  when a transport is injected (tests), requests are observed (`on_request`)
  or a proxy is configured for the server.

`agent.client.api.LeaseholdClient` adds one method per endpoint on top. This
module talks HTTP only; it imports nothing of the server.
"""

from __future__ import annotations

import functools
import http.client
import json
import random
import select
import socket
import ssl
import threading
import time
import urllib.parse
import urllib.request
import uuid
from collections.abc import Callable
from typing import Any, Protocol, Self

import httpx

from agent import __version__
from agent.client.errors import (
    LEASE_LOSS_CODES,
    ConnectionFailed,
    LeaseholdError,
    LeaseLost,
    error_from_envelope,
)
from agent.client.models import Lease, lease_fingerprint

API_PREFIX = "/api/v1"
MUTATING_METHODS = frozenset({"POST", "PATCH", "PUT", "DELETE"})
# Kept open beyond the one in use: threads (a renewal beside a tool call) each get one without a new handshake.
IDLE_CONNECTIONS = 4
# Failures of a reused connection before any answer: the server closed it as we sent (keep-alive ran out).
DROPPED = (http.client.RemoteDisconnected, ConnectionResetError, BrokenPipeError, ConnectionAbortedError)


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


class WireFailed(Exception):
    """No answer from the server: the connection could not be made, dropped, or timed out."""

    def __init__(self, cause: BaseException) -> None:
        super().__init__(f"{cause.__class__.__name__}: {cause}")
        self.cause = cause


class Wire(Protocol):
    def send(
        self, method: str, path: str, *, query: dict[str, Any], headers: dict[str, str], body: Any, timeout: float
    ) -> tuple[int, bytes]:
        """The status and body of the answer to one request; `WireFailed` when there is none."""
        ...

    def close(self) -> None: ...


def _query_value(value: Any) -> str:
    # As httpx encodes them: the API's flags are "true"/"false".
    if value is True or value is False:
        return "true" if value else "false"
    return str(value)


def _json_body(body: Any) -> bytes:
    return json.dumps(body, ensure_ascii=False, separators=(",", ":"), allow_nan=False).encode()


def _open(connection: http.client.HTTPConnection) -> None:
    connection.connect()
    # As httpx does: a request is one write, but no part of an exchange should wait for an ACK (Nagle).
    connection.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)


def _readable(sock: socket.socket) -> bool:
    """Data (or the end of the stream) waits on `sock`, without blocking; poll has no descriptor limit."""
    if hasattr(select, "poll"):
        poller = select.poll()
        poller.register(sock, select.POLLIN)
        return bool(poller.poll(0))
    return bool(select.select([sock], [], [], 0)[0])


class KeepAliveWire:
    """HTTP/1.1 over `http.client`, keeping connections open between calls (see the module docstring)."""

    def __init__(self, root: str, base_headers: dict[str, str]) -> None:
        parts = urllib.parse.urlsplit(root)
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise ValueError(f"not an http(s) URL: {root!r}")
        self._https = parts.scheme == "https"
        self._host = parts.hostname
        self._port = parts.port
        self._prefix = parts.path.rstrip("/") + API_PREFIX
        self._headers = base_headers
        self._idle: list[http.client.HTTPConnection] = []
        self._lock = threading.Lock()
        self._closed = False

    def _new_connection(self, timeout: float) -> http.client.HTTPConnection:
        if self._https:
            return http.client.HTTPSConnection(self._host, self._port, timeout=timeout, context=tls_context())
        return http.client.HTTPConnection(self._host, self._port, timeout=timeout)

    def _take(self) -> http.client.HTTPConnection | None:
        """An idle connection still open, or None; one the server closed meanwhile is dropped here."""
        with self._lock:
            while self._idle:
                connection = self._idle.pop()
                # Nothing is owed on an idle HTTP/1.1 connection: readable means the server closed it.
                if connection.sock is not None and not _readable(connection.sock):
                    return connection
                connection.close()
        return None

    def _give_back(self, connection: http.client.HTTPConnection) -> None:
        with self._lock:
            if not self._closed and connection.sock is not None and len(self._idle) < IDLE_CONNECTIONS:
                self._idle.append(connection)
                return
        connection.close()

    def send(
        self, method: str, path: str, *, query: dict[str, Any], headers: dict[str, str], body: Any, timeout: float
    ) -> tuple[int, bytes]:
        target = urllib.parse.quote(self._prefix + path, safe="/%:@!$&'()*+,;=-._~")
        if query:
            target += "?" + urllib.parse.urlencode({name: _query_value(value) for name, value in query.items()})
        sent = {**self._headers, **headers}
        content = None
        if body is not None:
            content = _json_body(body)
            sent["Content-Type"] = "application/json"
        elif method in MUTATING_METHODS:
            sent["Content-Length"] = "0"
        reused = self._take()
        connection = reused or self._new_connection(timeout)
        try:
            try:
                return self._exchange(connection, method, target, sent, content, timeout)
            except DROPPED:
                if reused is None:
                    raise
                # The kept connection was closed under us before an answer: once more on a fresh one.
                connection.close()
                connection = self._new_connection(timeout)
                return self._exchange(connection, method, target, sent, content, timeout)
        except (OSError, http.client.HTTPException) as exc:
            connection.close()
            raise WireFailed(exc) from exc

    def _exchange(
        self,
        connection: http.client.HTTPConnection,
        method: str,
        target: str,
        headers: dict[str, str],
        content: bytes | None,
        timeout: float,
    ) -> tuple[int, bytes]:
        connection.timeout = timeout
        if connection.sock is None:
            _open(connection)
        else:
            connection.sock.settimeout(timeout)
        connection.request(method, target, body=content, headers=headers)
        response = connection.getresponse()
        data = response.read()
        if response.will_close:
            connection.close()
        self._give_back(connection)
        return response.status, data

    def close(self) -> None:
        with self._lock:
            self._closed = True
            idle, self._idle = self._idle, []
        for connection in idle:
            connection.close()


class HttpxWire:
    """The same through httpx: for an injected transport, an `on_request` observer, or a proxy."""

    def __init__(
        self,
        root: str,
        base_headers: dict[str, str],
        *,
        timeout: float,
        transport: httpx.BaseTransport | None,
        on_request: Callable[[httpx.Request], None] | None,
    ) -> None:
        self._http = httpx.Client(
            base_url=root + API_PREFIX,
            headers=base_headers,
            timeout=timeout,
            verify=tls_context(),
            transport=transport,
            event_hooks={"request": [on_request] if on_request else []},
        )

    def send(
        self, method: str, path: str, *, query: dict[str, Any], headers: dict[str, str], body: Any, timeout: float
    ) -> tuple[int, bytes]:
        try:
            response = self._http.request(method, path, json=body, params=query, headers=headers, timeout=timeout)
        except httpx.TransportError as exc:
            raise WireFailed(exc) from exc
        return response.status_code, response.content

    def close(self) -> None:
        self._http.close()


def _proxied(root: str) -> bool:
    """A proxy is configured for the server (the environment's *_PROXY, as httpx honours them)."""
    parts = urllib.parse.urlsplit(root)
    proxies = urllib.request.getproxies()
    wanted = proxies.get(parts.scheme) or proxies.get("all")
    return bool(wanted) and not urllib.request.proxy_bypass(parts.netloc)


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
        base_headers = {
            "Authorization": f"Bearer {token}",
            "Accept": "application/json",
            "User-Agent": f"leasehold-agent/{__version__}",
        }
        self._wire: Wire
        if transport is None and on_request is None and not _proxied(self.url):
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
        return lease_fingerprint(lease.token) in self._lost

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
        sent_body = body if method in MUTATING_METHODS else None
        while True:
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
                )
            except WireFailed as failed:
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
            self._sleep(self.backoff_delay(retry, error))
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
