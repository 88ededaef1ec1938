"""Handing an attempt off on its holder's behalf (SPEC §23.1): the server ends a live attempt as
`interrupted`, the way the holder's own `finish` with outcome `handoff` would, when the holder can no
longer say so itself: its runner restarted (`runner_restart`), or a person cancelled it from the
console (`user_request`).

Unlike a revocation, a hand-off leaves the work to be inherited: the next attempt continues the
branch (`leases.selectors.attempts.INHERITING_STATUSES`). The holder's next write answers
`LEASE_NOT_HELD`. Its environments are set aside (`stale`), as for expiry and revocation: nobody said
they are clean.
"""

from __future__ import annotations

from dataclasses import dataclass

from core.db import write_transaction
from core.errors import ValidationFailed
from leases.models import NOTE_MAX_CHARS, Attempt, AttemptKind, AttemptStatus, InterruptionReason, Note, NoteKind
from leases.services.allocations import mark_allocations_stale
from leases.services.ending import end_attempt, task_claimable_again
from leases.services.expiry import expire_lapsed
from ledger import clock
from ledger.actors import Actor
from ledger.models import EventType, Severity
from ledger.services import event_append, lock_task


@dataclass(frozen=True)
class HandedOff:
    attempt_id: int
    task_key: str
    # "interrupted" when this call handed it off; "expired" when its lease had already lapsed.
    status: str


@write_transaction
def attempt_hand_off(*, attempt: Attempt, actor: Actor, reason_code: str, note: str = "") -> HandedOff | None:
    """End the live work or review attempt as `interrupted` with `reason_code`, as its holder's handoff would.

    Keeps: one ending per attempt (the attempt row is locked after its task, as every holder call
    does, and only an active one changes: None when it had ended already); a lapsed lease expires
    instead (it ended on its own); the task is claimable again at once. `note`, when given, is left
    on the attempt as an important warning note, so the next attempt's context says why.
    A `land` attempt is the landing's (`landing.services.landing_hand_back`): refused here.
    """
    if reason_code not in InterruptionReason.values:
        raise ValidationFailed(f"reason_code must be one of {', '.join(InterruptionReason.values)}.")
    if attempt.kind == AttemptKind.LAND:
        raise ValidationFailed(
            f"Attempt {attempt.pk} is a landing's: hand its landing back instead.", details={"attempt": attempt.pk}
        )
    now = clock.now()
    task = lock_task(attempt.task_id)
    held = (
        Attempt.objects.select_for_update(no_key=True, of=("self",))
        .select_related("agent")
        .filter(pk=attempt.pk, status=AttemptStatus.ACTIVE)
        .first()
    )
    if held is None:
        return None
    if held.lease_expires_at <= now:
        expire_lapsed([held.pk], now=now)
        return HandedOff(attempt_id=held.pk, task_key=task.key, status=AttemptStatus.EXPIRED)
    if note:
        Note.objects.create(
            attempt=held, kind=NoteKind.WARNING, content=note[:NOTE_MAX_CHARS], important=True, created_at=now
        )
    end_attempt(held, now=now, status=AttemptStatus.INTERRUPTED, interruption_reason_code=reason_code)
    mark_allocations_stale([held.pk])
    task = task_claimable_again(task, now=now)
    event_append(
        type=EventType.ATTEMPT_FINISHED,
        severity=Severity.WARN,
        actor=actor,
        at=now,
        task=task,
        attempt_id=held.pk,
        payload={
            "outcome": "handoff",
            "status": AttemptStatus.INTERRUPTED,
            "failure_reason_code": None,
            "interruption_reason_code": reason_code,
            "holder": held.agent.handle,
            "handed_off_by": actor.label,
        },
    )
    return HandedOff(attempt_id=held.pk, task_key=task.key, status=AttemptStatus.INTERRUPTED)
