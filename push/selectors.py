"""Reads of the webhooks' state that are more than a get(): an endpoint's backlog (issue 32)."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime, timedelta

from django.db.models import Count, Min

from push.models import OPEN_DELIVERY_STATUSES, WebhookDelivery, WebhookEndpoint


@dataclass(frozen=True)
class Backlog:
    """What an endpoint has not delivered yet: its open (pending, or failed and retrying) deliveries."""

    pending: int
    oldest_pending_at: datetime | None
    last_delivered_at: datetime | None
    # How far behind the endpoint is: the age of its oldest open delivery; None when nothing waits.
    lag: timedelta | None


def endpoint_backlogs(endpoints: Iterable[WebhookEndpoint], *, now: datetime) -> dict[int, Backlog]:
    """The backlog of each endpoint, in one grouped query for the whole list (no query per row).

    Only open deliveries are read, through the partial index `webhook_delivery_open`
    (an endpoint with 761k delivered rows costs what its open ones cost); the last
    delivery is the endpoint's own `last_delivered_at`, never a scan of the delivered rows.
    """
    by_id = {endpoint.pk: endpoint for endpoint in endpoints}
    if not by_id:
        return {}
    open_rows = (
        WebhookDelivery.objects.filter(endpoint_id__in=list(by_id), status__in=OPEN_DELIVERY_STATUSES)
        .order_by()
        .values("endpoint_id")
        .annotate(pending=Count("id"), oldest=Min("created_at"))
    )
    counted = {row["endpoint_id"]: (row["pending"], row["oldest"]) for row in open_rows}
    backlogs = {}
    for pk, endpoint in by_id.items():
        pending, oldest = counted.get(pk, (0, None))
        backlogs[pk] = Backlog(
            pending=pending,
            oldest_pending_at=oldest,
            last_delivered_at=endpoint.last_delivered_at,
            lag=now - oldest if oldest is not None else None,
        )
    return backlogs
