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
