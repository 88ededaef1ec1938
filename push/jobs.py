"""django-q2 entry points of the ledger: thin wrappers over services, safe to run twice at once (SPEC §9)."""

from __future__ import annotations

from dataclasses import asdict
from typing import Any

from push.services.deliveries import webhook_deliveries_follow

# Below the schedule's minute, so one run ends before the next begins (two at once would still be safe).
FOLLOW_SECONDS = 50.0


def deliver_webhooks_job() -> dict[str, Any]:
    """Post due webhook deliveries, looking again every second for 50 s; at once done with no active endpoint."""
    return asdict(webhook_deliveries_follow(seconds=FOLLOW_SECONDS))
