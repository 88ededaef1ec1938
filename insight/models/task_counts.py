"""Tasks per project and stored status, kept by database triggers (SPEC §18's `tasks` metric).

Imported by `ledger.models`.

Every insert, delete, and change of a task's status or project appends
`TaskCountChange` rows (+1 for the new pair, -1 for the old one) from
triggers on `ledger_task` (migration `ledger.0012_task_counts`), inside the
writing transaction, on PostgreSQL and SQLite alike: no service, bulk load or
raw UPDATE can change a task without counting it, so the counts cannot drift
from the table. Writers only append (no row is updated on the write path),
so two finishes in one project never queue on one counter row.

`insight.services.task_counts.task_counts_fold` moves the committed changes
into `TaskCount` (one row per project and status) now and then; the true
count is always `TaskCount` plus the changes not folded yet, which is what
`insight.status_counts.task_counts_by_status` reads in one statement.
"""

from __future__ import annotations

from django.db import models


class TaskCount(models.Model):
    """How many tasks of `project` had stored `status` at the last fold (add the pending changes for now)."""

    # No foreign key, as in TaskCountChange: a fold must never fail on a project deleted meanwhile.
    project_id = models.BigIntegerField()
    status = models.CharField(max_length=16)
    count = models.BigIntegerField(default=0)

    class Meta:
        db_table = "ledger_taskcount"  # kept from before the move to this room
        constraints = [models.UniqueConstraint(fields=["project_id", "status"], name="task_count_unique")]

    def __str__(self) -> str:
        return f"{self.project_id}:{self.status} = {self.count}"


class TaskCountChange(models.Model):
    """+n or -n tasks of `project` with stored `status`, appended by the task triggers; folded away later."""

    # No foreign key: the triggers write it, and a fold deletes it; the project is the task's.
    project_id = models.BigIntegerField()
    status = models.CharField(max_length=16)
    delta = models.BigIntegerField()

    class Meta:
        db_table = "ledger_taskcountchange"  # kept from before the move to this room

    def __str__(self) -> str:
        return f"{self.project_id}:{self.status} {self.delta:+d}"
