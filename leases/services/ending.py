"""Ending an attempt, shared by the holder's own calls and an admin's revocation.

Both run inside the caller's transaction, with the attempt (and, where the
task's row is written, the task) already locked by it.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from core.combined import update_row_or_queue
from leases.models import Attempt, AttemptStatus
from ledger.models import Task, TaskStatus
from ledger.services import tasks_wait_again


def end_attempt(attempt: Attempt, *, now: datetime, status: str, **outcome: Any) -> None:
    """Move the active attempt to a terminal `status`; `finished_at` is set exactly then."""
    fields = {"status": status, "finished_at": now, **outcome}
    for name, value in fields.items():
        setattr(attempt, name, value)
    update_row_or_queue(attempt, list(fields), status=AttemptStatus.ACTIVE)


def task_claimable_again(task: Task, *, now: datetime) -> Task:
    """A lease ended without finishing the task: it is claimable again from now (`ledger`'s rule)."""
    if task.status == TaskStatus.READY:
        tasks_wait_again({task.pk: now})
        task.ready_since = now
    return task
