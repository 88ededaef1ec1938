"""django-q2 entry point of operations: the daily backup."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from django.conf import settings

from ledger import clock
from operations.backup import backup_scheduled


def backup_job() -> dict[str, Any]:
    """The daily backup (scheduled while LEASEHOLD_BACKUP_DIR is set): a new file; the oldest beyond KEEP go."""
    made, removed = backup_scheduled(
        directory=Path(settings.LEASEHOLD_BACKUP_DIR), keep=settings.LEASEHOLD_BACKUP_KEEP, now=clock.now()
    )
    return {"backup": str(made), "removed": [str(path) for path in removed]}
