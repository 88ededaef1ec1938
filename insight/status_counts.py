"""Tasks per project and effective status, exact, without reading the task table (for /metrics and the dashboard).

The stored statuses come from the trigger-kept counts
(`ledger.selectors.task_counts_by_status`, a few rows per project); each
live lease then moves its task from its stored status to `in_progress`, or
to `in_review` for a reviewer's lease (SPEC §16.1), as
`leases.selectors.with_lease_state` decides per task (a task has at most
one active attempt: constraint `attempt_one_active_per_task`). Blocked-by
and claimable are not effective statuses and are not counted here.
"""

from __future__ import annotations

from datetime import datetime

from django.db.models import Count

from core.db import read_snapshot
from leases.models import AttemptKind
from leases.selectors import IN_PROGRESS, IN_REVIEW, live_attempts
from ledger.selectors import task_counts_by_status


def task_counts_by_effective_status(now: datetime) -> dict[tuple[int, str], int]:
    """{(project id, effective status): tasks}; pairs with no task left out. Two statements, one snapshot
    (a status changed between them under a live lease would otherwise be moved from the wrong count)."""
    with read_snapshot():
        counts = task_counts_by_status()
        # Partial index attempt_active_expiry: the live leases by project, stored status and kind.
        live = list(
            live_attempts(now).order_by().values("task__project_id", "task__status", "kind").annotate(n=Count("id"))
        )
    for row in live:
        stored = (row["task__project_id"], row["task__status"])
        counts[stored] = counts.get(stored, 0) - row["n"]
        held = (row["task__project_id"], IN_REVIEW if row["kind"] == AttemptKind.REVIEW else IN_PROGRESS)
        counts[held] = counts.get(held, 0) + row["n"]
    return {key: n for key, n in counts.items() if n}
