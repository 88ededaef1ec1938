"""A landing's release racing its lease's expiry and another lander's claim (SPEC §1, §21.2): real threads.

Each round a lander holds a landing; then, at once, it releases it, another lander claims the target,
and the sweep expires lapsed landings. Half the rounds run with the lease still live, half at the
moment it lapses (the fake clock, never a sleep). Whatever the order: one holder of the target at a
time (a claim succeeds only once the landing ended, under the next epoch), the landing ends exactly
one way (released, or expired with its failed landing counted, never both), and the old holder's
proof never touches the landing that follows.
"""

from __future__ import annotations

import time
from typing import Any

import pytest

from core.errors import LeaseExpired, LedgerError, StorageBusy
from landing.models import Landing, LandingStatus
from landing.services import (
    LandingGrant,
    LandingProof,
    LandingSettings,
    Released,
    expire_lapsed_landings,
    landing_claim_next,
    landing_release,
    project_set_landing,
)
from leases.models import Attempt, AttemptStatus
from ledger.actors import SYSTEM
from ledger.models import Event, EventType, Project, Task, TaskStatus
from tests.concurrency import run_in_threads
from tests.factories import AgentFactory, ProjectFactory, TaskFactory

pytestmark = pytest.mark.django_db(transaction=True)

ROUNDS = 12
LEASE = 60


def _busy_retried(call: Any) -> Any:
    """As the toolkit does: a call the storage was too busy for is sent again (SQLite's one writer)."""
    deadline = time.monotonic() + 60
    while True:
        try:
            return call()
        except StorageBusy:
            if time.monotonic() > deadline:
                raise


def _proof(grant: LandingGrant) -> LandingProof:
    return LandingProof(
        landing_id=grant.landing.pk, token=grant.token, epoch=grant.landing.epoch, agent=grant.landing.agent
    )


def test_a_release_racing_the_expiry_and_another_landers_claim_keeps_one_holder_and_the_fence(clock):
    project = ProjectFactory(slug="relrace", repository="/srv/relrace")
    project_set_landing(
        project=project, settings=LandingSettings(target_branch="main", max_failed_landings=0), actor=SYSTEM
    )
    first, second = AgentFactory(projects=[project]), AgentFactory(projects=[project])
    task = TaskFactory(project=project)
    Task.objects.filter(pk=task.pk).update(
        status=TaskStatus.DELIVERED, delivered_branch="feat/x", delivered_commit="c" * 40, delivered_at=clock.now()
    )
    outcomes: set[tuple[bool, str]] = set()
    for number in range(ROUNDS):
        at_expiry = number % 2 == 1
        held = landing_claim_next(project=Project.objects.get(pk=project.pk), agent=first, lease_seconds=LEASE)
        assert held is not None
        failed_before = Task.objects.get(pk=task.pk).failed_landings
        clock.advance(LEASE if at_expiry else LEASE // 2)

        def racer(index: int, held: LandingGrant = held) -> Any:
            if index == 0:
                try:
                    return _busy_retried(lambda: landing_release(proof=_proof(held), reason="told to stop"))
                except LedgerError as refused:
                    return refused
            if index == 1:
                return _busy_retried(
                    lambda: landing_claim_next(
                        project=Project.objects.get(pk=project.pk), agent=second, lease_seconds=LEASE
                    )
                )
            return _busy_retried(expire_lapsed_landings)

        released, claimed, _ = run_in_threads(3, racer)

        assert not isinstance(claimed, BaseException), claimed
        landing = Landing.objects.get(pk=held.landing.pk)
        attempt_ids = list(landing.tasks.values_list("attempt_id", flat=True))
        released_events = Event.objects.filter(type=EventType.ATTEMPT_RELEASED, attempt_id__in=attempt_ids).count()
        expired_events = Event.objects.filter(type=EventType.LANDING_EXPIRED, attempt_id__in=attempt_ids).count()
        failed_after = Task.objects.get(pk=task.pk).failed_landings
        if at_expiry:
            # A lapsed lease authorizes a re-claim, never a release: the landing expired, and that counts.
            assert isinstance(released, LeaseExpired), released
            assert landing.status == LandingStatus.EXPIRED
            assert (released_events, expired_events, failed_after) == (0, 1, failed_before + 1)
            assert isinstance(claimed, LandingGrant)  # the other lander takes the target, whoever expired it
        else:
            assert isinstance(released, Released), released
            assert released.released_now
            assert landing.status == LandingStatus.RELEASED
            assert (released_events, expired_events, failed_after) == (1, 0, failed_before)
            assert Attempt.objects.get(pk=attempt_ids[0]).status == AttemptStatus.RELEASED
        outcomes.add((at_expiry, "claimed" if claimed is not None else "busy"))
        live = list(Landing.objects.filter(project=project, status=LandingStatus.ACTIVE))
        if claimed is None:
            # It asked while the landing was held: the target was busy, and nothing was taken.
            assert live == []
            claimed = landing_claim_next(project=Project.objects.get(pk=project.pk), agent=second, lease_seconds=LEASE)
            assert claimed is not None  # released: free at once, without the clock moving
        assert [row.pk for row in live] in ([], [claimed.landing.pk])
        assert claimed.landing.epoch == held.landing.epoch + 1
        assert claimed.landing.claimed_at >= (landing.finished_at or claimed.landing.claimed_at)

        # The fence: the old holder's proof never reaches the landing that follows.
        stale = LandingProof(landing_id=claimed.landing.pk, token=held.token, epoch=held.landing.epoch, agent=second)
        with pytest.raises(LedgerError) as refused:
            landing_release(proof=stale)
        assert refused.value.code in ("INVALID_LEASE_TOKEN", "STALE_EPOCH")
        if at_expiry:
            with pytest.raises(LeaseExpired):
                landing_release(proof=_proof(held))
        else:
            assert not landing_release(proof=_proof(held)).released_now  # given back already: the same answer
        assert Landing.objects.get(pk=claimed.landing.pk).status == LandingStatus.ACTIVE

        # The next round starts from a free target.
        assert landing_release(proof=_proof(claimed)).released_now
        assert Task.objects.get(pk=task.pk).status == TaskStatus.DELIVERED
    # Both kinds of round ran; in live rounds the claim came before or after the release.
    assert {at_expiry for at_expiry, _ in outcomes} == {False, True}
