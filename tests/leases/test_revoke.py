from __future__ import annotations

import pytest

from core.errors import InvalidStatusTransition, LeaseNotHeld, TaskNotClaimable, ValidationFailed
from leases.models import Attempt, AttemptKind, AttemptStatus, ReviewRequest, ReviewStatus
from leases.services import (
    Finished,
    Outcome,
    attempt_finish,
    attempt_renew,
    lease_claim,
    review_claim_next,
    task_force_release,
    task_reassign,
)
from ledger.models import Event, EventType, Task, TaskStatus
from tests.factories import AgentFactory, TaskFactory
from tests.leases.helpers import proof_of

pytestmark = pytest.mark.django_db


@pytest.fixture
def agents(project):
    return [AgentFactory(projects=[project]) for _ in range(3)]


def test_force_release_needs_a_reason(project, agents, user_actor):
    grant = lease_claim(task=TaskFactory(project=project), agent=agents[0])
    with pytest.raises(ValidationFailed):
        task_force_release(task=grant.task, actor=user_actor, reason="  ")
    assert Attempt.objects.get(pk=grant.attempt.pk).status == AttemptStatus.ACTIVE


def test_force_release_revokes_and_bumps_nothing_else(project, agents, user_actor):
    grant = lease_claim(task=TaskFactory(project=project), agent=agents[0])
    result = task_force_release(task=grant.task, actor=user_actor, reason="agent crashed")
    row = Attempt.objects.get(pk=grant.attempt.pk)
    assert (row.status, row.revoked_by, row.revoke_reason) == ("revoked", "user:root", "agent crashed")
    assert (result.task.epoch, result.task.version) == (1, 1)
    event = Event.objects.get(type=EventType.ATTEMPT_REVOKED)
    assert (event.severity, event.payload["holder"], event.actor_user_id) == (
        "warn",
        row.agent.handle,
        user_actor.user.pk,
    )
    with pytest.raises(LeaseNotHeld):
        attempt_renew(proof=proof_of(grant))
    assert lease_claim(task=grant.task, agent=agents[1]).attempt.epoch == 2


def test_reassign_reserves_the_task_for_the_chosen_agent(project, agents, user_actor):
    grant = lease_claim(task=TaskFactory(project=project), agent=agents[0])
    result = task_reassign(task=grant.task, agent=agents[2], actor=user_actor, reason="hand to agent 2")
    assert result.revoked is not None
    assert result.task.reserved_for_id == agents[2].pk
    assert result.task.version == 2  # a reservation is a change of the task's own fields
    with pytest.raises(TaskNotClaimable):
        lease_claim(task=result.task, agent=agents[1])
    assert lease_claim(task=result.task, agent=agents[2]).attempt.status == AttemptStatus.ACTIVE
    # The revoked holder is told it was revoked, though the task is at a newer epoch now.
    with pytest.raises(LeaseNotHeld) as caught:
        attempt_renew(proof=proof_of(grant))
    assert caught.value.details == {"attempt": grant.attempt.pk, "status": "revoked"}
    types = list(Event.objects.filter(task=grant.task).values_list("type", flat=True))
    assert types.count(EventType.TASK_REASSIGNED) == 1
    assert types.count(EventType.ATTEMPT_REVOKED) == 1


def test_force_release_of_a_lapsed_lease_expires_it_instead(clock, project, agents, user_actor):
    grant = lease_claim(task=TaskFactory(project=project), agent=agents[0], lease_seconds=30)
    clock.advance(30)
    result = task_force_release(task=grant.task, actor=user_actor, reason="cleanup")
    assert result.revoked is None
    assert Attempt.objects.get(pk=grant.attempt.pk).status == AttemptStatus.EXPIRED
    assert not Event.objects.filter(type=EventType.ATTEMPT_REVOKED).exists()


def test_reassigning_a_lapsed_lease_keeps_the_lapse_instant_as_ready_since(clock, project, agents, user_actor):
    # Found by the state machine: the reassign saved the task row it had read
    # before expiry and put back the ready_since of before the claim.
    task = TaskFactory(project=project)
    grant = lease_claim(task=task, agent=agents[0], lease_seconds=60)
    clock.advance(120)
    task_reassign(task=task, agent=agents[1], actor=user_actor, reason="stuck")
    assert type(task).objects.get(pk=task.pk).ready_since == grant.attempt.lease_expires_at


def _review_held_by(project, author, reviewer):
    """A task its author finished for review, whose review `reviewer` now holds."""
    work = lease_claim(task=TaskFactory(project=project), agent=author)
    finished = attempt_finish(proof=proof_of(work), outcome=Outcome.REVIEW, result_summary="please look")
    assert isinstance(finished, Finished)
    review = review_claim_next(project=project, agent=reviewer)
    assert review is not None
    assert review.grant.attempt.kind == AttemptKind.REVIEW
    return review


@pytest.mark.parametrize("to", [0, 2], ids=["to_the_author", "to_a_third_agent"])
def test_reassigning_a_task_whose_review_is_held_is_refused_and_writes_nothing(project, agents, user_actor, to):
    # Found by the state machine on PostgreSQL: review_next, then a reassign of the task under review.
    # Refused, not half done: the reviewer keeps its lease, the request stays in review, nobody is reserved.
    review = _review_held_by(project, agents[0], agents[1])
    task = review.grant.task
    before = (
        Task.objects.values("status", "version", "reserved_for_id", "epoch").get(pk=task.pk),
        Event.objects.count(),
    )
    with pytest.raises(InvalidStatusTransition) as caught:
        task_reassign(task=task, agent=agents[to], actor=user_actor, reason="agent is stuck")
    assert caught.value.code == "INVALID_STATUS_TRANSITION"
    assert caught.value.details["status"] == TaskStatus.REVIEW
    assert "force-release the review lease" in caught.value.message
    after = (
        Task.objects.values("status", "version", "reserved_for_id", "epoch").get(pk=task.pk),
        Event.objects.count(),
    )
    assert after == before
    assert Attempt.objects.get(pk=review.grant.attempt.pk).status == AttemptStatus.ACTIVE
    assert ReviewRequest.objects.get(pk=review.request.pk).status == ReviewStatus.IN_REVIEW
    attempt_renew(proof=proof_of(review.grant))  # the reviewer still holds it


def test_force_releasing_a_held_review_puts_it_back_for_another_reviewer(project, agents, user_actor):
    # The way the refusal points to: the review goes back to the queue, for anyone but its author.
    review = _review_held_by(project, agents[0], agents[1])
    result = task_force_release(task=review.grant.task, actor=user_actor, reason="agent is stuck")
    assert result.revoked is not None
    assert result.revoked.pk == review.grant.attempt.pk
    assert result.task.status == TaskStatus.REVIEW
    assert result.task.reserved_for_id is None
    with pytest.raises(LeaseNotHeld):
        attempt_renew(proof=proof_of(review.grant))
    assert review_claim_next(project=project, agent=agents[0]) is None  # the author does not review its own work
    again = review_claim_next(project=project, agent=agents[2])
    assert again is not None
    assert (again.request.pk, again.grant.attempt.epoch) == (review.request.pk, review.grant.attempt.epoch + 1)
