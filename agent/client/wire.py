"""How a call of the agent API goes over the network: the wire under `agent.client.connection.ApiConnection`.

One keep-alive connection (`KeepAliveWire`: `agent.client.plainhttp` for
`http://`, the standard library's `http.client` for `https://`), reused by
every call and thread in turn (a call that finds it busy opens another, kept
for the next). An idle connection the server closed is noticed before it is
used and replaced; a call whose reused connection drops before any answer is
sent once more at once on a fresh one (its Idempotency-Key makes that safe),
then the retry rule of `agent.client.connection` applies, so a server that is
gone answers `CONNECTION_FAILED` within the timeouts, never a hang. httpx
costs about three times its CPU per call (`leasehold mcp` makes three calls
per task cycle); it is still the wire when a transport is injected (tests),
requests are observed (`on_request`) or a proxy is configured for the server.

A call may be abandoned from another thread (`Abandon`): the keep-alive wire
shuts its socket down, so the call fails at once and the server sees the
client hang up (a parked claim wait is dropped, `core.parking`). Through httpx
the call runs on to its answer; the caller learns of the abandon afterwards.

This module talks HTTP only; it imports nothing of the server.
"""

from __future__ import annotations

import contextlib
import functools
import json
import os
import select
import socket
import threading
import urllib.parse
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Protocol

from agent.client.plainhttp import PlainConnection, ProtocolError

if TYPE_CHECKING:
    import http.client
    import ssl
    from typing import TypeAlias

    import httpx

    Connection: TypeAlias = PlainConnection | http.client.HTTPSConnection

# httpx (with what it pulls in), http.client, ssl and urllib.request are imported where they are used: a CLI
# call over plain HTTP needs none of them, and importing them cost more CPU than the call itself (issues 29, 34).

API_PREFIX = "/api/v1"
MUTATING_METHODS = frozenset({"POST", "PATCH", "PUT", "DELETE"})
# Kept open beyond the one in use: threads (a renewal beside a tool call) each get one without a new handshake.
IDLE_CONNECTIONS = 4
# Failures of a reused connection before any answer: the server closed it as we sent (keep-alive ran out).
# (`http.client.RemoteDisconnected` and `plainhttp.RemoteDisconnected` are ConnectionResetErrors.)
DROPPED = (ConnectionResetError, BrokenPipeError, ConnectionAbortedError)


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
    import httpx

    return httpx.create_ssl_context()


class WireFailed(Exception):
    """No answer from the server: the connection could not be made, dropped, or timed out."""

    def __init__(self, cause: BaseException) -> None:
        super().__init__(f"{cause.__class__.__name__}: {cause}")
        self.cause = cause


class Abandon:
    """A call's cancel hook: `abandon()`, from any thread, cuts the call short (`CallAbandoned` for its caller).

    One per call (or per series of calls that end together). The keep-alive wire registers the socket it
    sends on and `abandon()` shuts it down, so a call parked in a server-side wait returns at once; a call
    not yet sent is not sent, and nothing abandoned is retried.
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._abandoned = threading.Event()
        self._socket: socket.socket | None = None

    @property
    def abandoned(self) -> bool:
        return self._abandoned.is_set()

    def wait(self, seconds: float) -> bool:
        """Sleep up to `seconds`, less if abandoned meanwhile; whether it is abandoned."""
        return self._abandoned.wait(seconds)

    def abandon(self) -> None:
        with self._lock:
            self._abandoned.set()
            sock, self._socket = self._socket, None
        if sock is not None:
            with contextlib.suppress(OSError):  # already closed: nothing is waiting on it
                sock.shutdown(socket.SHUT_RDWR)

    def attach(self, sock: socket.socket) -> None:
        """The call is about to be sent on `sock`; `WireFailed` if it was abandoned already."""
        with self._lock:
            if self._abandoned.is_set():
                raise WireFailed(ConnectionAbortedError("the call was abandoned"))
            self._socket = sock

    def detach(self) -> None:
        with self._lock:
            self._socket = None


class Wire(Protocol):
    def send(
        self,
        method: str,
        path: str,
        *,
        query: dict[str, Any],
        headers: dict[str, str],
        body: Any,
        timeout: float,
        abandon: Abandon | None = None,
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


def _open(connection: Connection) -> None:
    connection.connect()
    assert connection.sock is not None
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
    """HTTP/1.1, keeping connections open between calls (see the module docstring)."""

    def __init__(self, root: str, base_headers: dict[str, str]) -> None:
        parts = urllib.parse.urlsplit(root)
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise ValueError(f"not an http(s) URL: {root!r}")
        self._https = parts.scheme == "https"
        self._host = parts.hostname
        self._port = parts.port
        self._prefix = parts.path.rstrip("/") + API_PREFIX
        self._headers = base_headers
        self._idle: list[Connection] = []
        self._lock = threading.Lock()
        self._closed = False
        # What a failed exchange raises besides OSError (a socket's, a timeout): the answer was not HTTP.
        self._failures: tuple[type[Exception], ...] = (OSError, ProtocolError)
        if self._https:
            import http.client  # with ssl and email: only an https:// server pays for them

            self._failures = (OSError, http.client.HTTPException)

    def _new_connection(self, timeout: float) -> Connection:
        if self._https:
            import http.client

            return http.client.HTTPSConnection(self._host, self._port, timeout=timeout, context=tls_context())
        return PlainConnection(self._host, self._port, timeout=timeout)

    def _take(self) -> Connection | None:
        """An idle connection still open, or None; one the server closed meanwhile is dropped here."""
        with self._lock:
            while self._idle:
                connection = self._idle.pop()
                # Nothing is owed on an idle HTTP/1.1 connection: readable means the server closed it.
                if connection.sock is not None and not _readable(connection.sock):
                    return connection
                connection.close()
        return None

    def _give_back(self, connection: Connection) -> None:
        with self._lock:
            if not self._closed and connection.sock is not None and len(self._idle) < IDLE_CONNECTIONS:
                self._idle.append(connection)
                return
        connection.close()

    def send(
        self,
        method: str,
        path: str,
        *,
        query: dict[str, Any],
        headers: dict[str, str],
        body: Any,
        timeout: float,
        abandon: Abandon | None = None,
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
                return self._exchange(connection, method, target, sent, content, timeout, abandon)
            except DROPPED:
                if reused is None or (abandon is not None and abandon.abandoned):
                    raise
                # The kept connection was closed under us before an answer: once more on a fresh one.
                connection.close()
                connection = self._new_connection(timeout)
                return self._exchange(connection, method, target, sent, content, timeout, abandon)
        except self._failures as exc:
            connection.close()
            raise WireFailed(exc) from exc
        except WireFailed:
            connection.close()
            raise

    def _exchange(
        self,
        connection: Connection,
        method: str,
        target: str,
        headers: dict[str, str],
        content: bytes | None,
        timeout: float,
        abandon: Abandon | None = None,
    ) -> tuple[int, bytes]:
        connection.timeout = timeout
        if connection.sock is None:
            _open(connection)
        else:
            connection.sock.settimeout(timeout)
        assert connection.sock is not None
        if abandon is not None:
            abandon.attach(connection.sock)
        try:
            connection.request(method, target, body=content, headers=headers)
            response = connection.getresponse()
            data = response.read()
        finally:
            if abandon is not None:
                abandon.detach()
        if abandon is not None and abandon.abandoned:
            connection.close()  # shut down, perhaps after the answer came: never kept for another call
        elif response.will_close:
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
        import httpx

        self._http = httpx.Client(
            base_url=root + API_PREFIX,
            headers=base_headers,
            timeout=timeout,
            verify=tls_context(),
            transport=transport,
            event_hooks={"request": [on_request] if on_request else []},
        )

    def send(
        self,
        method: str,
        path: str,
        *,
        query: dict[str, Any],
        headers: dict[str, str],
        body: Any,
        timeout: float,
        abandon: Abandon | None = None,
    ) -> tuple[int, bytes]:
        """`abandon` cannot cut an httpx call short: the caller learns of it once the call has its answer."""
        import httpx

        try:
            response = self._http.request(method, path, json=body, params=query, headers=headers, timeout=timeout)
        except httpx.TransportError as exc:
            raise WireFailed(exc) from exc
        return response.status_code, response.content

    def close(self) -> None:
        self._http.close()


def proxied(root: str) -> bool:
    """A proxy is configured for the server (the environment's *_PROXY, as httpx honours them)."""
    if not any(name.lower().endswith("_proxy") for name in os.environ):
        return False  # the common case, without importing urllib.request (and ssl with it)
    import urllib.request

    parts = urllib.parse.urlsplit(root)
    proxies = urllib.request.getproxies()
    wanted = proxies.get(parts.scheme) or proxies.get("all")
    return bool(wanted) and not urllib.request.proxy_bypass(parts.netloc)
