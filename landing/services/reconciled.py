"""Landed outside the queue (SPEC §21.2): reconciliation found a delivered task's head in the target.

How `land_method=none` projects (merges through a forge's pull requests) reach `done`, and how a
task merged by hand while it waited in the queue leaves it. Reconciliation decides with git which
heads are ancestors of the target's tip (outside any transaction) and calls this with the answer.
"""

from __future__ import annotations

from collections.abc import Mapping

from core.db import write_transaction
from landing.models import LandingStatus, LandingTask
from ledger import clock
from ledger.actors import SYSTEM
from ledger.models import EventType, Task, TaskStatus
from ledger.services import apply_task_update, event_append, lock_task

LANDED_BY_RECONCILIATION = "reconciliation"


@write_transaction
def tasks_landed_outside(*, landed: Mapping[int, tuple[str, str]]) -> list[Task]:
    """Mark these delivered tasks landed: {task id: (the head found in the target, the target's tip)}.

    A task that changed meanwhile (no longer delivered, or delivered at another head) or that a
    live landing is landing right now is left alone: the lander's own finish decides it.
    """
    now = clock.now()
    done: list[Task] = []
    for task_id, (head, tip) in sorted(landed.items()):
        task = lock_task(task_id)
        if task.status != TaskStatus.DELIVERED or task.delivered_commit != head:
            continue
        if LandingTask.objects.filter(task_id=task_id, landing__status=LandingStatus.ACTIVE).exists():
            continue
        task, _ = apply_task_update(locked=task, actor=SYSTEM, changes={"status": TaskStatus.DONE}, now=now)
        Task.objects.filter(pk=task_id).update(
            landed_commit=tip, landed_at=now, landed_by=LANDED_BY_RECONCILIATION, failed_landings=0
        )
        task.landed_commit, task.landed_at, task.landed_by = tip, now, LANDED_BY_RECONCILIATION
        event_append(
            type=EventType.TASK_LANDED,
            actor=SYSTEM,
            at=now,
            task=task,
            payload={
                "landing": None,
                "landed_commit": tip,
                "target_branch": task.project.target_branch,
                "head_commit": head,
                "landed_by": LANDED_BY_RECONCILIATION,
            },
        )
        done.append(task)
    return done
