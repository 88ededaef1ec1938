from __future__ import annotations

import pytest

from core.errors import EnvironmentUnavailable, NotFound, ValidationFailed
from environments.services import environment_create, environment_set_status
from leases.models import Allocation, AllocationStatus
from leases.services import (
    allocation_release,
    attempt_finish,
    attempt_release,
    lease_claim,
    sweep_expired,
    task_force_release,
)
from ledger.actors import SYSTEM
from ledger.models import Event, EventType, Task
from tests.concurrency import run_in_threads
from tests.factories import AgentFactory, EnvironmentFactory, ProjectFactory, TaskFactory
from tests.leases.helpers import proof_of


@pytest.mark.django_db
def test_a_named_environment_is_allocated_and_named_in_the_label(project, agent):
    EnvironmentFactory(
        project=project,
        name="preview-b",
        isolation="container",
        resources={"database_url": "postgres://app@db/preview_b"},
    )
    grant = lease_claim(task=TaskFactory(project=project, title="Search copy"), agent=agent, environment="preview-b")
    assert grant.allocation is not None
    assert grant.allocation.status == AllocationStatus.ACTIVE
    assert grant.attempt.label == "owner=agent-07;branch=claude/web-1-search-copy;env=preview-b;task=WEB-1;epoch=1"
    assert Event.objects.filter(type=EventType.ENVIRONMENT_ALLOCATED, attempt_id=grant.attempt.pk).count() == 1


@pytest.mark.django_db
def test_a_taken_environment_is_unavailable_and_the_claim_leaves_nothing(project, agent):
    EnvironmentFactory(project=project, name="preview-b", isolation="container")
    lease_claim(task=TaskFactory(project=project), agent=agent, environment="preview-b")
    second = TaskFactory(project=project)
    with pytest.raises(EnvironmentUnavailable) as caught:
        lease_claim(task=second, agent=agent, environment="preview-b")
    assert caught.value.details["reason"] == "taken"
    second.refresh_from_db()
    assert (second.epoch, second.attempts.count()) == (0, 0)  # the whole claim rolled back


@pytest.mark.django_db
def test_unknown_environment_is_not_found(project, agent):
    with pytest.raises(NotFound):
        lease_claim(task=TaskFactory(project=project), agent=agent, environment="nope")


@pytest.mark.django_db
def test_an_environment_below_the_required_isolation_is_never_allocated(project, agent):
    type(project).objects.filter(pk=project.pk).update(required_isolation="microvm")
    EnvironmentFactory(project=project, name="shared-dir", kind="sandbox", isolation="directory")
    task = Task.objects.select_related("project").get(pk=TaskFactory(project=project).pk)
    with pytest.raises(EnvironmentUnavailable) as caught:
        lease_claim(task=task, agent=agent, environment="shared-dir")
    assert caught.value.details["reason"] == "insufficient_isolation"
    with pytest.raises(EnvironmentUnavailable):
        lease_claim(task=task, agent=agent, environment_kind="sandbox")
    EnvironmentFactory(project=project, name="vm-1", kind="sandbox", isolation="dedicated_host")
    assert lease_claim(task=task, agent=agent, environment_kind="sandbox").allocation.environment.name == "vm-1"


@pytest.mark.django_db
def test_quarantined_environments_are_not_allocated(project, agent):
    env = EnvironmentFactory(project=project, name="preview-b", isolation="container")
    environment_set_status(environment=env, status="quarantined", actor=SYSTEM, reason="suspicious data")
    with pytest.raises(EnvironmentUnavailable):
        lease_claim(task=TaskFactory(project=project), agent=agent, environment="preview-b")
    retired = environment_set_status(environment=env, status="retired", actor=SYSTEM)  # needs no reason
    assert retired.status == "retired"
    with pytest.raises(ValidationFailed):
        environment_set_status(environment=env, status="quarantined", actor=SYSTEM)  # needs one


@pytest.mark.django_db
def test_passwords_never_enter_the_catalog(project):
    with pytest.raises(ValidationFailed):
        environment_create(
            project=project,
            name="leaky",
            kind="database",
            isolation="container",
            resources={"database_url": "postgres://app:hunter2@db/x"},
            actor=SYSTEM,
        )


@pytest.mark.django_db
@pytest.mark.parametrize("how", ["done", "release"])
def test_finishing_or_releasing_frees_the_environment(project, agent, how):
    EnvironmentFactory(project=project, name="preview-b", isolation="container")
    grant = lease_claim(task=TaskFactory(project=project), agent=agent, environment="preview-b")
    if how == "done":
        attempt_finish(proof=proof_of(grant), outcome="done")
    else:
        attempt_release(proof=proof_of(grant))
    assert Allocation.objects.get().status == AllocationStatus.RELEASED
    assert lease_claim(task=TaskFactory(project=project), agent=agent, environment="preview-b").allocation


@pytest.mark.django_db
def test_expiry_marks_stale_and_a_reclaim_of_the_same_task_inherits(clock, project, agent):
    EnvironmentFactory(project=project, name="preview-b", isolation="container")
    task = TaskFactory(project=project)
    first = lease_claim(task=task, agent=agent, environment="preview-b", lease_seconds=30)
    clock.advance(31)
    sweep_expired()
    assert Allocation.objects.get().status == AllocationStatus.STALE
    with pytest.raises(EnvironmentUnavailable):  # another task cannot take it
        lease_claim(task=TaskFactory(project=project), agent=agent, environment="preview-b")
    second = lease_claim(task=task, agent=AgentFactory(projects=[project]))
    assert second.allocation.environment.name == "preview-b"
    assert "env=preview-b" in second.attempt.label
    statuses = dict(Allocation.objects.values_list("attempt_id", "status"))
    assert statuses == {first.attempt.pk: AllocationStatus.RELEASED, second.attempt.pk: AllocationStatus.ACTIVE}


@pytest.mark.django_db
def test_revocation_marks_stale_and_an_admin_releases_it(project, agent, user_actor):
    EnvironmentFactory(project=project, name="preview-b", isolation="container")
    grant = lease_claim(task=TaskFactory(project=project), agent=agent, environment="preview-b")
    with pytest.raises(ValidationFailed):
        allocation_release(allocation=grant.allocation, actor=user_actor)  # live attempt: revoke first
    task_force_release(task=grant.task, actor=user_actor, reason="gone")
    allocation = Allocation.objects.get()
    assert allocation.status == AllocationStatus.STALE
    allocation_release(allocation=allocation, actor=user_actor)
    assert Allocation.objects.get().status == AllocationStatus.RELEASED


@pytest.mark.django_db(transaction=True)
def test_two_concurrent_claims_of_one_environment_give_one_allocation():
    project = ProjectFactory(slug="envrace")
    EnvironmentFactory(project=project, name="preview-b", isolation="container")
    agents = [AgentFactory(projects=[project]) for _ in range(2)]
    tasks = [TaskFactory(project=project) for _ in range(2)]
    results = run_in_threads(2, lambda i: lease_claim(task=tasks[i], agent=agents[i], environment="preview-b"))
    winners = [r for r in results if not isinstance(r, BaseException)]
    losers = [r for r in results if isinstance(r, BaseException)]
    assert len(winners) == 1
    assert [type(r) for r in losers] == [EnvironmentUnavailable]
    assert Allocation.objects.count() == 1


@pytest.mark.django_db(transaction=True)
def test_a_pool_of_three_serves_three_of_five_concurrent_claims():
    project = ProjectFactory(slug="pool")
    for n in range(3):
        EnvironmentFactory(project=project, name=f"db-{n}", isolation="container")
    agents = [AgentFactory(projects=[project]) for _ in range(5)]
    tasks = [TaskFactory(project=project) for _ in range(5)]
    results = run_in_threads(5, lambda i: lease_claim(task=tasks[i], agent=agents[i], environment_kind="database"))
    winners = [r for r in results if not isinstance(r, BaseException)]
    losers = [r for r in results if isinstance(r, BaseException)]
    assert len(winners) == 3
    assert [type(r) for r in losers] == [EnvironmentUnavailable, EnvironmentUnavailable]
    assert sorted(w.allocation.environment.name for w in winners) == ["db-0", "db-1", "db-2"]
    assert Allocation.objects.filter(status=AllocationStatus.ACTIVE).count() == 3


@pytest.mark.django_db
def test_a_reclaim_that_expires_the_lapsed_attempt_itself_inherits_its_environment(clock, project, agent):
    EnvironmentFactory(project=project, name="preview-b", isolation="container")
    task = TaskFactory(project=project)
    lease_claim(task=task, agent=agent, environment="preview-b", lease_seconds=30)
    clock.advance(31)  # lapsed, and no sweep has run: the claim expires it
    second = lease_claim(task=task, agent=AgentFactory(projects=[project]))
    assert second.allocation is not None
    assert second.allocation.environment.name == "preview-b"
    assert Allocation.objects.filter(status=AllocationStatus.STALE).count() == 0
