from __future__ import annotations

from datetime import timedelta

import pytest

from leases.models import Attempt, AttemptStatus, Note
from leases.services import check_queue_wait, lease_claim, note_add, sweep_expired
from ledger.actors import SYSTEM
from ledger.models import Event, Task, TaskStatus
from ledger.services import task_update
from tests.concurrency import run_in_threads
from tests.factories import AgentFactory, ProjectFactory, TaskFactory
from tests.leases.helpers import proof_of


@pytest.fixture
def project():
    return ProjectFactory(slug="web", queue_wait_max_seconds=600)


@pytest.fixture
def agent(project):
    return AgentFactory(projects=[project])


@pytest.mark.django_db
def test_sweep_expires_exactly_the_lapsed_attempts_and_keeps_their_notes(clock, project, agent):
    short = [lease_claim(task=TaskFactory(project=project), agent=agent, lease_seconds=60) for _ in range(3)]
    long = [lease_claim(task=TaskFactory(project=project), agent=agent, lease_seconds=600) for _ in range(2)]
    note_add(proof=proof_of(short[0]), kind="checkpoint", content="keep me")
    Task.objects.filter(pk=short[1].task.pk).update(status=TaskStatus.REVIEW)  # a stored status to keep
    clock.advance(60)
    report = sweep_expired(batch_size=2)
    assert (report.expired, report.batches) == (3, 2)
    statuses = dict(Attempt.objects.values_list("pk", "status"))
    assert {statuses[g.attempt.pk] for g in short} == {AttemptStatus.EXPIRED}
    assert {statuses[g.attempt.pk] for g in long} == {AttemptStatus.ACTIVE}
    assert Note.objects.get().content == "keep me"
    assert Task.objects.get(pk=short[1].task.pk).status == TaskStatus.REVIEW
    assert Task.objects.get(pk=short[0].task.pk).ready_since == clock.now()  # the instant it lapsed
    assert Event.objects.filter(type="attempt.expired").count() == 3
    assert sweep_expired().expired == 0


@pytest.mark.django_db(transaction=True)
def test_two_sweeps_at_once_produce_one_event_per_attempt(clock, project, agent):
    grants = [lease_claim(task=TaskFactory(project=project), agent=agent, lease_seconds=30) for _ in range(40)]
    clock.advance(31)
    results = run_in_threads(2, lambda _: sweep_expired(batch_size=7))
    assert not [r for r in results if isinstance(r, BaseException)], results
    assert sum(r.expired for r in results) == 40
    assert Event.objects.filter(type="attempt.expired").count() == 40
    assert set(Attempt.objects.values_list("status", flat=True)) == {AttemptStatus.EXPIRED}
    assert len(grants) == 40


@pytest.mark.django_db
def test_queue_wait_alerts_once_per_waiting_period(clock, project, agent):
    task = TaskFactory(project=project)
    TaskFactory(project=project, status=TaskStatus.OPEN)  # not claimable: never alerted
    clock.advance(599)
    assert check_queue_wait() == 0
    clock.advance(1)
    assert check_queue_wait() == 1
    assert check_queue_wait() == 0  # same waiting period
    event = Event.objects.get(type="task.queue_wait_exceeded")
    assert (event.severity, event.task_id, event.payload["waited_seconds"]) == ("warn", task.pk, 600)
    # A claim and a release start a new waiting period.
    from leases.services import attempt_release

    attempt_release(proof=proof_of(lease_claim(task=task, agent=agent)))
    clock.advance(601)
    assert check_queue_wait() == 1
    assert Event.objects.filter(type="task.queue_wait_exceeded").count() == 2


@pytest.mark.django_db
def test_a_held_task_is_not_waiting(clock, project, agent):
    task = TaskFactory(project=project)
    lease_claim(task=task, agent=agent, lease_seconds=3600)
    clock.advance(1200)
    assert check_queue_wait() == 0
    task_update(task=Task.objects.get(pk=task.pk), actor=SYSTEM, changes={"priority": 2})
    assert check_queue_wait() == 0


@pytest.mark.django_db
def test_the_sweep_uses_the_expiry_of_each_lease(clock, project, agent):
    grant = lease_claim(task=TaskFactory(project=project), agent=agent, lease_seconds=60)
    clock.advance(3600)
    sweep_expired()
    row = Attempt.objects.get(pk=grant.attempt.pk)
    assert row.finished_at == grant.attempt.lease_expires_at == clock.now() - timedelta(seconds=3540)
