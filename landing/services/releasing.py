"""A lander gives its landing back (SPEC §21.2): `POST /landings/{id}/release/`.

A lander that will not see its landing through (told to stop: a grant that came as it stopped
waiting, or a second signal that abandons the landing before its push) releases it rather than
letting its lease lapse, so the target is free for the next lander at once instead of after a
whole landing lease. Fenced like every holder call of a landing (its token and epoch,
`held_landing`); idempotent: releasing a released landing again answers the same.

Nothing was pushed under it (a lander pushes only before it finishes, under a live lease; one that
releases has not pushed), so its tasks stay `delivered` in their place in the queue, untouched:
unlike an expiry, a release is not a failed landing of its tasks (no `landing` note, no count
towards quarantine), as a work attempt's release is not a failure. The landing ends `released`,
each pending task's `land` attempt ends `released` with `attempt.released` (the event every
release writes; it wakes the landers parked on the queue).
"""

from __future__ import annotations

from dataclasses import dataclass

from core.errors import LedgerError
from landing.models import Landing, LandingOutcome, LandingStatus, LandingTask
from landing.services.holding import LandingProof, held_landing
from leases.models import AttemptStatus
from leases.services.ending import end_attempt
from leases.services.holding import refusals_after_commit
from ledger import clock
from ledger.actors import Actor
from ledger.models import EventType
from ledger.services import event_append

REASON_MAX_CHARS = 500


@dataclass(frozen=True)
class Released:
    landing: Landing
    released_now: bool  # False: it was released already (a repeated call)


@refusals_after_commit
def landing_release(*, proof: LandingProof, reason: str = "") -> Released | LedgerError:
    """Give the landing back now: it ends `released`, its tasks stay delivered and queued."""
    now = clock.now()
    landing = held_landing(proof, now=now, ended_ok=frozenset({LandingStatus.RELEASED}))
    if isinstance(landing, LedgerError):
        return landing
    if landing.status == LandingStatus.RELEASED:
        return Released(landing=landing, released_now=False)
    Landing.objects.filter(pk=landing.pk).update(status=LandingStatus.RELEASED, finished_at=now)
    landing.status, landing.finished_at = LandingStatus.RELEASED, now
    entries = list(
        LandingTask.objects.filter(landing=landing, outcome=LandingOutcome.PENDING).select_related("task", "attempt")
    )
    LandingTask.objects.filter(pk__in=[entry.pk for entry in entries]).update(outcome=LandingOutcome.RELEASED)
    actor = Actor(agent=landing.agent)
    payload: dict[str, object] = {"landing": landing.pk, "target_branch": landing.target_branch}
    if reason:
        payload["reason"] = reason[:REASON_MAX_CHARS]
    for entry in entries:
        if entry.attempt.status == AttemptStatus.ACTIVE:
            end_attempt(entry.attempt, now=now, status=AttemptStatus.RELEASED)
        event_append(
            type=EventType.ATTEMPT_RELEASED,
            actor=actor,
            at=now,
            task=entry.task,
            attempt_id=entry.attempt_id,
            payload=payload,
        )
    return Released(landing=landing, released_now=True)
