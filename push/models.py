"""Webhook endpoints and their deliveries (SPEC §18), imported by `ledger.models`.

A delivery row is created for every matching event *in the event's own
transaction* by a database trigger on `ledger_event` (migration
`ledger.0011_webhooks`), not by Python: the trigger's INSERT … SELECT costs
the event path no statement of its own, sees the same committed set of
endpoints on every server process (no cache to invalidate), and also covers
the events that the sweep inserts with set-based SQL. Matching is: the
endpoint is active; its project is the event's or none (all projects); its
`event_types` is empty or names the event's type; the event's severity is at
least `min_severity`.

Delivery tries are recorded on the delivery row itself (`attempts`, the last
status and error, the next try's time). They append no event: an event per
try would itself be delivered, to every endpoint, for ever.
"""

from __future__ import annotations

from django.db import models
from django.db.models import Q

from ledger.models import Event, NoDeleteModel, Project, Severity

SEVERITY_RANK: dict[str, int] = {Severity.INFO: 0, Severity.WARN: 1, Severity.ERROR: 2}


class WebhookFormat(models.TextChoices):
    JSON = "json", "JSON (the event, signed)"
    SLACK = "slack", "Slack (one line of text)"


class WebhookEndpoint(NoDeleteModel):
    """Where events are posted. Never deleted: deactivated (`is_active`), by hand or after 20 failures in a row."""

    project = models.ForeignKey(
        Project, on_delete=models.PROTECT, null=True, blank=True, related_name="+", help_text="Empty: all projects."
    )
    url = models.URLField(max_length=500)
    event_types = models.JSONField(default=list, blank=True, help_text="Event types to post; empty: all.")
    min_severity = models.CharField(max_length=8, choices=Severity.choices, default=Severity.INFO)
    # The trigger compares ranks; kept equal to SEVERITY_RANK[min_severity] by the services.
    min_severity_rank = models.PositiveSmallIntegerField(default=0, editable=False)
    format = models.CharField(max_length=8, choices=WebhookFormat.choices, default=WebhookFormat.JSON)
    is_active = models.BooleanField(default=True)
    # The signing secret (shown once at creation, never again), encrypted with a
    # key derived from SECRET_KEY (push.secret_box): the server must read it to
    # sign, so it cannot be hashed, and the database, its dumps and backups must
    # not give it away. Read it through `push.secret_box.decrypt`.
    secret = models.CharField(max_length=255, editable=False)
    # After a roll the old key keeps signing (a second v1=) until this time; encrypted alike, '' for none.
    previous_secret = models.CharField(max_length=255, blank=True, editable=False)
    previous_secret_expires_at = models.DateTimeField(null=True, blank=True, editable=False)
    consecutive_failures = models.PositiveIntegerField(default=0, editable=False)
    disabled_at = models.DateTimeField(null=True, blank=True, editable=False)
    # Kept by the delivery run on each 2xx: the console's "last delivered" without a scan of the deliveries.
    last_delivered_at = models.DateTimeField(null=True, blank=True, editable=False)
    created_at = models.DateTimeField(editable=False)

    class Meta:
        db_table = "ledger_webhookendpoint"  # kept from before the move to this room
        ordering = ["id"]
        indexes = [
            # The trigger's scan on every event insert: active endpoints only.
            models.Index(fields=["project"], name="webhook_active_endpoints", condition=Q(is_active=True)),
        ]
        constraints = [
            models.CheckConstraint(condition=Q(min_severity_rank__lte=2), name="webhook_severity_rank_valid"),
        ]

    def __str__(self) -> str:
        return f"webhook #{self.pk} {self.url}"


class DeliveryStatus(models.TextChoices):
    PENDING = "pending", "Pending"
    DELIVERED = "delivered", "Delivered"
    FAILED = "failed", "Failed (will retry)"
    DEAD = "dead", "Dead"


OPEN_DELIVERY_STATUSES = (DeliveryStatus.PENDING, DeliveryStatus.FAILED)


class WebhookDelivery(NoDeleteModel):
    """One event for one endpoint; its tries are counted here. Rows are written by the trigger, then by the jobs."""

    endpoint = models.ForeignKey(WebhookEndpoint, on_delete=models.PROTECT, related_name="deliveries")
    # No database constraint on PostgreSQL since ledger 0022 (the event table is partitioned: no key on `id`
    # alone to point at); SQLite keeps it. A migration must not re-create it there (docs/operations.md).
    event = models.ForeignKey(Event, on_delete=models.PROTECT, related_name="+")
    status = models.CharField(max_length=12, choices=DeliveryStatus.choices, default=DeliveryStatus.PENDING)
    attempts = models.PositiveIntegerField(default=0)
    next_attempt_at = models.DateTimeField()
    # A delivering job holds the row until this time (compare-and-set), so two
    # jobs at once never post the same try twice.
    claimed_until = models.DateTimeField(null=True, blank=True)
    last_attempt_at = models.DateTimeField(null=True, blank=True)
    last_status_code = models.PositiveIntegerField(null=True, blank=True)
    last_error = models.CharField(max_length=300, blank=True)
    delivered_at = models.DateTimeField(null=True, blank=True)
    created_at = models.DateTimeField()

    class Meta:
        db_table = "ledger_webhookdelivery"  # kept from before the move to this room
        verbose_name_plural = "webhook deliveries"
        ordering = ["-id"]
        constraints = [
            models.UniqueConstraint(fields=["endpoint", "event"], name="webhook_delivery_once_per_event"),
            models.CheckConstraint(condition=Q(status__in=DeliveryStatus.values), name="webhook_delivery_status_valid"),
        ]
        indexes = [
            # The delivery job's head-of-line read: an endpoint's open deliveries in event-id order.
            models.Index(
                fields=["endpoint", "event"],
                name="webhook_delivery_open",
                condition=Q(status__in=OPEN_DELIVERY_STATUSES),
            ),
            # /metrics: deliveries by status.
            models.Index(fields=["status"], name="webhook_delivery_status"),
        ]

    def __str__(self) -> str:
        return f"delivery #{self.pk} of event {self.event_id} to endpoint {self.endpoint_id}"
