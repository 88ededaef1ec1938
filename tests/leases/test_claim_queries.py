"""Statements per lease operation, pinned at the lowest reached (docs/performance.md, F5).

Counted at the service, inside the test transaction: each count includes the
service's SAVEPOINT and RELEASE. A claim is lock, state, epoch, attempt,
event; a task with an earlier attempt costs one statement more (that
attempt and a stale allocation). Renew is lock and update; a note adds its
row and event; finish without an environment spends nothing on allocations.
"""

from __future__ import annotations

import sqlite3

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

from core.errors import BudgetExhausted, StorageBusy, TaskNotClaimable
from leases.models import Allocation, AllocationStatus
from leases.services import (
    attempt_finish,
    attempt_release,
    attempt_renew,
    lease_claim,
    lease_claim_next,
    note_add,
    task_force_release,
)
from ledger.actors import SYSTEM
from ledger.models import Event, EventType
from ledger.services import budget_set
from tests.factories import AgentFactory, EnvironmentFactory, ProjectFactory, TaskFactory
from tests.leases.helpers import proof_of

pytestmark = pytest.mark.django_db

PINNED = {
    "claim": 7,
    "claim_with_history": 8,
    "claim_next": 7,
    "renew": 4,
    "note": 6,
    "finish_done": 7,
    "finish_handoff": 6,
    "release": 6,
}
if connection.vendor == "postgresql":
    # Combined statements (docs/performance.md, "Round trips, round two"): the claim's epoch, attempt
    # and event are one; renew and a note are one each, with no savepoint of their own; finish's
    # attempt end, task update and events are one.
    PINNED.update({"claim": 5, "claim_with_history": 6, "claim_next": 5, "renew": 1, "note": 1, "finish_done": 4})


def test_the_hot_cycle_keeps_its_statement_counts(clock, project, agent, django_assert_max_num_queries):
    task = TaskFactory(project=project)
    with django_assert_max_num_queries(PINNED["claim"]):
        grant = lease_claim(task=task, agent=agent)
    proof = proof_of(grant)
    with django_assert_max_num_queries(PINNED["renew"]):
        renewed = attempt_renew(proof=proof)
    with django_assert_max_num_queries(PINNED["note"]):
        note_add(proof=proof, kind="checkpoint", content="migrated", next_steps=["wire the API"])
    with django_assert_max_num_queries(PINNED["finish_done"]):
        finished = attempt_finish(proof=proof, outcome="done")
    assert renewed.renew_count == 1
    assert finished.task.status == "done"

    TaskFactory(project=project)
    with django_assert_max_num_queries(PINNED["claim_next"]):
        grant = lease_claim_next(project=project, agent=agent)
    assert grant is not None
    with django_assert_max_num_queries(PINNED["finish_handoff"]):
        attempt_finish(proof=proof_of(grant), outcome="handoff", interruption_reason_code="handoff")

    with django_assert_max_num_queries(PINNED["claim_with_history"]):
        again = lease_claim(task=grant.task, agent=agent)
    assert again.attempt.branch == grant.attempt.branch  # inherited from the interrupted attempt
    with django_assert_max_num_queries(PINNED["release"]):
        attempt_release(proof=proof_of(again))


def test_the_claim_reads_attempts_only_after_the_lock(project, agent):
    task = TaskFactory(project=project)
    with CaptureQueriesContext(connection) as captured:
        lease_claim(task=task, agent=agent)
    selects = [query["sql"] for query in captured.captured_queries if query["sql"].startswith("SELECT")]
    lock, state = selects[0], selects[1]
    assert '"ledger_task"' in lock
    assert "leases_attempt" not in lock  # a subquery there would read the snapshot from before the wait
    assert "leases_attempt" in state


def test_renew_and_note_answer_from_what_they_locked(clock, project, agent, django_assert_num_queries):
    grant = lease_claim(task=TaskFactory(project=project), agent=agent)
    clock.advance(60)
    renewed = attempt_renew(proof=proof_of(grant))
    written = note_add(proof=proof_of(grant), kind="progress", content="halfway")
    with django_assert_num_queries(0):
        assert (renewed.renew_count, renewed.last_renewed_at) == (1, clock.now())
        assert renewed.lease_expires_at == written.lease_expires_at
        assert (renewed.task.key, renewed.agent.handle) == (grant.task.key, agent.handle)


def test_finishing_with_an_environment_still_releases_it(project, agent):
    EnvironmentFactory(project=project, name="preview-b", kind="database", isolation="container")
    grant = lease_claim(task=TaskFactory(project=project), agent=agent, environment="preview-b")
    attempt_finish(proof=proof_of(grant), outcome="done")
    assert Allocation.objects.get().status == AllocationStatus.RELEASED
    assert Event.objects.filter(type=EventType.ENVIRONMENT_RELEASED, attempt_id=grant.attempt.pk).count() == 1


def test_a_reclaim_after_a_revocation_inherits_the_stale_environment(project, agent, user_actor):
    EnvironmentFactory(project=project, name="preview-b", kind="database", isolation="container")
    grant = lease_claim(task=TaskFactory(project=project), agent=agent, environment="preview-b")
    task_force_release(task=grant.task, actor=user_actor, reason="agent gone")
    again = lease_claim(task=grant.task, agent=AgentFactory(projects=[project]))
    assert again.allocation is not None
    assert again.allocation.environment.name == "preview-b"
    assert "env=preview-b" in again.attempt.label
    statuses = dict(Allocation.objects.values_list("attempt_id", "status"))
    assert statuses == {grant.attempt.pk: AllocationStatus.RELEASED, again.attempt.pk: AllocationStatus.ACTIVE}


def _hold_sqlite_write_lock() -> sqlite3.Connection:
    raw = sqlite3.connect(connection.settings_dict["NAME"], isolation_level=None, check_same_thread=False)
    raw.execute("BEGIN IMMEDIATE")
    return raw


@pytest.mark.skipif(connection.vendor != "sqlite", reason="SQLite's one write lock")
@pytest.mark.django_db(transaction=True)
def test_on_sqlite_an_empty_claim_next_reads_once_and_takes_no_write_lock(clock):
    project = ProjectFactory()
    agent = AgentFactory(projects=[project])
    TaskFactory(project=project, status="open")  # not claimable
    connection.ensure_connection()
    connection.cursor().execute("PRAGMA busy_timeout = 10")
    raw = _hold_sqlite_write_lock()
    try:
        with CaptureQueriesContext(connection) as captured:
            assert lease_claim_next(project=project, agent=agent) is None
        assert len(captured.captured_queries) == 1
        assert "FROM" in captured.captured_queries[0]["sql"]
        # A claimable task needs the lock: the claim waits for it and gives up (STORAGE_BUSY).
        raw.rollback()
        ready = TaskFactory(project=project)
        raw.execute("BEGIN IMMEDIATE")
        with pytest.raises(StorageBusy):
            lease_claim_next(project=project, agent=agent)
    finally:
        raw.rollback()
        raw.close()
    grant = lease_claim_next(project=project, agent=agent)
    assert grant is not None
    assert grant.task.pk == ready.pk


@pytest.mark.skipif(connection.vendor != "postgresql", reason="PostgreSQL's transaction markers")
@pytest.mark.django_db(transaction=True)
def test_on_postgresql_an_empty_claim_next_is_one_read_outside_a_transaction(clock):
    project = ProjectFactory()
    agent = AgentFactory(projects=[project])
    TaskFactory(project=project, status="open")  # not claimable
    with CaptureQueriesContext(connection) as captured:
        assert lease_claim_next(project=project, agent=agent) is None
    assert [query["sql"].split()[0] for query in captured.captured_queries] == ["SELECT"]
    ready = TaskFactory(project=project)
    with CaptureQueriesContext(connection) as captured:
        grant = lease_claim_next(project=project, agent=agent)
    assert grant is not None
    assert grant.task.pk == ready.pk
    # The read that found a candidate, then the claim's own transaction, which decides afresh.
    assert "FOR NO KEY UPDATE" not in captured.captured_queries[0]["sql"]
    assert any("FOR NO KEY UPDATE" in query["sql"] for query in captured.captured_queries[1:])


@pytest.mark.django_db(transaction=True)
def test_a_spent_daily_budget_is_told_even_with_nothing_to_claim(clock):
    project = ProjectFactory()
    agent = budget_set(subject=AgentFactory(projects=[project]), actor=SYSTEM, daily_cost_usd="1.00")
    grant = lease_claim(task=TaskFactory(project=project), agent=agent)
    with pytest.raises(BudgetExhausted):
        note_add(proof=proof_of(grant), kind="progress", content="x", usage={"cost_usd": "1.5"})
    attempt_finish(proof=proof_of(grant), outcome="done")  # nothing is left to claim
    with pytest.raises(TaskNotClaimable) as refused:
        lease_claim_next(project=project, agent=agent)
    assert refused.value.details["reason"] == "budget"
