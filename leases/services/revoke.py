"""Admin powers over leases: force-release and reassign (SPEC §3, §10).

Both revoke the active attempt (`revoked`, with who and why) and bump nothing
else; the revoked holder's next write fails with `LEASE_NOT_HELD`. Reassign
also reserves the task for the chosen agent. The ledger may revoke a lease;
it never deletes the holder's branch, worktree or environment.

Reassign is for a task that may still be claimed as work: open, ready or
blocked. Any other status is refused with `INVALID_STATUS_TRANSITION` before
anything is written, the live lease included. That covers a task in `review`
whose review attempt is held: a reservation governs work claims only (review
claims never read it), so reserving a task under review would promise the
review to an agent nobody hands it to, and then hand the next work claim to
that reviewer after `changes_requested`. To take a review from a stuck
reviewer, force-release it (no agent): the request stays pending and any
reviewer may claim it (not the author, unless the project allows
self-review); or decide it on the Reviews page.
"""

from __future__ import annotations

from dataclasses import dataclass

from core.db import write_transaction
from core.errors import InvalidStatusTransition, ValidationFailed
from leases.models import Attempt, AttemptStatus
from leases.services.allocations import mark_allocations_stale
from leases.services.ending import end_attempt, task_claimable_again
from leases.services.expiry import expire_lapsed
from ledger import clock
from ledger.actors import Actor
from ledger.models import Agent, EventType, Severity, Task, TaskStatus
from ledger.services import apply_task_update, event_append, lock_task

REASON_MAX_CHARS = 2000
# A reservation means "this agent claims it next": only a task that may still be claimed is reassigned.
REASSIGNABLE_STATUSES = frozenset({TaskStatus.OPEN, TaskStatus.READY, TaskStatus.BLOCKED})


@dataclass(frozen=True)
class Revocation:
    task: Task
    revoked: Attempt | None


def _clean_reason(reason: str) -> str:
    reason = (reason or "").strip()
    if not reason:
        raise ValidationFailed("A reason is required to revoke a lease.", details={"fields": {"reason": ["required"]}})
    if len(reason) > REASON_MAX_CHARS:
        raise ValidationFailed(f"The reason is at most {REASON_MAX_CHARS} characters.")
    return reason


@write_transaction
def task_force_release(*, task: Task, actor: Actor, reason: str, reserve_for: Agent | None = None) -> Revocation:
    """Revoke the task's active attempt, if any; with `reserve_for`, this is a reassign.

    A lapsed active attempt is expired rather than revoked: its lease had
    already ended on its own. A reassign of a task that is not open, ready or
    blocked (a task in review, even with its review lease held) is refused with
    `INVALID_STATUS_TRANSITION` and writes nothing; a force-release (no
    `reserve_for`) revokes whatever the task's status.
    """
    reason = _clean_reason(reason)
    now = clock.now()
    if reserve_for is not None:
        # The agent's row first (as deactivation and membership changes lock it before the
        # tasks they clear): neither can slip between this check and the reservation.
        _refuse_unless_can_claim(reserve_for, task)
    locked = lock_task(task.pk)
    if reserve_for is not None:
        _refuse_unless_reassignable(locked)
    active = (
        Attempt.objects.select_for_update(no_key=True, of=("self",))
        .select_related("agent")
        .filter(task=locked, status=AttemptStatus.ACTIVE)
        .first()
    )
    revoked = None
    if active is not None and active.lease_expires_at <= now:
        expire_lapsed([active.pk], now=now)
        # Expiry moved it (and may have quarantined the task, SPEC §16.4); a reassign saves the row.
        locked.refresh_from_db(fields=["ready_since", "status", "blocked_reason", "version", "updated_at"])
    elif active is not None:
        end_attempt(active, now=now, status=AttemptStatus.REVOKED, revoked_by=actor.label, revoke_reason=reason)
        mark_allocations_stale([active.pk])
        locked = task_claimable_again(locked, now=now)
        revoked = active
        event_append(
            type=EventType.ATTEMPT_REVOKED,
            severity=Severity.WARN,
            actor=actor,
            at=now,
            task=locked,
            attempt_id=active.pk,
            payload={"holder": active.agent.handle, "epoch": active.epoch, "reason": reason[:500]},
        )
    if reserve_for is not None:
        previous = locked.reserved_for.handle if locked.reserved_for else None
        locked, _ = apply_task_update(locked=locked, actor=actor, changes={"reserved_for": reserve_for}, now=now)
        event_append(
            type=EventType.TASK_REASSIGNED,
            severity=Severity.WARN,
            actor=actor,
            at=now,
            task=locked,
            attempt_id=revoked.pk if revoked else None,
            payload={
                "to": reserve_for.handle,
                "previous_reservation": previous,
                "revoked_holder": revoked.agent.handle if revoked else None,
                "reason": reason[:500],
            },
        )
    return Revocation(task=locked, revoked=revoked)


def _refuse_unless_reassignable(task: Task) -> None:
    """Only a task that may still be claimed as work is reserved (the module's docstring says why)."""
    if task.status in REASSIGNABLE_STATUSES:
        return
    message = f"{task.key} is {task.status}: only an open, ready or blocked task is reassigned."
    if task.status == TaskStatus.REVIEW:
        message += (
            " A reservation does not choose a reviewer: force-release the review lease (no agent) to put"
            " the review back in the queue, or decide it on the Reviews page."
        )
    raise InvalidStatusTransition(
        message, details={"task": task.key, "status": task.status, "allowed": sorted(REASSIGNABLE_STATUSES)}
    )


def _refuse_unless_can_claim(agent: Agent, task: Task) -> None:
    """A reservation for an agent that cannot claim the task would leave it waiting for nobody."""
    fresh = Agent.objects.select_for_update(no_key=True).filter(pk=agent.pk).values("is_active").first()
    if fresh is None or not fresh["is_active"]:
        raise ValidationFailed(
            f"{agent.handle} is deactivated: it can never claim {task.key}.",
            details={"fields": {"agent": ["inactive"]}},
        )
    if not Agent.objects.filter(pk=agent.pk, projects=task.project_id).exists():
        raise ValidationFailed(
            f"{agent.handle} cannot see the project of {task.key}: it could never claim it.",
            details={"fields": {"agent": ["not a member of the task's project"]}},
        )


def task_reassign(*, task: Task, agent: Agent, actor: Actor, reason: str) -> Revocation:
    """Revoke the active attempt and reserve the task for `agent`, who alone may claim it next."""
    return task_force_release(task=task, actor=actor, reason=reason, reserve_for=agent)
