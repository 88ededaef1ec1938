from __future__ import annotations

import pytest
from django.db import DatabaseError, connection, transaction

from ledger.models import DeletionRefused, Event, Task
from tests.factories import AgentFactory, TaskFactory

pytestmark = pytest.mark.django_db


def test_raw_sql_update_on_events_fails():
    TaskFactory()
    with pytest.raises(DatabaseError, match="append-only"), transaction.atomic(), connection.cursor() as cursor:
        cursor.execute("UPDATE ledger_event SET type = 'forged'")
    assert not Event.objects.filter(type="forged").exists()


def test_raw_sql_delete_on_events_fails():
    TaskFactory()
    before = Event.objects.count()
    with pytest.raises(DatabaseError, match="append-only"), transaction.atomic(), connection.cursor() as cursor:
        cursor.execute("DELETE FROM ledger_event")
    assert Event.objects.count() == before > 0


def test_raw_sql_truncate_of_events_fails():
    """PostgreSQL's TRUNCATE bypasses row triggers; a statement trigger refuses it. SQLite has no TRUNCATE:
    its `DELETE FROM` without WHERE (the truncate optimisation) is refused by the delete trigger above."""
    TaskFactory()
    before = list(Event.objects.values_list("id", "type", "payload"))
    statement = "TRUNCATE ledger_event CASCADE" if connection.vendor == "postgresql" else "DELETE FROM ledger_event"
    if connection.vendor == "postgresql":
        # Django's deferred foreign keys would refuse the TRUNCATE first ("pending trigger events").
        statement = f"SET CONSTRAINTS ALL IMMEDIATE; {statement}"
    with pytest.raises(DatabaseError, match="append-only"), transaction.atomic(), connection.cursor() as cursor:
        cursor.execute(statement)
    assert list(Event.objects.values_list("id", "type", "payload")) == before != []


@pytest.mark.parametrize(
    "statement",
    [
        "INSERT OR REPLACE INTO ledger_event (id, type, severity, payload, created_at) "
        "SELECT id, 'forged', severity, '{}', created_at FROM ledger_event",
        "REPLACE INTO ledger_event (id, type, severity, payload, created_at) "
        "SELECT id, 'forged', severity, '{}', created_at FROM ledger_event",
        "INSERT INTO ledger_event (id, type, severity, payload, created_at) "
        "SELECT id, 'forged', severity, '{}', created_at FROM ledger_event "
        "ON CONFLICT (id) DO UPDATE SET type = excluded.type",
    ],
    ids=["insert-or-replace", "replace-into", "upsert"],
)
def test_rewriting_an_event_in_place_by_an_insert_fails(statement):
    TaskFactory()
    before = list(Event.objects.values_list("id", "type", "payload"))
    if connection.vendor == "postgresql" and not statement.startswith("INSERT INTO"):
        statement = statement.replace("INSERT OR REPLACE", "INSERT").replace("REPLACE INTO", "INSERT INTO")
    with pytest.raises(DatabaseError), transaction.atomic(), connection.cursor() as cursor:
        cursor.execute(statement)
    assert list(Event.objects.values_list("id", "type", "payload")) == before != []


def test_models_and_querysets_refuse_delete():
    task = TaskFactory()
    agent = AgentFactory()
    for deletion in (task.delete, agent.delete, Task.objects.all().delete, Event.objects.all().delete):
        with pytest.raises(DeletionRefused):
            deletion()
    assert Task.objects.filter(pk=task.pk).exists()


def test_groups_exist_without_any_delete_permission():
    from django.contrib.auth.models import Group

    admins = Group.objects.get(name="Ledger admins")
    managers = Group.objects.get(name="Managers")
    assert admins.permissions.filter(codename="change_task").exists()
    assert not admins.permissions.filter(codename__startswith="delete_").exists()
    assert set(managers.permissions.values_list("codename", flat=True)) >= {"view_task", "view_event"}
    assert not managers.permissions.exclude(codename__startswith="view_").exists()
