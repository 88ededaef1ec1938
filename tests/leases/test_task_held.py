"""SPEC §25: `Task.held` follows the attempts (triggers), and claim-next never walks past held tasks."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.db import connection

from leases.models import Attempt, AttemptStatus
from leases.services import (
    attempt_finish,
    attempt_hand_off,
    attempt_release,
    lease_claim,
    lease_claim_next,
    sweep_expired,
    task_force_release,
)
from leases.services.claim_next import _candidates
from ledger import clock as ledger_clock
from ledger.actors import SYSTEM
from ledger.models import Task, TaskStatus
from tests.factories import AgentFactory, TaskFactory
from tests.leases.helpers import proof_of

pytestmark = pytest.mark.django_db


def held_tasks() -> set[int]:
    return set(Task.objects.filter(held=True).values_list("pk", flat=True))


def tasks_with_an_active_attempt() -> set[int]:
    return set(Attempt.objects.filter(status=AttemptStatus.ACTIVE).values_list("task_id", flat=True))


def test_held_follows_every_way_an_attempt_starts_and_ends(clock, project, agent):
    tasks = [TaskFactory(project=project) for _ in range(6)]
    grants = [lease_claim(task=task, agent=agent, lease_seconds=60) for task in tasks]
    assert held_tasks() == {task.pk for task in tasks}

    attempt_finish(proof=proof_of(grants[0]), outcome="done")
    attempt_finish(proof=proof_of(grants[1]), outcome="handoff", interruption_reason_code="handoff")
    attempt_release(proof=proof_of(grants[2]))
    task_force_release(task=tasks[3], actor=SYSTEM, reason="stuck")
    attempt_hand_off(attempt=grants[4].attempt, actor=SYSTEM, reason_code="user_request")
    assert held_tasks() == {tasks[5].pk} == tasks_with_an_active_attempt()

    clock.advance(61)
    assert held_tasks() == {tasks[5].pk}, "a lapsed lease still holds its task until it is expired"
    assert sweep_expired().expired == 1
    assert held_tasks() == set() == tasks_with_an_active_attempt()


def test_a_claim_that_expires_a_lapsed_lease_leaves_the_task_held_by_the_new_attempt(clock, project, agent):
    task = TaskFactory(project=project)
    lease_claim(task=task, agent=agent, lease_seconds=60)
    clock.advance(61)
    other = AgentFactory(projects=[project])
    grant = lease_claim_next(project=project, agent=other)
    assert grant is not None
    assert grant.task.pk == task.pk
    assert held_tasks() == {task.pk} == tasks_with_an_active_attempt()
    assert Attempt.objects.filter(task=task, status=AttemptStatus.EXPIRED).count() == 1


def test_claim_next_takes_a_lapsed_lease_ahead_of_a_free_task_without_a_sweep(clock, project, agent):
    first = TaskFactory(project=project, priority=10)
    TaskFactory(project=project, priority=0)
    lease_claim(task=first, agent=agent, lease_seconds=60)
    other = AgentFactory(projects=[project])
    before = lease_claim_next(project=project, agent=other)
    assert before is not None
    assert before.task.priority == 0, "a live lease keeps its task out of claim-next"
    attempt_release(proof=proof_of(before))
    clock.advance(60)  # lapsed at exactly its expiry, not swept
    grant = lease_claim_next(project=project, agent=other)
    assert grant is not None
    assert grant.task.pk == first.pk


def test_claim_next_never_offers_a_held_task_even_when_the_marker_is_all_it_reads(clock, project, agent):
    held = TaskFactory(project=project, priority=5)
    free = TaskFactory(project=project, priority=0)
    lease_claim(task=held, agent=agent, lease_seconds=600)
    other = AgentFactory(projects=[project])
    grant = lease_claim_next(project=project, agent=other)
    assert grant is not None
    assert grant.task.pk == free.pk
    assert lease_claim_next(project=project, agent=other) is None


def bulk_held(project, agent, count: int) -> list[Task]:
    """`count` ready tasks at the head of the queue, each with a live lease written as a bulk insert."""
    now = ledger_clock.now()
    tasks = Task.objects.bulk_create(
        Task(
            project=project,
            number=10_000 + index,
            key=f"{project.key_prefix}-{10_000 + index}",
            title=f"held {index}",
            status=TaskStatus.READY,
            priority=100,
            epoch=1,
            ready_since=now - timedelta(days=1),
            created_at=now,
            updated_at=now,
        )
        for index in range(count)
    )
    Attempt.objects.bulk_create(
        Attempt(
            task=task,
            agent=agent,
            epoch=1,
            token_hash="0" * 64,
            token_salt="0" * 32,
            lease_seconds=3600,
            lease_expires_at=now + timedelta(hours=1),
            claimed_at=now,
            label=f"bulk {task.pk}",
            task_version_at_claim=1,
        )
        for task in tasks
    )
    return tasks


def plan_of_first_candidate(project, agent) -> str:
    statement = _candidates(project=project, agent=agent, now=ledger_clock.now())[:1]
    if connection.vendor == "postgresql":
        with connection.cursor() as cursor:
            cursor.execute("ANALYZE ledger_task")
            cursor.execute("ANALYZE leases_attempt")
    else:
        with connection.cursor() as cursor:
            cursor.execute("ANALYZE")
    return statement.explain()


@pytest.mark.parametrize("count", [100, 10_000])
def test_claim_next_reads_the_queue_of_unheld_tasks_at_any_number_held(clock, project, agent, count):
    bulk_held(project, agent, count)
    free = TaskFactory(project=project, priority=0)
    assert Task.objects.filter(held=True).count() == count  # the bulk insert fired the triggers
    plan = plan_of_first_candidate(project, agent)
    assert "task_claim_queue" in plan, plan
    claimer = AgentFactory(projects=[project])
    grant = lease_claim_next(project=project, agent=claimer)
    assert grant is not None
    assert grant.task.pk == free.pk
