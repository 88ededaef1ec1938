from __future__ import annotations

from leases.services import HolderProof, LeaseGrant


def proof_of(grant: LeaseGrant, *, token: str | None = None, epoch: int | None = None) -> HolderProof:
    return HolderProof(
        attempt_id=grant.attempt.pk,
        token=grant.token if token is None else token,
        epoch=grant.attempt.epoch if epoch is None else epoch,
        agent=grant.attempt.agent,
    )
