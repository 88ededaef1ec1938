"""What a webhook delivery sends and where it may go (SPEC §18): the body, the signature, the target check, the POST.

No database writes here: `push.services.webhooks` records what a try did.

Signature: `Leasehold-Signature: t=<unix seconds>,v1=<hex HMAC-SHA256(secret, "<t>.<body>")>`;
during the 24 h after a secret was rolled a second `v1=` (made with the old
secret) follows. The secret is the string shown at creation, used as UTF-8.
A receiver recomputes the HMAC over the exact bytes it received and accepts
when any `v1=` matches (docs/operations.md shows the ten lines).
"""

from __future__ import annotations

import functools
import hashlib
import hmac
import ipaddress
import json
import secrets
import socket
import ssl
import time
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

import httpcore
import httpx
from django.conf import settings

from core.errors import ValidationFailed

SECRET_PREFIX = "lhwh_"  # noqa: S105 - a prefix, not a secret
TIMEOUT_SECONDS = 5.0
USER_AGENT = "Leasehold-Webhooks/1"


def new_secret() -> str:
    """32 random bytes, url-safe base64, with a prefix that makes a leaked one recognizable."""
    return SECRET_PREFIX + secrets.token_urlsafe(32)


def signature_header(*, secrets_in_use: list[str], timestamp: int, body: bytes) -> str:
    signed = f"{timestamp}.".encode() + body
    values = [hmac.new(secret.encode(), signed, hashlib.sha256).hexdigest() for secret in secrets_in_use]
    return ",".join([f"t={timestamp}", *(f"v1={value}" for value in values)])


def event_document(row: dict[str, Any]) -> dict[str, Any]:
    """The JSON body of a delivery, from a row of `ledger.selectors.webhook_delivery_rows`."""
    if row["event__actor_agent__handle"]:
        actor = row["event__actor_agent__handle"]
    elif row["event__actor_user__username"]:
        actor = f"user:{row['event__actor_user__username']}"
    else:
        actor = "system"
    created_at = row["event__created_at"]
    return {
        "id": row["event_id"],
        "type": row["event__type"],
        "severity": row["event__severity"],
        "project": row["event__project__slug"],
        "task": row["event__task__key"],
        "attempt": row["event__attempt_id"],
        "actor": actor,
        "payload": row["event__payload"],
        "created_at": created_at.isoformat().replace("+00:00", "Z"),
    }


def slack_text(document: dict[str, Any], *, admin_path: str) -> str:
    """One readable line: severity, type, task key, actor, and a link to the task's (or event's) admin page."""
    link = f"{settings.LEASEHOLD_PUBLIC_URL}{admin_path}"
    subject = document["task"] or document["project"] or "fleet"
    severity = "" if document["severity"] == "info" else f"[{document['severity']}] "
    return f"{severity}{document['type']} {subject} by {document['actor']} (event {document['id']}): <{link}|open>"


def delivery_body(document: dict[str, Any], *, format: str, admin_path: str) -> bytes:
    if format == "slack":
        content: dict[str, Any] = {"text": slack_text(document, admin_path=admin_path)}
    else:
        content = document
    return json.dumps(content, separators=(",", ":"), sort_keys=True).encode()


_IPV4_COMPATIBLE = ipaddress.IPv6Network("::/96")  # deprecated ::a.b.c.d
_NAT64 = ipaddress.IPv6Network("64:ff9b::/96")


def _embedded_ipv4(ip: ipaddress.IPv4Address | ipaddress.IPv6Address) -> list[ipaddress.IPv4Address]:
    """The IPv4 addresses an IPv6 address carries (mapped, compatible, 6to4, Teredo, NAT64): a packet to it
    can reach them, so each is checked like the address itself."""
    if not isinstance(ip, ipaddress.IPv6Address):
        return []
    embedded = []
    if ip.ipv4_mapped is not None:
        embedded.append(ip.ipv4_mapped)
    if ip.sixtofour is not None:
        embedded.append(ip.sixtofour)
    if ip.teredo is not None:
        embedded.extend(ip.teredo)  # the Teredo server and the client
    if ip in _IPV4_COMPATIBLE or ip in _NAT64:
        embedded.append(ipaddress.IPv4Address(int(ip) & 0xFFFFFFFF))
    return embedded


def _refused_address(address: str) -> bool:
    ip = ipaddress.ip_address(address.split("%", 1)[0])
    return any(
        candidate.is_loopback
        or candidate.is_private
        or candidate.is_link_local
        or candidate.is_multicast
        or candidate.is_reserved
        or candidate.is_unspecified
        or not candidate.is_global
        for candidate in [ip, *_embedded_ipv4(ip)]
    )


def _invalid_url(message: str) -> ValidationFailed:
    return ValidationFailed(message, details={"fields": {"url": ["invalid"]}})


def parse_url(url: str) -> httpx.URL:
    """The URL as the HTTP client reads it, or VALIDATION_ERROR: what passes here can always be posted to.

    The client's own parser, not urlsplit: a control character (a `\\r` from a
    pasted line, a DEL) passes urlsplit and makes every POST raise.
    """
    try:
        parsed = httpx.URL(url)
    except (httpx.InvalidURL, ValueError, TypeError) as exc:
        raise _invalid_url(f"url is not a valid URL: {exc}") from None
    if parsed.scheme not in ("http", "https") or not parsed.raw_host:
        raise _invalid_url("url must be an http:// or https:// URL with a host.")
    if parsed.userinfo:
        raise _invalid_url("url must not carry a user name or password.")
    return parsed


@dataclass(frozen=True)
class Target:
    """A checked URL and the one address it is posted to: the name is resolved once, so it cannot move
    (DNS rebinding) between the check and the connection."""

    url: httpx.URL
    address: str
    port: int


def check_target(url: str) -> None:
    """VALIDATION_ERROR unless `url` is http(s) and resolves to public addresses only (`resolve_target`).

    LEASEHOLD_WEBHOOK_ALLOW_PRIVATE=1 lifts the address rule (tests, a receiver on
    the same host); the URL must still be one the HTTP client can post to.
    """
    parse_url(url)
    if not settings.LEASEHOLD_WEBHOOK_ALLOW_PRIVATE:
        resolve_target(url)


def resolve_target(url: str) -> Target:
    """The URL and the address to connect to; VALIDATION_ERROR if the host does not resolve or, unless
    LEASEHOLD_WEBHOOK_ALLOW_PRIVATE=1, resolves to any address that is not public.

    Every address the host resolves to must be public: a name that resolves to
    one public and one private address could be steered to the private one.
    An IPv6 address that embeds an IPv4 one (mapped, 6to4, Teredo, NAT64) is
    judged by that IPv4 too. Checked at creation and again before every try (a
    name can move); the try connects to the address checked here.
    """
    parsed = parse_url(url)
    host = parsed.raw_host.decode("ascii")
    port = parsed.port or (443 if parsed.scheme == "https" else 80)
    unresolvable = ValidationFailed(
        f"url's host {parsed.host!r} does not resolve.", details={"fields": {"url": ["unresolvable"]}}
    )
    try:
        addresses = [str(info[4][0]) for info in socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)]
    except (OSError, ValueError, UnicodeError):
        raise unresolvable from None
    if not addresses:
        raise unresolvable
    if not settings.LEASEHOLD_WEBHOOK_ALLOW_PRIVATE:
        refused = sorted({address for address in addresses if _refused_address(address)})
        if refused:
            raise ValidationFailed(
                f"url resolves to a loopback, private or link-local address ({', '.join(refused)}); "
                "set LEASEHOLD_WEBHOOK_ALLOW_PRIVATE=1 to allow it.",
                details={"fields": {"url": ["private_address"]}},
            )
    return Target(url=parsed, address=addresses[0], port=port)


@dataclass(frozen=True)
class TryResult:
    delivered: bool
    status_code: int | None
    error: str


class _DeadlineStream(httpcore.NetworkStream):
    """A socket whose every read and write waits at most until the try's deadline: httpx's timeouts are
    per read, so a receiver that trickles its answer a byte at a time would never trip them."""

    def __init__(self, stream: httpcore.NetworkStream, deadline: float) -> None:
        self._stream = stream
        self._deadline = deadline

    def _timeout(self, timeout: float | None) -> float:
        left = self._deadline - time.monotonic()
        if left <= 0:
            raise httpcore.ReadTimeout(f"no answer within the try's {TIMEOUT_SECONDS:g} s")
        return left if timeout is None else min(timeout, left)

    def read(self, max_bytes: int, timeout: float | None = None) -> bytes:
        return self._stream.read(max_bytes, self._timeout(timeout))

    def write(self, buffer: bytes, timeout: float | None = None) -> None:
        self._stream.write(buffer, self._timeout(timeout))

    def close(self) -> None:
        self._stream.close()

    def start_tls(
        self, ssl_context: ssl.SSLContext, server_hostname: str | None = None, timeout: float | None = None
    ) -> httpcore.NetworkStream:
        tls = self._stream.start_tls(ssl_context, server_hostname, self._timeout(timeout))
        return _DeadlineStream(tls, self._deadline)

    def get_extra_info(self, info: str) -> Any:
        return self._stream.get_extra_info(info)


class _PinnedBackend(httpcore.NetworkBackend):
    """Connects to the checked address whatever host the URL names; TLS still verifies (and SNI
    still sends) the URL's host name, and the Host header is the URL's."""

    def __init__(self, target: Target, deadline: float) -> None:
        self._target = target
        self._deadline = deadline
        self._tcp = httpcore.SyncBackend()

    def connect_tcp(
        self,
        host: str,
        port: int,
        timeout: float | None = None,
        local_address: str | None = None,
        socket_options: Iterable[Any] | None = None,
    ) -> httpcore.NetworkStream:
        left = max(self._deadline - time.monotonic(), 0.001)
        stream = self._tcp.connect_tcp(
            self._target.address,
            self._target.port,
            timeout=left if timeout is None else min(timeout, left),
            local_address=local_address,
            socket_options=socket_options,
        )
        return _DeadlineStream(stream, self._deadline)

    def connect_unix_socket(
        self, path: str, timeout: float | None = None, socket_options: Iterable[Any] | None = None
    ) -> httpcore.NetworkStream:
        raise httpcore.ConnectError("webhooks never use unix sockets")

    def sleep(self, seconds: float) -> None:
        time.sleep(seconds)


@functools.cache
def _ssl_context() -> ssl.SSLContext:
    return httpx.create_ssl_context()


def post(*, url: str, body: bytes, event_id: int, signature: str) -> TryResult:
    """One POST within TIMEOUT_SECONDS in all; a 2xx is delivered, anything else (or no answer) is a failed try.

    No redirects followed. The answer's status line and headers are read, its
    body never (a receiver's 300 MB answer costs nothing here). Any exception
    is a failed try: one endpoint never stops the run for the others.
    """
    deadline = time.monotonic() + TIMEOUT_SECONDS
    try:
        target = resolve_target(url)
    except ValidationFailed as exc:
        return TryResult(False, None, exc.message[:300])
    headers = [
        (b"Host", target.url.netloc),
        (b"Content-Type", b"application/json"),
        (b"User-Agent", USER_AGENT.encode()),
        (b"Leasehold-Event-Id", str(event_id).encode()),
        (b"Leasehold-Signature", signature.encode()),
    ]
    request_url = httpcore.URL(
        scheme=target.url.raw_scheme, host=target.url.raw_host, port=target.url.port, target=target.url.raw_path
    )
    timeouts = {"connect": TIMEOUT_SECONDS, "read": TIMEOUT_SECONDS, "write": TIMEOUT_SECONDS, "pool": TIMEOUT_SECONDS}
    try:
        with (
            httpcore.ConnectionPool(
                ssl_context=_ssl_context(), network_backend=_PinnedBackend(target, deadline), max_connections=1
            ) as pool,
            pool.stream("POST", request_url, headers=headers, content=body, extensions={"timeout": timeouts}) as answer,
        ):
            status_code = answer.status
    except Exception as exc:  # any failure of a try is a failed try, recorded
        return TryResult(False, None, f"{type(exc).__name__}: {exc}"[:300])
    if 200 <= status_code < 300:
        return TryResult(True, status_code, "")
    return TryResult(False, status_code, f"HTTP {status_code}")
