"""Webhook deliveries (SPEC §18): the run that posts them.

Delivery rows are created by the event table's trigger (see
`push.models`), never here. `webhook_deliveries_run` delivers them:
per endpoint in event-id order (an endpoint's oldest open delivery is its
head; nothing behind it is posted before it is delivered or dead), at least
once (a row is marked delivered only after a 2xx), each try claimed by
compare-and-set so that two runs at once never post the same try, and the
POST itself outside any transaction.

Retry schedule after a failed try (8 tries in about 24 h, then `dead`):
BACKOFF_SECONDS. An endpoint whose tries fail DISABLE_AFTER_FAILURES times in
a row is deactivated with a `webhook.disabled` warn event; its open
deliveries wait until it is enabled again.
"""

from __future__ import annotations

import time as monotonic_time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from datetime import datetime, timedelta

from django.db.models import Exists, F, OuterRef, Q
from django.urls import NoReverseMatch, reverse

from core.db import write_transaction
from ledger import clock
from ledger.actors import SYSTEM
from push import secret_box, webhooks
from push.models import (
    OPEN_DELIVERY_STATUSES,
    DeliveryStatus,
    WebhookDelivery,
    WebhookEndpoint,
)
from push.services.webhooks import webhook_set_active

# Waits after the 1st … 7th failed try: roughly four times longer each, 23.9 h in all; the 8th failure is final.
BACKOFF_SECONDS: tuple[int, ...] = (30, 120, 600, 1800, 3600, 14400, 64800)
MAX_TRIES = len(BACKOFF_SECONDS) + 1
DISABLE_AFTER_FAILURES = 20
# How long a run holds a try it claimed: beyond the 5 s deadline of a try, so a crashed run's claim lapses soon.
CLAIM_SECONDS = 30
# Endpoints posted to at once by a run.
POSTING_THREADS = 8


def _secrets_in_use(endpoint: WebhookEndpoint, now: datetime) -> list[str]:
    """The secrets that sign now, decrypted: the current one, and the previous one for 24 h after a roll."""
    keys = [secret_box.decrypt(endpoint.secret)]
    if endpoint.previous_secret and endpoint.previous_secret_expires_at and endpoint.previous_secret_expires_at > now:
        keys.append(secret_box.decrypt(endpoint.previous_secret))
    return keys


def _admin_path(task_id: int | None, event_id: int) -> str:
    try:
        if task_id is not None:
            return reverse("admin:ledger_task_change", args=[task_id])
        return reverse("admin:ledger_event_change", args=[event_id])
    except NoReverseMatch:
        return "/admin/"


DELIVERY_FIELDS = (
    "id",
    "attempts",
    "event_id",
    "event__type",
    "event__severity",
    "event__project__slug",
    "event__task_id",
    "event__task__key",
    "event__attempt_id",
    "event__actor_agent__handle",
    "event__actor_user__username",
    "event__payload",
    "event__created_at",
)


def _backoff(attempts: int) -> timedelta:
    """The wait after the `attempts`-th failed try; after the last one only until its claim lapses."""
    if attempts >= MAX_TRIES:
        return timedelta(seconds=CLAIM_SECONDS)
    return timedelta(seconds=BACKOFF_SECONDS[attempts - 1])


@write_transaction
def _claim_head(endpoint: WebhookEndpoint, now: datetime) -> dict[str, object] | None:
    """The endpoint's oldest open delivery if it is due, claimed for this run; None if not due or taken.

    The try is recorded as failed before it is made (attempts + 1, the next
    try after its backoff, a failure in the endpoint's streak), and
    `_record_try` overwrites that with what the try did: a job killed in the
    middle of a POST leaves a counted try, never the same try posted again
    and again with `attempts` unchanged. A delivery whose last try was
    interrupted so is dead here, without a ninth POST.
    """
    while True:
        head = (
            WebhookDelivery.objects.filter(endpoint=endpoint, status__in=OPEN_DELIVERY_STATUSES)
            .order_by("event_id")
            .values(*DELIVERY_FIELDS, "next_attempt_at", "claimed_until")
            .first()
        )
        if head is None or head["next_attempt_at"] > now:
            return None
        attempts: int = head["attempts"]
        current = WebhookDelivery.objects.filter(
            pk=head["id"], attempts=attempts, status__in=OPEN_DELIVERY_STATUSES
        ).filter(Q(claimed_until__isnull=True) | Q(claimed_until__lte=now))
        if attempts >= MAX_TRIES:
            if not current.update(status=DeliveryStatus.DEAD, claimed_until=None):
                return None  # another run holds it
            continue
        claimed = current.update(
            attempts=attempts + 1,
            status=DeliveryStatus.FAILED,
            next_attempt_at=now + _backoff(attempts + 1),
            claimed_until=now + timedelta(seconds=CLAIM_SECONDS),
            last_attempt_at=now,
            last_status_code=None,
            last_error="interrupted: the try was cut off before its answer was recorded",
        )
        if not claimed:
            return None
        WebhookEndpoint.objects.filter(pk=endpoint.pk).update(consecutive_failures=F("consecutive_failures") + 1)
        return head


@write_transaction
def _record_try(*, delivery_id: int, endpoint_id: int, result: webhooks.TryResult, at: datetime) -> bool:
    """Write what one try did (its claim counted it as failed already); returns whether the endpoint
    may go on with its next delivery."""
    delivery = WebhookDelivery.objects.select_for_update(no_key=True).get(pk=delivery_id)
    endpoint = WebhookEndpoint.objects.select_for_update(no_key=True).get(pk=endpoint_id)
    delivery.last_attempt_at = at
    delivery.last_status_code = result.status_code
    delivery.last_error = result.error
    delivery.claimed_until = None
    if result.delivered:
        delivery.status = DeliveryStatus.DELIVERED
        delivery.delivered_at = at
        endpoint.consecutive_failures = 0
        endpoint.last_delivered_at = at
        endpoint.save(update_fields=["consecutive_failures", "last_delivered_at"])
    elif delivery.attempts >= MAX_TRIES:
        delivery.status = DeliveryStatus.DEAD
    else:
        delivery.status = DeliveryStatus.FAILED
        delivery.next_attempt_at = at + _backoff(delivery.attempts)
    delivery.save()
    if not result.delivered and endpoint.is_active and endpoint.consecutive_failures >= DISABLE_AFTER_FAILURES:
        webhook_set_active(
            endpoint=endpoint,
            active=False,
            actor=SYSTEM,
            reason=f"{endpoint.consecutive_failures} failed tries in a row",
        )
    return result.delivered or delivery.status == DeliveryStatus.DEAD


@dataclass
class DeliveryRun:
    tries: int = 0
    delivered: int = 0
    failed: int = 0
    endpoints: list[int] = field(default_factory=list)


def _try(endpoint: WebhookEndpoint, head: dict[str, object], now: datetime) -> webhooks.TryResult:
    """Build, sign and post one delivery; any exception is a failed try, never the run's end."""
    try:
        document = webhooks.event_document(head)
        body = webhooks.delivery_body(
            document,
            format=endpoint.format,
            admin_path=_admin_path(head["event__task_id"], head["event_id"]),  # type: ignore[arg-type]
        )
        signature = webhooks.signature_header(
            secrets_in_use=_secrets_in_use(endpoint, now), timestamp=int(now.timestamp()), body=body
        )
    except Exception as exc:  # recorded on the delivery, which an operator sees
        return webhooks.TryResult(False, None, f"{type(exc).__name__}: {exc}"[:300])
    return webhooks.post(url=endpoint.url, body=body, event_id=document["id"], signature=signature)


def webhook_deliveries_run(*, max_tries: int = 500) -> DeliveryRun:
    """Post every due delivery, each endpoint's in event-id order; at most `max_tries` POSTs per run.

    Endpoints are posted to side by side, one try each per round (the
    database work stays on this thread): a slow receiver costs the others at
    most one try's deadline, after which its failed head waits out its backoff.
    """
    run = DeliveryRun()
    open_work = WebhookDelivery.objects.filter(endpoint=OuterRef("pk"), status__in=OPEN_DELIVERY_STATUSES)
    going_on = list(WebhookEndpoint.objects.filter(is_active=True).filter(Exists(open_work)).order_by("id"))
    run.endpoints = [endpoint.pk for endpoint in going_on]
    with ThreadPoolExecutor(max_workers=POSTING_THREADS, thread_name_prefix="webhook-post") as posting:
        while going_on and run.tries < max_tries:
            now = clock.now()
            claimed = []
            for endpoint in going_on[: max_tries - run.tries]:
                head = _claim_head(endpoint, now)
                if head is not None:
                    claimed.append((endpoint, head))
            results = posting.map(
                _try, [endpoint for endpoint, _ in claimed], [head for _, head in claimed], [now] * len(claimed)
            )
            going_on = []
            for (endpoint, head), result in zip(claimed, results, strict=True):
                run.tries += 1
                run.delivered += int(result.delivered)
                run.failed += int(not result.delivered)
                go_on = _record_try(delivery_id=head["id"], endpoint_id=endpoint.pk, result=result, at=clock.now())  # type: ignore[arg-type]
                endpoint.refresh_from_db(fields=["is_active"])
                if go_on and endpoint.is_active:
                    going_on.append(endpoint)
    return run


def webhook_deliveries_follow(*, seconds: float, pause: float = 1.0) -> DeliveryRun:
    """Deliver, then look again every `pause` seconds, for `seconds`; returns at once when no endpoint is active.

    The scheduled job runs this for most of its minute, so a new event is
    posted within about a second instead of at the next schedule.
    """
    total = DeliveryRun()
    stop_at = monotonic_time.monotonic() + seconds
    while True:
        if not WebhookEndpoint.objects.filter(is_active=True).exists():
            return total
        run = webhook_deliveries_run()
        total.tries += run.tries
        total.delivered += run.delivered
        total.failed += run.failed
        if monotonic_time.monotonic() + pause >= stop_at:
            return total
        monotonic_time.sleep(pause)
