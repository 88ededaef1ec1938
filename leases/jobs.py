"""django-q2 entry points: thin wrappers over services, safe to run twice at once (SPEC §9)."""

from __future__ import annotations

from dataclasses import asdict
from typing import Any

from leases.services import check_queue_wait, sweep_expired


def sweep_expired_job() -> dict[str, Any]:
    return asdict(sweep_expired())


def check_queue_wait_job() -> int:
    return check_queue_wait()


def purge_idempotency_job() -> int:
    """Delete idempotency records older than 24 h (they are a response cache, not history)."""
    from datetime import timedelta

    from leases.models import IdempotencyRecord
    from ledger import clock

    deleted, _ = IdempotencyRecord.objects.filter(created_at__lt=clock.now() - timedelta(hours=24)).delete()
    return deleted
