"""Webhook endpoints (SPEC §18): creation, secrets, enabling, redelivery; posting is `push.services.deliveries`."""

from __future__ import annotations

from collections.abc import Iterable
from datetime import timedelta
from urllib.parse import urlsplit

from core.db import write_transaction
from core.errors import ValidationFailed
from ledger import clock
from ledger.actors import Actor
from ledger.models import EventType, Project, Severity
from ledger.services.events import event_append
from push import secret_box, webhooks
from push.models import (
    OPEN_DELIVERY_STATUSES,
    SEVERITY_RANK,
    DeliveryStatus,
    WebhookDelivery,
    WebhookEndpoint,
    WebhookFormat,
)

SECRET_OVERLAP = timedelta(hours=24)


def _clean_event_types(event_types: Iterable[str]) -> list[str]:
    wanted = sorted({name.strip() for name in event_types if name.strip()})
    unknown = [name for name in wanted if name not in EventType.values]
    if unknown:
        raise ValidationFailed(
            f"Unknown event type(s): {', '.join(unknown)}.", details={"fields": {"event_types": ["invalid"]}}
        )
    return wanted


def _clean_choice(value: str, choices: list[str], name: str) -> str:
    if value not in choices:
        raise ValidationFailed(
            f"{name} must be one of {', '.join(choices)}; got {value!r}.", details={"fields": {name: ["invalid"]}}
        )
    return value


def url_origin(url: str) -> str:
    """Scheme, host and port only: a URL's path can be a credential (a Slack incoming-webhook URL
    is one), and events reach agents, the changes feed, webhooks and exports."""
    parts = urlsplit(url)
    return f"{parts.scheme}://{parts.netloc}/…" if parts.path.strip("/") or parts.query else url


def _endpoint_payload(endpoint: WebhookEndpoint) -> dict[str, object]:
    # Never the secret (SPEC §18: not in events), nor the URL's path.
    return {
        "endpoint": endpoint.pk,
        "url": url_origin(endpoint.url),
        "project": endpoint.project.slug if endpoint.project else None,
        "event_types": endpoint.event_types,
        "min_severity": endpoint.min_severity,
        "format": endpoint.format,
    }


@write_transaction
def webhook_create(
    *,
    url: str,
    actor: Actor,
    project: Project | None = None,
    event_types: Iterable[str] = (),
    min_severity: str = Severity.INFO,
    format: str = WebhookFormat.JSON,
) -> tuple[WebhookEndpoint, str]:
    """Create an active endpoint; returns it and its signing secret, which is shown this once and never again."""
    now = clock.now()
    if len(url) > 500:
        raise ValidationFailed("url is longer than 500 characters.", details={"fields": {"url": ["too_long"]}})
    webhooks.check_target(url)
    severity = _clean_choice(min_severity, list(Severity.values), "min_severity")
    secret = webhooks.new_secret()
    endpoint = WebhookEndpoint.objects.create(
        url=url,
        project=project,
        event_types=_clean_event_types(event_types),
        min_severity=severity,
        min_severity_rank=SEVERITY_RANK[severity],
        format=_clean_choice(format, list(WebhookFormat.values), "format"),
        secret=secret_box.encrypt(secret),
        created_at=now,
    )
    event_append(
        type=EventType.WEBHOOK_CREATED, actor=actor, at=now, project=project, payload=_endpoint_payload(endpoint)
    )
    return endpoint, secret


@write_transaction
def webhook_roll_secret(*, endpoint: WebhookEndpoint, actor: Actor) -> tuple[WebhookEndpoint, str]:
    """A new signing secret, shown once; the current one keeps signing alongside (a second v1=) for 24 h.

    A current secret that no key decrypts any more (the secret key changed
    with no fallback) is dropped at once instead: it could not sign.
    """
    now = clock.now()
    locked = WebhookEndpoint.objects.select_for_update(no_key=True).get(pk=endpoint.pk)
    secret = webhooks.new_secret()
    try:
        locked.previous_secret = secret_box.reencrypt(locked.secret)
        locked.previous_secret_expires_at = now + SECRET_OVERLAP
    except secret_box.SecretUnreadable:
        locked.previous_secret = ""
        locked.previous_secret_expires_at = now
    locked.secret = secret_box.encrypt(secret)
    locked.save(update_fields=["secret", "previous_secret", "previous_secret_expires_at"])
    event_append(
        type=EventType.WEBHOOK_SECRET_ROLLED,
        actor=actor,
        at=now,
        project=locked.project,
        payload={"endpoint": locked.pk, "previous_valid_until": locked.previous_secret_expires_at.isoformat()},
    )
    return locked, secret


@write_transaction
def webhook_secrets_reencrypt() -> int:
    """Encrypt every stored signing secret anew with the current SECRET_KEY; returns how many endpoints.

    The step of a secret-key rotation after which the old key can leave
    SECRET_KEY_FALLBACKS. Raises SecretUnreadable, changing nothing, when a
    secret reads with none of the keys.
    """
    endpoints = list(WebhookEndpoint.objects.select_for_update(no_key=True).order_by("id"))
    for endpoint in endpoints:
        endpoint.secret = secret_box.reencrypt(endpoint.secret)
        endpoint.previous_secret = secret_box.reencrypt(endpoint.previous_secret)
    WebhookEndpoint.objects.bulk_update(endpoints, ["secret", "previous_secret"])
    return len(endpoints)


@write_transaction
def webhook_set_active(*, endpoint: WebhookEndpoint, active: bool, actor: Actor, reason: str = "") -> bool:
    """Enable or disable; enabling clears the failure streak. Returns whether anything changed."""
    now = clock.now()
    locked = WebhookEndpoint.objects.select_for_update(no_key=True).get(pk=endpoint.pk)
    if locked.is_active == active:
        return False
    locked.is_active = active
    locked.disabled_at = None if active else now
    if active:
        locked.consecutive_failures = 0
    locked.save(update_fields=["is_active", "disabled_at", "consecutive_failures"])
    event_append(
        type=EventType.WEBHOOK_ENABLED if active else EventType.WEBHOOK_DISABLED,
        actor=actor,
        at=now,
        project=locked.project,
        severity=Severity.INFO if active else Severity.WARN,
        payload={"endpoint": locked.pk, "url": url_origin(locked.url), **({"reason": reason} if reason else {})},
    )
    return True


@write_transaction
def delivery_redeliver(*, deliveries: Iterable[WebhookDelivery], actor: Actor) -> int:
    """Post these events again from a fresh start (tries counted anew); returns how many were queued."""
    now = clock.now()
    ids = [delivery.pk for delivery in deliveries]
    if not ids:
        return 0
    queued = WebhookDelivery.objects.filter(pk__in=ids).update(
        status=DeliveryStatus.PENDING, attempts=0, next_attempt_at=now, claimed_until=None, delivered_at=None
    )
    event_append(
        type=EventType.WEBHOOK_REDELIVERED,
        actor=actor,
        at=now,
        payload={"deliveries": sorted(ids)[:50], "count": queued},
    )
    return queued


@write_transaction
def webhook_backlog_drop(*, endpoint: WebhookEndpoint, actor: Actor) -> int:
    """Mark a disabled endpoint's open deliveries dead; returns how many.

    The rows stay (deliveries are an audit log, never deleted), in the terminal
    state `dead`, with who dropped them in `last_error`; *Redeliver* can queue
    any of them again. An active endpoint is refused: its run would still be
    posting the head of that backlog.
    """
    now = clock.now()
    locked = WebhookEndpoint.objects.select_for_update(no_key=True).get(pk=endpoint.pk)
    if locked.is_active:
        raise ValidationFailed(
            f"Webhook #{locked.pk} is active: disable it before dropping its backlog.",
            details={"fields": {"endpoint": ["active"]}},
        )
    dropped = WebhookDelivery.objects.filter(endpoint=locked, status__in=OPEN_DELIVERY_STATUSES).update(
        status=DeliveryStatus.DEAD,
        claimed_until=None,
        last_error=f"dropped with the disabled endpoint's backlog by {actor.label}"[:300],
    )
    if dropped:
        event_append(
            type=EventType.WEBHOOK_BACKLOG_DROPPED,
            actor=actor,
            at=now,
            project=locked.project,
            severity=Severity.WARN,
            payload={"endpoint": locked.pk, "url": url_origin(locked.url), "count": dropped},
        )
    return dropped


@write_transaction
def webhook_send_test(*, endpoint: WebhookEndpoint, actor: Actor) -> WebhookDelivery:
    """Queue one `webhook.test` delivery for this endpoint alone; the next delivery run posts it.

    The event trigger makes no delivery for this type (migration
    `ledger.0019_webhook_test_events`), so the one row is made here and no other
    endpoint receives it, whatever it subscribes to. It waits behind the
    endpoint's open deliveries (head of line), and for a disabled endpoint until it is enabled.
    """
    now = clock.now()
    event = event_append(
        type=EventType.WEBHOOK_TEST,
        actor=actor,
        at=now,
        project=endpoint.project,
        payload={"endpoint": endpoint.pk, "url": url_origin(endpoint.url), "test": True},
    )
    return WebhookDelivery.objects.create(
        endpoint=endpoint, event=event, status=DeliveryStatus.PENDING, next_attempt_at=now, created_at=now
    )
