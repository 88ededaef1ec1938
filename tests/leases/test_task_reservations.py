"""Reservations an agent can never claim do not exist (issue 15, bug 1).

Reassign refuses an agent that is inactive or cannot see the task's project;
deactivating an agent, or taking a project from it, clears its reservations
in the same transaction with a `task.reservation_cleared` event; a
reservation can be cleared by hand; the admin's claimability ("can somebody
claim this?") counts a reserved task only while its agent could claim it.
"""

from __future__ import annotations

import pytest

from core.errors import InvalidStatusTransition, TaskNotClaimable, ValidationFailed
from leases.selectors import CLAIMABLE_COUNTED, claimable_count_by_anyone, claimable_tasks, with_claimability
from leases.services import (
    HolderProof,
    agent_set_projects,
    attempt_finish,
    attempt_release,
    attempt_renew,
    lease_claim,
    task_cancel,
    task_reassign,
    task_update,
)
from ledger import clock
from ledger.actors import SYSTEM
from ledger.models import Event, EventType, Task, TaskDependency
from ledger.services import agent_deactivate, dependency_add, task_reservation_clear
from tests.factories import AgentFactory, ProjectFactory, TaskFactory

pytestmark = pytest.mark.django_db

REASON = "the first holder crashed"


@pytest.fixture
def web(clock):
    return ProjectFactory(slug="web")


def proof_of(grant) -> HolderProof:
    return HolderProof(
        attempt_id=grant.attempt.pk, token=grant.token, epoch=grant.attempt.epoch, agent=grant.attempt.agent
    )


def test_reassign_refuses_an_agent_that_cannot_see_the_project(web):
    task = TaskFactory(project=web)
    outsider = AgentFactory(handle="outsider", projects=[ProjectFactory(slug="api")])
    with pytest.raises(ValidationFailed) as refused:
        task_reassign(task=task, agent=outsider, actor=SYSTEM, reason=REASON)
    assert "cannot see the project" in refused.value.message
    assert refused.value.details["fields"] == {"agent": ["not a member of the task's project"]}
    task.refresh_from_db()
    assert task.reserved_for_id is None
    assert not Event.objects.filter(type=EventType.TASK_REASSIGNED).exists()


def test_reassign_refuses_an_inactive_agent_and_revokes_nothing(web):
    task = TaskFactory(project=web)
    holder = AgentFactory(handle="holder", projects=[web])
    grant = lease_claim(task=task, agent=holder)
    gone = AgentFactory(handle="gone", projects=[web])
    agent_deactivate(agent=gone, actor=SYSTEM)
    with pytest.raises(ValidationFailed, match="deactivated"):
        task_reassign(task=task, agent=gone, actor=SYSTEM, reason=REASON)
    grant.attempt.refresh_from_db()
    assert grant.attempt.status == "active"


def test_deactivating_the_reserved_agent_clears_its_reservations_with_an_event(web):
    agent = AgentFactory(handle="reserved", projects=[web])
    first, second = TaskFactory(project=web), TaskFactory(project=web)
    other = TaskFactory(project=web)
    for task in (first, second):
        task_reassign(task=task, agent=agent, actor=SYSTEM, reason=REASON)
    task_reassign(task=other, agent=AgentFactory(handle="keeps", projects=[web]), actor=SYSTEM, reason=REASON)

    agent_deactivate(agent=agent, actor=SYSTEM)

    assert list(Task.objects.filter(reserved_for=agent)) == []
    assert Task.objects.get(pk=other.pk).reserved_for.handle == "keeps"
    cleared = Event.objects.filter(type=EventType.TASK_RESERVATION_CLEARED).order_by("id")
    assert [event.task_id for event in cleared] == [first.pk, second.pk]
    assert cleared[0].payload["agent"] == "reserved"
    assert cleared[0].payload["reason"] == "reserved was deactivated"
    # A reservation is one of the task's own fields: versioned like any change.
    assert Task.objects.get(pk=first.pk).version == first.version + 2  # reserve, then clear


def test_losing_the_project_clears_the_reservations_there_only(web):
    api = ProjectFactory(slug="api")
    agent = AgentFactory(handle="reserved", projects=[web, api])
    here, there = TaskFactory(project=web), TaskFactory(project=api)
    for task in (here, there):
        task_reassign(task=task, agent=agent, actor=SYSTEM, reason=REASON)

    agent_set_projects(agent=agent, projects=[api], actor=SYSTEM)

    assert Task.objects.get(pk=here.pk).reserved_for_id is None
    assert Task.objects.get(pk=there.pk).reserved_for_id == agent.pk
    event = Event.objects.get(type=EventType.TASK_RESERVATION_CLEARED)
    assert event.task_id == here.pk
    assert event.payload["reason"] == "reserved lost access to project web"


def test_a_reservation_is_cleared_by_hand_and_any_agent_may_claim_again(web):
    task = TaskFactory(project=web)
    reserved = AgentFactory(handle="reserved", projects=[web])
    anyone = AgentFactory(handle="anyone", projects=[web])
    task_reassign(task=task, agent=reserved, actor=SYSTEM, reason=REASON)
    with pytest.raises(TaskNotClaimable):
        lease_claim(task=task, agent=anyone)

    cleared = task_reservation_clear(task=task, actor=SYSTEM, reason="planning changed")

    assert cleared.reserved_for_id is None
    assert Event.objects.get(type=EventType.TASK_RESERVATION_CLEARED).payload["reason"] == "planning changed"
    assert lease_claim(task=task, agent=anyone).attempt.agent == anyone
    # Clearing a task that has no reservation changes nothing.
    version = Task.objects.get(pk=task.pk).version
    task_reservation_clear(task=task, actor=SYSTEM)
    assert Task.objects.get(pk=task.pk).version == version
    assert Event.objects.filter(type=EventType.TASK_RESERVATION_CLEARED).count() == 1


def test_claimable_by_anyone_leaves_out_blocked_held_and_unclaimable_reservations(web):
    agent = AgentFactory(handle="member", projects=[web])
    TaskFactory(project=web, title="free")
    blocked = TaskFactory(project=web, title="blocked")
    for _number in range(2):
        dependency_add(task=blocked, blocked_by=TaskFactory(project=web, status="open"), actor=SYSTEM)
    held = TaskFactory(project=web, title="held")
    lease_claim(task=held, agent=agent)
    reserved_ok = TaskFactory(project=web, title="reserved, claimable")
    task_reassign(task=reserved_ok, agent=agent, actor=SYSTEM, reason=REASON)
    # A reservation made before the rule existed (the trap of bug 1): nobody can claim this one.
    stranded = TaskFactory(project=web, title="stranded")
    outsider = AgentFactory(handle="outsider")
    Task.objects.filter(pk=stranded.pk).update(reserved_for=outsider)

    now = clock.now()
    claimable = set(claimable_tasks(project=None, now=now, by_anyone=True).values_list("title", flat=True))
    assert claimable == {"free", "reserved, claimable"}
    rows = {task.title: task for task in with_claimability(Task.objects.filter(project=web), now=now)}
    assert rows["blocked"].claimable is False
    assert rows["blocked"].blocked_by_count == 2
    assert rows["stranded"].claimable is False
    assert rows["free"].claimable is True
    assert TaskDependency.objects.filter(task=blocked).count() == 2


def test_the_holder_of_a_cancelled_task_is_told_at_renewal_and_can_release(web):
    holder = AgentFactory(handle="holder", projects=[web])
    task = TaskFactory(project=web)
    grant = lease_claim(task=task, agent=holder)
    assert attempt_renew(proof=proof_of(grant)).task.status == "ready"

    task_cancel(task=task, actor=SYSTEM, release=False)

    renewed = attempt_renew(proof=proof_of(grant))
    assert renewed.task.status == "cancelled"
    with pytest.raises(InvalidStatusTransition) as refused:
        attempt_finish(proof=proof_of(grant), outcome="done", acknowledged_version=Task.objects.get(pk=task.pk).version)
    assert "was cancelled while you held it" in refused.value.message
    assert refused.value.details["outcomes"] == ["failed", "handoff"]
    released = attempt_release(proof=proof_of(grant), reason="the task was cancelled")
    assert released.attempt.status == "released"
    assert Task.objects.get(pk=task.pk).status == "cancelled"


def test_cancel_with_release_revokes_the_lease_in_the_same_transaction(web):
    holder = AgentFactory(handle="holder", projects=[web])
    task = TaskFactory(project=web)
    grant = lease_claim(task=task, agent=holder)

    result = task_cancel(task=task, actor=SYSTEM, release=True, reason="no longer needed")

    assert result.revocation is not None
    assert result.revocation.revoked.pk == grant.attempt.pk
    grant.attempt.refresh_from_db()
    assert grant.attempt.status == "revoked"
    assert Task.objects.get(pk=task.pk).status == "cancelled"
    # Revoked first, so the cancel itself was not contested.
    assert not Event.objects.filter(type=EventType.TASK_CONTESTED).exists()


def test_cancel_of_a_done_task_is_refused_before_anything_is_revoked(web):
    holder = AgentFactory(handle="holder", projects=[web])
    task = TaskFactory(project=web)
    task_update(task=task, actor=SYSTEM, changes={"status": "done"})
    task_update(task=task, actor=SYSTEM, changes={"status": "ready"})
    grant = lease_claim(task=task, agent=holder)
    task_update(task=task, actor=SYSTEM, changes={"status": "done"})  # contested: done under the lease
    with pytest.raises(InvalidStatusTransition):
        task_cancel(task=task, actor=SYSTEM, release=True, reason="x")
    grant.attempt.refresh_from_db()
    assert grant.attempt.status == "active"


def test_the_compiled_count_agrees_with_the_queryset_up_to_its_bound(web):
    """`claimable_count_by_anyone` (the claim wait's pass-on read, compiled once) counts what the queryset
    holds, up to CLAIMABLE_COUNTED."""
    agent = AgentFactory(handle="member", projects=[web])
    now = clock.now()
    assert claimable_count_by_anyone(web, now=now) == 0
    stranded = TaskFactory(project=web, title="stranded")
    Task.objects.filter(pk=stranded.pk).update(reserved_for=AgentFactory(handle="outsider"))
    assert claimable_count_by_anyone(web, now=now) == 0  # reserved for someone who cannot see the project
    held = TaskFactory(project=web, title="held")
    grant = lease_claim(task=held, agent=agent)
    assert claimable_count_by_anyone(web, now=clock.now()) == 0
    attempt_release(proof=proof_of(grant))
    assert claimable_count_by_anyone(web, now=clock.now()) == 1
    TaskFactory.create_batch(2, project=web)
    assert claimable_count_by_anyone(web, now=clock.now()) == 3
    TaskFactory.create_batch(CLAIMABLE_COUNTED, project=web)
    assert claimable_count_by_anyone(web, now=clock.now()) == CLAIMABLE_COUNTED
    assert claimable_tasks(project=web, now=clock.now(), by_anyone=True).count() == CLAIMABLE_COUNTED + 3
