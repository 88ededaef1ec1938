"""Which allocation an admin may release by hand: one rule, `leases.selectors.releasable`, for service and admin."""

from __future__ import annotations

import pytest

from core.errors import ValidationFailed
from leases.models import Allocation, AllocationStatus, Attempt, AttemptStatus
from leases.selectors import releasable
from leases.services import allocation_release, lease_claim
from ledger import clock
from tests.factories import EnvironmentFactory, TaskFactory

pytestmark = pytest.mark.django_db


def the_allocation() -> Allocation:
    return Allocation.objects.select_related("attempt").get()


@pytest.fixture
def grant(project, agent):
    EnvironmentFactory(project=project, name="preview-b", kind="database")
    return lease_claim(task=TaskFactory(project=project), agent=agent, environment="preview-b")


def test_a_live_attempts_allocation_is_not_releasable_and_the_service_refuses_it(grant, user_actor):
    assert not releasable(the_allocation())
    with pytest.raises(ValidationFailed):
        allocation_release(allocation=the_allocation(), actor=user_actor)


def test_an_allocation_left_active_by_an_ended_attempt_is_releasable_and_released(grant, user_actor):
    Attempt.objects.filter(pk=grant.attempt.pk).update(status=AttemptStatus.EXPIRED, finished_at=clock.now())
    assert releasable(the_allocation())
    allocation_release(allocation=the_allocation(), actor=user_actor)
    assert the_allocation().status == AllocationStatus.RELEASED


def test_a_stale_allocation_is_releasable_and_a_released_one_is_not(grant, user_actor):
    Allocation.objects.update(status=AllocationStatus.STALE)
    assert releasable(the_allocation())
    allocation_release(allocation=the_allocation(), actor=user_actor)
    assert not releasable(the_allocation())
