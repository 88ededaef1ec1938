"""Idempotency records: the answers to mutations sent with an `Idempotency-Key`."""

from __future__ import annotations

from django.db import models

from ledger.models import Agent


class IdempotencyRecord(models.Model):
    """A stored response to replay for the same (agent, key) and request.

    Never contains a lease token: a replayed claim re-derives it (see
    `leases.tokens`). Kept 24 h, then purged — the one table whose rows are
    deleted, because they are a cache of responses, not ledger history.
    """

    agent = models.ForeignKey(Agent, on_delete=models.PROTECT, related_name="+")
    key = models.CharField(max_length=128)
    fingerprint = models.CharField(max_length=64)
    status_code = models.PositiveSmallIntegerField()
    response = models.JSONField(null=True, blank=True)
    attempt_id = models.BigIntegerField(null=True, blank=True)
    created_at = models.DateTimeField(db_index=True)

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["agent", "key"], name="idempotency_unique_per_agent"),
        ]

    def __str__(self) -> str:
        return f"{self.agent_id}:{self.key}"
