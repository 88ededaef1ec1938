"""Landings whose lease lapsed (SPEC §21.2): the lander died or lost its lease mid-landing.

A lapsed landing never pushed (a lander pushes only under a live lease, with a compare-and-swap
on the target), so its tasks stay `delivered` and go back to the head of the queue: the next
lander retries them. The landing ends `expired`, its tasks' `land` attempts expire (the task's
stored status is untouched, as for any expiry), each task gets a `landing` note, and the expiry
counts as a failed landing of each task: `Project.max_failed_landings` in a row quarantine it, so
a check that kills every lander cannot hold the queue for ever.

Lazily, inside the next claim of the same target, and by the sweep job (`expire_lapsed_landings`).
"""

from __future__ import annotations

from datetime import datetime

from core.db import write_transaction
from landing.models import Landing, LandingOutcome, LandingStatus, LandingTask
from landing.services.returning import count_failed_landing
from leases.models import AttemptStatus
from leases.services import expire_lapsed
from leases.services.ending import end_attempt
from ledger import clock
from ledger.actors import SYSTEM, Actor
from ledger.models import EventType, Severity
from ledger.services import event_append

SWEEP_BATCH = 100


def expire_landing(landing: Landing, *, now: datetime) -> None:
    """End the (locked) lapsed landing `expired`; inside the caller's transaction."""
    Landing.objects.filter(pk=landing.pk).update(status=LandingStatus.EXPIRED, finished_at=landing.lease_expires_at)
    landing.status, landing.finished_at = LandingStatus.EXPIRED, landing.lease_expires_at
    entries = list(
        LandingTask.objects.filter(landing=landing, outcome=LandingOutcome.PENDING).select_related("task", "attempt")
    )
    LandingTask.objects.filter(pk__in=[entry.pk for entry in entries]).update(outcome=LandingOutcome.EXPIRED)
    expire_lapsed([entry.attempt_id for entry in entries if entry.attempt.status == AttemptStatus.ACTIVE], now=now)
    for entry in entries:
        event_append(
            type=EventType.LANDING_EXPIRED,
            severity=Severity.WARN,
            actor=SYSTEM,
            at=now,
            task=entry.task,
            attempt_id=entry.attempt_id,
            payload={
                "landing": landing.pk,
                "agent": landing.agent.handle,
                "lapsed_at": landing.lease_expires_at.isoformat(),
            },
        )
        count_failed_landing(
            entry,
            now=now,
            note=(
                f"Landing {landing.pk} of {entry.task.key} on {landing.target_branch} expired: its lander "
                f"({landing.agent.handle}) stopped renewing at {landing.lease_expires_at.isoformat()}. "
                "The target was not changed; the task stays delivered and is retried."
            ),
        )


@write_transaction
def landing_hand_back(*, landing: Landing, actor: Actor, reason_code: str, note: str) -> list[int]:
    """End the agent's live landing now, on its lander's behalf (SPEC §23.1: its runner restarted).

    As a lapsed landing (`expire_landing`): the target was not changed by it (a lander pushes only
    under a live lease, and this one no longer is), its tasks stay `delivered` at the head of the
    queue with a `landing` note, and it counts as a failed landing of each; but it ends now, not
    when its lease would have lapsed, and its `land` attempts end `interrupted` with `reason_code`.
    Returns the ids of the attempts it ended (none when the landing had ended already).
    """
    now = clock.now()
    locked = (
        Landing.objects.select_for_update(of=("self",))
        .select_related("agent")
        .filter(pk=landing.pk, status=LandingStatus.ACTIVE)
        .first()
    )
    if locked is None:
        return []
    if locked.lease_expires_at <= now:
        expire_landing(locked, now=now)
        return []
    Landing.objects.filter(pk=locked.pk).update(status=LandingStatus.EXPIRED, finished_at=now)
    entries = list(
        LandingTask.objects.filter(landing=locked, outcome=LandingOutcome.PENDING).select_related("task", "attempt")
    )
    LandingTask.objects.filter(pk__in=[entry.pk for entry in entries]).update(outcome=LandingOutcome.EXPIRED)
    ended: list[int] = []
    for entry in entries:
        if entry.attempt.status == AttemptStatus.ACTIVE:
            end_attempt(entry.attempt, now=now, status=AttemptStatus.INTERRUPTED, interruption_reason_code=reason_code)
            ended.append(entry.attempt_id)
        event_append(
            type=EventType.LANDING_EXPIRED,
            severity=Severity.WARN,
            actor=actor,
            at=now,
            task=entry.task,
            attempt_id=entry.attempt_id,
            payload={"landing": locked.pk, "agent": locked.agent.handle, "handed_back": reason_code},
        )
        count_failed_landing(entry, now=now, note=f"Landing {locked.pk} of {entry.task.key} ended: {note}")
    return ended


@write_transaction
def _expire_batch(now: datetime) -> int:
    lapsed = list(
        Landing.objects.select_for_update(skip_locked=True, of=("self",))
        .select_related("agent")
        .filter(status=LandingStatus.ACTIVE, lease_expires_at__lte=now)
        .order_by("lease_expires_at")[:SWEEP_BATCH]
    )
    for landing in lapsed:
        expire_landing(landing, now=now)
    return len(lapsed)


def expire_lapsed_landings() -> int:
    """The sweep: end every lapsed live landing; returns how many."""
    now = clock.now()
    total = 0
    while True:
        done = _expire_batch(now)
        total += done
        if done < SWEEP_BATCH:
            return total
