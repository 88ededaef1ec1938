"""A lander's holder calls (SPEC §21.2): the proof, and renewing the landing's lease.

A landing's lease is shared by its tasks' `land` attempts: renewing it extends them all, in the
transaction that locks the landing. The proof is the landing's token and epoch (the landing's
number on its target): a late call of a lander whose landing lapsed is refused, `LEASE_EXPIRED`
the first time (the expiry commits), and the target is never touched by it.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta

from core.errors import InvalidLeaseToken, LeaseExpired, LeaseNotHeld, LedgerError, NotFound, StaleEpoch
from landing.models import Landing, LandingStatus
from landing.services.lapsing import expire_landing
from leases.models import Attempt, AttemptStatus
from leases.selectors import clamp_lease_seconds
from leases.services.holding import refusals_after_commit
from leases.tokens import lease_token_matches
from ledger import clock
from ledger.models import Agent


@dataclass(frozen=True)
class LandingProof:
    landing_id: int
    token: str
    epoch: int
    agent: Agent


def held_landing(
    proof: LandingProof, *, now: datetime, ended_ok: frozenset[str] = frozenset()
) -> Landing | LeaseExpired:
    """The proof's landing, locked, while its lease is live; else a refusal (returned when it commits).

    A landing whose status is in `ended_ok` is returned as it is once the proof is checked (a repeated
    release answers what the first one did).
    """
    landing = (
        Landing.objects.select_for_update(of=("self",))
        .select_related("project", "agent")
        .filter(pk=proof.landing_id, agent=proof.agent)
        .first()
    )
    if landing is None:
        raise NotFound(f"No landing {proof.landing_id} of yours.", details={"landing": proof.landing_id})
    if not lease_token_matches(proof.token, landing.token_hash):
        raise InvalidLeaseToken(details={"landing": landing.pk})
    if proof.epoch != landing.epoch:
        raise StaleEpoch(
            f"Landing {landing.pk} has epoch {landing.epoch}, not {proof.epoch}.",
            details={"landing": landing.pk, "presented_epoch": proof.epoch, "current_epoch": landing.epoch},
        )
    if landing.status in ended_ok:
        return landing
    if landing.status == LandingStatus.EXPIRED:
        raise LeaseExpired(details={"landing": landing.pk, "status": landing.status})
    if landing.status != LandingStatus.ACTIVE:
        raise LeaseNotHeld(
            f"Landing {landing.pk} is {landing.status}.", details={"landing": landing.pk, "status": landing.status}
        )
    if landing.lease_expires_at <= now:
        expire_landing(landing, now=now)
        return LeaseExpired(
            f"The lease of landing {landing.pk} lapsed at {landing.lease_expires_at.isoformat()}: "
            "do not push; its tasks are retried.",
            details={"landing": landing.pk, "status": LandingStatus.EXPIRED},
        )
    return landing


@refusals_after_commit
def landing_renew(*, proof: LandingProof, lease_seconds: int | None = None) -> Landing | LedgerError:
    """Extend the landing's lease (and its attempts'), never shortening it."""
    now = clock.now()
    landing = held_landing(proof, now=now)
    if isinstance(landing, LedgerError):
        return landing
    seconds = clamp_lease_seconds(lease_seconds) if lease_seconds is not None else landing.lease_seconds
    expires = max(landing.lease_expires_at, now + timedelta(seconds=seconds))
    landing.renew_count += 1
    Landing.objects.filter(pk=landing.pk).update(
        lease_expires_at=expires, last_renewed_at=now, renew_count=landing.renew_count
    )
    Attempt.objects.filter(landing_entry__landing=landing, status=AttemptStatus.ACTIVE).update(
        lease_expires_at=expires, last_renewed_at=now
    )
    landing.lease_expires_at, landing.last_renewed_at = expires, now
    return landing
