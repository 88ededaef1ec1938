"""Cancel a slot's attempt from the console (SPEC §23.1): hand it off now, and have the runner stop its command.

The attempt is handed off at once (`user_request`, with a note saying who cancelled it from the
console), so its task is claimable again and the holder's next write answers `LEASE_NOT_HELD`; the
slot records `cancel_attempt_id`, and the runner's next heartbeat lists it under `cancel`, so the
runner sends the command SIGTERM without waiting for its lease keeper to find the lease lost.
"""

from __future__ import annotations

from core.db import write_transaction
from core.errors import ValidationFailed
from landing.models import Landing, LandingStatus
from landing.services import landing_hand_back
from leases.models import Attempt, AttemptKind, AttemptStatus, InterruptionReason
from leases.services import attempt_hand_off
from ledger import clock
from ledger.actors import Actor
from ledger.models import EventType, Severity
from ledger.services import event_append
from runners.models import RunnerSlot
from runners.services.pausing import lock_runner

NOTE_MAX_CHARS = 500


@write_transaction
def slot_cancel_attempt(*, slot: RunnerSlot, actor: Actor, attempt_id: int | None = None, note: str = "") -> int:
    """Hand off the slot agent's live attempt (`user_request`) and ask its runner to stop the command;
    returns the attempt's id. One `runner.attempt_cancelled` event.

    `attempt_id`, when given, is the attempt the console showed: a slot that moved on to another
    attempt since is refused (VALIDATION_ERROR), never the wrong attempt cancelled. A slot with no
    live attempt is refused too.
    """
    note = (note or "").strip()[:NOTE_MAX_CHARS]
    now = clock.now()
    runner = lock_runner(slot.runner)
    live = (
        Attempt.objects.filter(agent_id=slot.agent_id, status=AttemptStatus.ACTIVE, lease_expires_at__gt=now)
        .select_related("task")
        .order_by("-pk")
        .first()
    )
    if live is None or (attempt_id is not None and live.pk != attempt_id):
        raise ValidationFailed(
            f"Slot {slot.number} of {runner.name} holds no live attempt"
            + (f" {attempt_id}" if attempt_id is not None else "")
            + ": nothing to cancel.",
            details={"slot": slot.number, "attempt": attempt_id, "reason": "no_live_attempt"},
        )
    text = f"Cancelled from the console by {actor.label} (slot {slot.number} of runner {runner.name})."
    if note:
        text += f" {note}"
    if live.kind == AttemptKind.LAND:
        landing = Landing.objects.get(tasks__attempt=live, status=LandingStatus.ACTIVE)
        landing_hand_back(landing=landing, actor=actor, reason_code=InterruptionReason.USER_REQUEST, note=text)
    else:
        attempt_hand_off(attempt=live, actor=actor, reason_code=InterruptionReason.USER_REQUEST, note=text)
    RunnerSlot.objects.filter(pk=slot.pk).update(cancel_attempt_id=live.pk)
    slot.refresh_from_db()
    event_append(
        type=EventType.RUNNER_ATTEMPT_CANCELLED,
        severity=Severity.WARN,
        actor=actor,
        at=now,
        task=live.task,
        attempt_id=live.pk,
        payload={"runner": runner.name, "slot": slot.number, "agent": slot.agent.handle, "note": note},
    )
    return live.pk
