"""SPEC §25 "Renewals do not bloat": the lease clock follows the attempts, and a renewal is heap-only on PostgreSQL."""

from __future__ import annotations

import pytest
from django.db import connection, transaction

from leases.models import Attempt, AttemptStatus, LeaseClock
from leases.selectors import lapsed_leases
from leases.services import (
    attempt_finish,
    attempt_hand_off,
    attempt_release,
    attempt_renew,
    lease_claim,
    sweep_expired,
    task_force_release,
)
from ledger.actors import SYSTEM
from tests.factories import TaskFactory
from tests.leases.helpers import proof_of

pytestmark = pytest.mark.django_db


def clocks() -> dict[int, tuple[int, object]]:
    return {row[0]: (row[1], row[2]) for row in LeaseClock.objects.values_list("attempt_id", "task_id", "expires_at")}


def active_leases() -> dict[int, tuple[int, object]]:
    active = Attempt.objects.filter(status=AttemptStatus.ACTIVE)
    return {row[0]: (row[1], row[2]) for row in active.values_list("id", "task_id", "lease_expires_at")}


def test_the_clock_follows_every_way_an_attempt_starts_renews_and_ends(clock, project, agent):
    tasks = [TaskFactory(project=project) for _ in range(6)]
    grants = [lease_claim(task=task, agent=agent, lease_seconds=60) for task in tasks]
    assert set(clocks()) == {grant.attempt.pk for grant in grants}
    assert clocks() == active_leases()

    clock.advance(30)
    renewed = attempt_renew(proof=proof_of(grants[5]), lease_seconds=600)
    assert clocks()[grants[5].attempt.pk] == (tasks[5].pk, renewed.lease_expires_at)

    attempt_finish(proof=proof_of(grants[0]), outcome="done")
    attempt_finish(proof=proof_of(grants[1]), outcome="handoff", interruption_reason_code="handoff")
    attempt_release(proof=proof_of(grants[2]))
    task_force_release(task=tasks[3], actor=SYSTEM, reason="stuck")
    attempt_hand_off(attempt=grants[4].attempt, actor=SYSTEM, reason_code="user_request")
    assert set(clocks()) == {grants[5].attempt.pk}
    assert clocks() == active_leases()

    clock.advance(601)
    assert [row.attempt_id for row in lapsed_leases(clock.now())] == [grants[5].attempt.pk]
    assert sweep_expired().expired == 1
    assert clocks() == {} == active_leases()


def test_the_sweep_reads_expiry_from_the_clock_and_expires_only_lapsed_leases(clock, project, agent):
    short = lease_claim(task=TaskFactory(project=project), agent=agent, lease_seconds=60)
    long = lease_claim(task=TaskFactory(project=project), agent=agent, lease_seconds=60)
    clock.advance(50)
    attempt_renew(proof=proof_of(long), lease_seconds=300)
    clock.advance(20)
    assert sweep_expired().expired == 1
    assert Attempt.objects.get(pk=short.attempt.pk).status == AttemptStatus.EXPIRED
    assert Attempt.objects.get(pk=long.attempt.pk).status == AttemptStatus.ACTIVE
    assert clocks() == active_leases()


def test_the_clock_triggers_exist_after_migrate():
    """A later SQLite migration that remakes `leases_attempt` drops them unless it keeps them."""
    pattern = ["leases_attempt_clock%"]
    with connection.cursor() as cursor:
        if connection.vendor == "postgresql":
            cursor.execute("SELECT tgname FROM pg_trigger WHERE tgname LIKE %s", pattern)
        else:
            cursor.execute("SELECT name FROM sqlite_master WHERE type = 'trigger' AND name LIKE %s", pattern)
        names = {name for (name,) in cursor.fetchall()}
    assert names == {"leases_attempt_clock_insert", "leases_attempt_clock_update"}


def test_no_index_of_the_attempt_table_names_a_column_a_renewal_writes():
    renewal_columns = {"lease_expires_at", "last_renewed_at", "renew_count", "last_worked_at"}
    with connection.cursor() as cursor:
        constraints = connection.introspection.get_constraints(cursor, Attempt._meta.db_table)
    indexed = {name: set(spec["columns"]) & renewal_columns for name, spec in constraints.items() if spec["index"]}
    assert {name: columns for name, columns in indexed.items() if columns} == {}


def _attempt_updates_in_this_transaction() -> tuple[int, int]:
    """This transaction's updates of the attempt table so far, and how many were heap-only (PostgreSQL)."""
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT n_tup_upd, n_tup_hot_upd FROM pg_stat_xact_user_tables WHERE relname = %s",
            [Attempt._meta.db_table],
        )
        updates, hot = cursor.fetchone()
    return updates, hot


def _renewal_updates(grant) -> tuple[int, int]:
    """One renewal in a transaction of its own that commits, as in service; the attempt-table updates it made
    and how many were heap-only. Counted from this transaction's statistics, so nothing else that writes the
    table meanwhile (another test's late connection, a sweep) can enter the count."""
    with transaction.atomic():
        before_updates, before_hot = _attempt_updates_in_this_transaction()
        attempt_renew(proof=proof_of(grant))
        updates, hot = _attempt_updates_in_this_transaction()
    return updates - before_updates, hot - before_hot


@pytest.mark.skipif(connection.vendor != "postgresql", reason="heap-only updates are PostgreSQL's")
@pytest.mark.django_db(transaction=True)
def test_a_renewal_is_a_heap_only_update_of_the_attempt_on_postgresql(clock, project, agent):
    """Each renewal commits, as in service: its page keeps room (fillfactor) and prunes the versions it left."""
    grants = [lease_claim(task=TaskFactory(project=project), agent=agent, lease_seconds=60) for _ in range(3)]
    counts = []
    for _ in range(40):
        clock.advance(5)
        counts.extend(_renewal_updates(grant) for grant in grants)
    assert [updates for updates, _ in counts] == [1] * 120, "a renewal writes its attempt row once"
    # Heap-only needs room on the row's page: a page that filled before PostgreSQL pruned it sends one version
    # to another page now and then (measured 85-100 % here; bench `renewals`). An indexed column would make it 0.
    assert sum(hot for _, hot in counts) >= 0.8 * 120, "a renewal changed an indexed column of the attempt table"
    assert clocks() == active_leases()


def _task_row_writes() -> int:
    """This transaction's updates of the task table so far (PostgreSQL)."""
    with connection.cursor() as cursor:
        cursor.execute("SELECT n_tup_upd FROM pg_stat_xact_user_tables WHERE relname = 'ledger_task'")
        (updates,) = cursor.fetchone()
    return updates


@pytest.mark.skipif(connection.vendor != "postgresql", reason="counts row writes from PostgreSQL's statistics")
def test_a_claim_writes_its_task_row_once_the_epoch_and_the_held_mark_together(clock, project, agent):
    task = TaskFactory(project=project)
    before = _task_row_writes()
    lease_claim(task=task, agent=agent, lease_seconds=60)
    assert _task_row_writes() - before == 1
    task.refresh_from_db()
    assert task.held
    assert task.epoch == 1
