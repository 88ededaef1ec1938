"""Quarantine of tasks that keep failing (SPEC §16.4): in the transaction that ended the last attempt."""

from __future__ import annotations

import pytest
from django.contrib.auth import get_user_model

from core.errors import TaskNotClaimable, ValidationFailed
from leases.services import (
    attempt_finish,
    attempt_release,
    expiry,
    lease_claim,
    lease_claim_next,
    sweep_expired,
    task_force_release,
    task_release_quarantine,
)
from ledger.actors import Actor
from ledger.models import Event, EventType, Project, Task, TaskStatus
from tests.factories import AgentFactory, ProjectFactory, TaskFactory
from tests.leases.helpers import proof_of

pytestmark = pytest.mark.django_db


@pytest.fixture(params=["as_configured", "orm_batch"])
def sweep_path(request, monkeypatch):
    """As configured (one statement per batch on PostgreSQL, the ORM on SQLite) and with the ORM batch forced."""
    if request.param == "orm_batch":
        monkeypatch.setattr(expiry, "_sweeps_in_one_statement", lambda: False)
    return request.param


@pytest.fixture
def project():
    return ProjectFactory(slug="web")


@pytest.fixture
def agent(project):
    return AgentFactory(projects=[project])


def fail(task, agent):
    grant = lease_claim(task=task, agent=agent)
    return attempt_finish(proof=proof_of(grant), outcome="failed", failure_reason_code="tests_failed")


def quarantine_events(task):
    return Event.objects.filter(task=task, type=EventType.TASK_QUARANTINED)


def test_three_failures_in_a_row_quarantine_the_task_once(clock, project, agent):
    task = TaskFactory(project=project, priority=99)
    spare = TaskFactory(project=project)
    fail(task, agent)
    fail(task, agent)
    assert Task.objects.get(pk=task.pk).status == TaskStatus.READY
    third = fail(task, agent)
    assert third.task.status == TaskStatus.BLOCKED
    stored = Task.objects.get(pk=task.pk)
    assert stored.blocked_reason.startswith("quarantined: 3 attempts in a row failed or expired (last: attempt ")
    assert stored.blocked_reason.endswith("failed, tests_failed)")
    event = quarantine_events(task).get()
    assert (event.severity, event.attempt_id) == ("warn", third.attempt.pk)
    # Claim-next never hands it out; a named claim is refused.
    assert lease_claim_next(project=project, agent=agent).task.pk == spare.pk
    with pytest.raises(TaskNotClaimable):
        lease_claim(task=task, agent=agent)
    assert quarantine_events(task).count() == 1


def test_a_success_or_release_in_between_breaks_the_streak(clock, project, agent):
    task = TaskFactory(project=project)
    fail(task, agent)
    fail(task, agent)
    attempt_release(proof=proof_of(lease_claim(task=task, agent=agent)))
    fail(task, agent)
    fail(task, agent)
    assert Task.objects.get(pk=task.pk).status == TaskStatus.READY
    fail(task, agent)
    assert Task.objects.get(pk=task.pk).status == TaskStatus.BLOCKED


def test_zero_means_never_and_the_limit_is_the_projects(clock, agent):
    never = ProjectFactory(slug="never", max_consecutive_failures=0)
    twice = ProjectFactory(slug="twice", max_consecutive_failures=2)
    agent.projects.add(never, twice)
    lax, strict = TaskFactory(project=never), TaskFactory(project=twice)
    for _ in range(5):
        fail(lax, agent)
    assert Task.objects.get(pk=lax.pk).status == TaskStatus.READY
    fail(strict, agent)
    fail(strict, agent)
    assert Task.objects.get(pk=strict.pk).status == TaskStatus.BLOCKED


def test_release_from_quarantine_makes_it_claimable_with_a_fresh_streak(clock, project, agent):
    admin = Actor(user=get_user_model().objects.create(username="admin", is_staff=True))
    task = TaskFactory(project=project)
    for _ in range(3):
        fail(task, agent)
    with pytest.raises(ValidationFailed):
        task_release_quarantine(task=TaskFactory(project=project), actor=admin)
    released = task_release_quarantine(task=task, actor=admin)
    assert (released.status, released.blocked_reason) == (TaskStatus.READY, "")
    assert Event.objects.filter(task=task, type=EventType.TASK_QUARANTINE_RELEASED).count() == 1
    grant = lease_claim_next(project=project, agent=agent)
    assert grant.task.pk == task.pk
    # That claim and two more must fail before the task is quarantined again.
    attempt_finish(proof=proof_of(grant), outcome="failed", failure_reason_code="other")
    fail(task, agent)
    assert Task.objects.get(pk=task.pk).status == TaskStatus.READY
    fail(task, agent)
    assert Task.objects.get(pk=task.pk).status == TaskStatus.BLOCKED
    assert quarantine_events(task).count() == 2


def test_expiries_count_and_the_sweep_quarantines_in_its_batch(clock, project, agent, sweep_path):
    task = TaskFactory(project=project)
    other = TaskFactory(project=project)
    fail(task, agent)
    fail(task, agent)
    lease_claim(task=task, agent=agent)
    lease_claim(task=other, agent=agent)
    clock.advance(project.default_lease_seconds + 1)
    assert sweep_expired().expired == 2
    stored = Task.objects.get(pk=task.pk)
    assert stored.status == TaskStatus.BLOCKED
    assert "(last: attempt " in stored.blocked_reason
    assert stored.blocked_reason.endswith("expired)")
    assert quarantine_events(task).count() == 1
    assert Task.objects.get(pk=other.pk).status == TaskStatus.READY
    assert not quarantine_events(other).exists()


def test_a_claim_that_expires_the_last_of_a_streak_commits_the_quarantine(clock, project, agent):
    task = TaskFactory(project=project)
    fail(task, agent)
    fail(task, agent)
    lease_claim(task=task, agent=agent)
    clock.advance(project.default_lease_seconds + 1)
    with pytest.raises(TaskNotClaimable) as refused:
        lease_claim(task=task, agent=agent)
    assert refused.value.details["reason"] == "quarantined"
    assert Task.objects.get(pk=task.pk).status == TaskStatus.BLOCKED
    assert quarantine_events(task).count() == 1


def test_a_revocation_that_expires_the_last_of_a_streak_quarantines(clock, project, agent):
    task = TaskFactory(project=project)
    fail(task, agent)
    fail(task, agent)
    lease_claim(task=task, agent=agent)
    clock.advance(project.default_lease_seconds + 1)
    other = AgentFactory(projects=[project])
    task_force_release(task=task, actor=Actor(agent=agent), reason="stuck", reserve_for=other)
    stored = Task.objects.get(pk=task.pk)
    assert stored.status == TaskStatus.BLOCKED
    assert stored.reserved_for_id == other.pk
    assert Project.objects.get(pk=project.pk).max_consecutive_failures == 3
