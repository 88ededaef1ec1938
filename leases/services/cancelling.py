"""Cancelling a task, knowing about its lease (SPEC §3, §10).

A cancel is a status change through `task_update`. Under a live lease it is
contested: the holder keeps its lease, learns of the cancel at its next
renewal (`task_status: "cancelled"`) and ends the attempt itself (release,
or finish as failed or handoff: `cancelled → done` is not a transition).
With `release`, the live attempt is revoked first, through
`task_force_release`, in the same transaction, so the holder's next write
answers `LEASE_NOT_HELD` and no page shows a lease on a cancelled task.
"""

from __future__ import annotations

from dataclasses import dataclass

from core.db import write_transaction
from leases.services.revoke import Revocation, task_force_release
from leases.services.task_updates import TaskUpdated, task_update
from ledger.actors import Actor
from ledger.models import Task, TaskStatus
from ledger.services import check_status_transition, lock_task


@dataclass(frozen=True)
class Cancelled:
    updated: TaskUpdated
    revocation: Revocation | None


@write_transaction
def task_cancel(*, task: Task, actor: Actor, release: bool, reason: str = "") -> Cancelled:
    """Cancel the task; with `release`, revoke its live lease first (with `reason`), all or nothing.

    A task that cannot be cancelled (done) is refused before anything is revoked.
    """
    locked = lock_task(task.pk)
    if locked.status != TaskStatus.CANCELLED:
        check_status_transition(locked.status, TaskStatus.CANCELLED)
    revocation = task_force_release(task=locked, actor=actor, reason=reason) if release else None
    updated = task_update(task=locked, actor=actor, changes={"status": TaskStatus.CANCELLED})
    return Cancelled(updated=updated, revocation=revocation)
