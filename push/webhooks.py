"""What a webhook delivery sends and where it may go (SPEC §18): the body, the signature, the target check, the POST.

No database writes here: `push.services.webhooks` records what a try did.

Signature: `Leasehold-Signature: t=<unix seconds>,v1=<hex HMAC-SHA256(secret, "<t>.<body>")>`;
during the 24 h after a secret was rolled a second `v1=` (made with the old
secret) follows. The secret is the string shown at creation, used as UTF-8.
A receiver recomputes the HMAC over the exact bytes it received and accepts
when any `v1=` matches (docs/operations.md shows the ten lines).
"""

from __future__ import annotations

import hashlib
import hmac
import ipaddress
import json
import secrets
import socket
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

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


def _refused_address(address: str) -> bool:
    ip = ipaddress.ip_address(address.split("%", 1)[0])
    if isinstance(ip, ipaddress.IPv6Address) and ip.ipv4_mapped is not None:
        ip = ip.ipv4_mapped
    return (
        ip.is_loopback
        or ip.is_private
        or ip.is_link_local
        or ip.is_multicast
        or ip.is_reserved
        or ip.is_unspecified
        or not ip.is_global
    )


def check_target(url: str) -> None:
    """VALIDATION_ERROR unless `url` is http(s) and resolves to public addresses only.

    LEASEHOLD_WEBHOOK_ALLOW_PRIVATE=1 lifts the address rule (tests, a receiver on the same host).

    Every address the host resolves to must be public: a name that resolves to
    one public and one private address could be steered to the private one.
    Checked at creation and again before every try (a name can move).
    """
    parts = urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise ValidationFailed(
            "url must be an http:// or https:// URL with a host.", details={"fields": {"url": ["invalid"]}}
        )
    if parts.username or parts.password:
        raise ValidationFailed("url must not carry a user name or password.", details={"fields": {"url": ["invalid"]}})
    if settings.LEASEHOLD_WEBHOOK_ALLOW_PRIVATE:
        return
    try:
        port = parts.port or (443 if parts.scheme == "https" else 80)
        infos = socket.getaddrinfo(parts.hostname, port, type=socket.SOCK_STREAM)
    except (OSError, ValueError, UnicodeError):
        raise ValidationFailed(
            f"url's host {parts.hostname!r} does not resolve.", details={"fields": {"url": ["unresolvable"]}}
        ) from None
    refused = sorted({str(info[4][0]) for info in infos if _refused_address(str(info[4][0]))})
    if refused:
        raise ValidationFailed(
            f"url resolves to a loopback, private or link-local address ({', '.join(refused)}); "
            "set LEASEHOLD_WEBHOOK_ALLOW_PRIVATE=1 to allow it.",
            details={"fields": {"url": ["private_address"]}},
        )


@dataclass(frozen=True)
class TryResult:
    delivered: bool
    status_code: int | None
    error: str


def post(*, url: str, body: bytes, event_id: int, signature: str) -> TryResult:
    """One POST within 5 s; a 2xx is delivered, anything else (or no answer) is a failed try. No redirects followed."""
    try:
        check_target(url)
    except ValidationFailed as exc:
        return TryResult(False, None, exc.message[:300])
    headers = {
        "Content-Type": "application/json",
        "User-Agent": USER_AGENT,
        "Leasehold-Event-Id": str(event_id),
        "Leasehold-Signature": signature,
    }
    try:
        response = httpx.post(url, content=body, headers=headers, timeout=TIMEOUT_SECONDS, follow_redirects=False)
    except httpx.HTTPError as exc:
        return TryResult(False, None, f"{type(exc).__name__}: {exc}"[:300])
    if 200 <= response.status_code < 300:
        return TryResult(True, response.status_code, "")
    return TryResult(False, response.status_code, f"HTTP {response.status_code}")
