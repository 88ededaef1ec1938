"""The lease-aware task update every door calls: a holder's write renews; anyone else's may be contested."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any

from core.errors import InvalidStatusTransition, LeaseNotHeld, LedgerError, PermissionDenied
from leases.models import Attempt, AttemptStatus
from leases.services.holding import HolderProof, extend_lease, held_attempt, refusals_after_commit
from leases.services.usage import budget_refusal
from ledger import clock
from ledger.actors import Actor
from ledger.models import EventType, Task, TaskStatus
from ledger.services import apply_task_update, event_append, lock_task

BUDGET_FIELDS = frozenset({"budget_tokens", "budget_cost_usd"})


@dataclass(frozen=True)
class TaskUpdated:
    task: Task
    changed: frozenset[str]
    lease_expires_at: datetime | None


@refusals_after_commit
def task_update(
    *,
    task: Task,
    actor: Actor,
    changes: dict[str, Any],
    expected_version: int | None = None,
    proof: HolderProof | None = None,
) -> TaskUpdated | LedgerError:
    """Update a task, knowing about its lease (SPEC §3).

    With a proof, the holder's write renews its lease. Without one, a status
    change while someone else's lease is live goes through and appends exactly
    one `task.contested` warn event naming actor, holder and both statuses;
    the holder's lease is untouched. A holder's write answers BUDGET_EXHAUSTED
    once a budget is spent, and may not change the task's budget (SPEC §19).
    """
    if changes.get("status") == TaskStatus.DELIVERED:
        # SPEC §21.1: only a finish (or an approved review) delivers: it records the branch and head to land.
        raise InvalidStatusTransition(
            f"{task.key} cannot be set to delivered: finish its attempt `done` (or approve its review) to deliver it.",
            details={"from": task.status, "to": TaskStatus.DELIVERED, "allowed": []},
        )
    now = clock.now()
    if proof is not None:
        held = held_attempt(proof, now=now, lock_task=True)
        if isinstance(held, LedgerError):
            return held
        if held.task_id != task.pk:
            raise LeaseNotHeld(f"Attempt {held.pk} does not hold {task.key}.", details={"attempt": held.pk})
        lifted = sorted(set(changes) & BUDGET_FIELDS)
        if lifted:
            raise PermissionDenied(
                f"A holder cannot change the budget of the task it holds ({', '.join(lifted)}).",
                details={"fields": {name: ["not by the holder"] for name in lifted}},
            )
        refusal = budget_refusal(held, None, now=now, actor=actor)
        if refusal is not None:
            return refusal
        expires = extend_lease(held, now=now, seconds=held.lease_seconds, renewal=False)
        updated, changed = apply_task_update(
            locked=held.task, actor=actor, changes=changes, expected_version=expected_version, now=now
        )
        return TaskUpdated(task=updated, changed=changed, lease_expires_at=expires)

    locked = lock_task(task.pk)
    old_status = locked.status
    live = (
        Attempt.objects.filter(task=task, status=AttemptStatus.ACTIVE, lease_expires_at__gt=now)
        .select_related("agent")
        .first()
    )
    updated, changed = apply_task_update(
        locked=locked, actor=actor, changes=changes, expected_version=expected_version, now=now
    )
    if live is not None and "status" in changed and actor.agent != live.agent:
        event_append(
            type=EventType.TASK_CONTESTED,
            severity="warn",
            actor=actor,
            at=now,
            task=updated,
            attempt_id=live.pk,
            payload={
                "actor": actor.label,
                "holder": live.agent.handle,
                "from": old_status,
                "to": updated.status,
                "lease_expires_at": live.lease_expires_at.isoformat(),
            },
        )
    return TaskUpdated(task=updated, changed=changed, lease_expires_at=None)
