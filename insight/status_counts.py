"""Tasks per project and effective status, exact, without reading the task table (for /metrics and the dashboard).

The stored statuses come from the trigger-kept counts
(`insight.status_counts.task_counts_by_status`, a few rows per project); each
live lease then moves its task from its stored status to `in_progress`, or
to `in_review` for a reviewer's lease (SPEC §16.1), as
`leases.selectors.with_lease_state` decides per task (a task has at most
one active attempt: constraint `attempt_one_active_per_task`). Blocked-by
and claimable are not effective statuses and are not counted here.
"""

from __future__ import annotations

from datetime import datetime

from django.db import connection
from django.db.models import Count

from core.db import read_snapshot
from leases.selectors import effective_status_of_kind, live_attempts

TASK_COUNTS = """
SELECT project_id, status, sum(n) FROM (
    SELECT project_id, status, count AS n FROM ledger_taskcount
    UNION ALL
    SELECT project_id, status, delta FROM ledger_taskcountchange
) AS counts GROUP BY project_id, status
"""


def task_counts_by_status() -> dict[tuple[int, str], int]:
    """Tasks per (project id, stored status), exact, without reading the task table (pairs with none left out).

    The folded counts plus the changes not folded yet (insight/models/task_counts.py),
    in one statement and so one snapshot: two servers reading at once agree.
    It costs a few rows per project and status, whatever the number of tasks.
    """
    with connection.cursor() as cursor:
        cursor.execute(TASK_COUNTS)
        rows = cursor.fetchall()
    return {(int(project_id), str(status)): int(n) for project_id, status, n in rows if n}


def task_counts_by_effective_status(now: datetime) -> dict[tuple[int, str], int]:
    """{(project id, effective status): tasks}; pairs with no task left out. Two statements, one snapshot
    (a status changed between them under a live lease would otherwise be moved from the wrong count)."""
    with read_snapshot():
        counts = task_counts_by_status()
        # The live leases by project, stored status and kind: the active attempts through the partial index
        # attempt_one_active_per_task, their lease read from the row (the expiry index is the lease clock's).
        live = list(
            live_attempts(now).order_by().values("task__project_id", "task__status", "kind").annotate(n=Count("id"))
        )
    for row in live:
        stored = (row["task__project_id"], row["task__status"])
        counts[stored] = counts.get(stored, 0) - row["n"]
        held = (row["task__project_id"], effective_status_of_kind(row["kind"]))
        counts[held] = counts.get(held, 0) + row["n"]
    return {key: n for key, n in counts.items() if n}
