"""Folding the task-count changes that the task triggers append into one row per project and status.

The triggers of migration `ledger.0012_task_counts` append a change row for
every task insert, delete and status change, so the count is always exact
without this fold (`insight.status_counts.task_counts_by_status` adds the pending
changes); folding only keeps the change table short, so that a reader sums a
few rows per project. `/metrics` folds at each scrape, and the sweep job
(`leases.jobs.sweep_expired_job`) every minute.
"""

from __future__ import annotations

from django.db import connection

from core.db import write_transaction

POSTGRES_FOLD = """
WITH moved AS (DELETE FROM ledger_taskcountchange RETURNING project_id, status, delta),
folded AS (
    INSERT INTO ledger_taskcount (project_id, status, count)
    SELECT project_id, status, sum(delta) FROM moved GROUP BY project_id, status
    ON CONFLICT (project_id, status) DO UPDATE SET count = ledger_taskcount.count + EXCLUDED.count
)
SELECT count(*) FROM moved
"""
SQLITE_FOLD = """
INSERT INTO ledger_taskcount (project_id, status, count)
SELECT project_id, status, sum(delta) FROM ledger_taskcountchange WHERE id <= %s GROUP BY project_id, status
ON CONFLICT (project_id, status) DO UPDATE SET count = ledger_taskcount.count + excluded.count
"""


@write_transaction
def task_counts_fold() -> int:
    """Move every committed change into `TaskCount`; returns how many change rows were folded.

    PostgreSQL: one statement deletes the changes it can see and adds them
    up, so a change committed meanwhile (whatever its id) stays for the next
    fold; a second fold at once waits on the first's rows and then skips
    them, never counting a change twice. SQLite serializes writers: every
    change up to the highest id is committed, and moves in two statements.
    """
    with connection.cursor() as cursor:
        if connection.vendor == "postgresql":
            cursor.execute(POSTGRES_FOLD)
            (moved,) = cursor.fetchone()
            return int(moved)
        cursor.execute("SELECT max(id), count(*) FROM ledger_taskcountchange")
        highest, moved = cursor.fetchone()
        if highest is None:
            return 0
        cursor.execute(SQLITE_FOLD, [highest])
        cursor.execute("DELETE FROM ledger_taskcountchange WHERE id <= %s", [highest])
        return int(moved)
