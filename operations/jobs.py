"""django-q2 entry points of operations: the daily backup, the event table's month partitions."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from django.conf import settings

from ledger import clock
from operations.backup import backup_scheduled
from operations.event_partitions import ensure_partitions


def backup_job() -> dict[str, Any]:
    """The daily backup (scheduled while LEASEHOLD_BACKUP_DIR is set): a new file; the oldest beyond KEEP go."""
    made, removed = backup_scheduled(
        directory=Path(settings.LEASEHOLD_BACKUP_DIR), keep=settings.LEASEHOLD_BACKUP_KEEP, now=clock.now()
    )
    return {"backup": str(made), "removed": [str(path) for path in removed]}


def event_partitions_job() -> dict[str, Any]:
    """Daily: the event table's partitions of this month and the next three exist (PostgreSQL; SQLite: none)."""
    result = ensure_partitions(now=clock.now())
    return {"made": result.made, "refused": result.refused}
