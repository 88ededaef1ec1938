"""Bug 11: nobody, superusers included, deletes the role groups, users or django-q2 schedules in the admin."""

from __future__ import annotations

import pytest
from django.contrib.auth.models import Group, Permission
from django_q.models import Schedule

from ledger.permissions import LEDGER_ADMINS, MANAGERS
from operations.schedules import ensure_schedules

pytestmark = pytest.mark.django_db


@pytest.fixture
def root_client(client, admin_user):
    client.force_login(admin_user)
    return client


@pytest.mark.parametrize("name", [LEDGER_ADMINS, MANAGERS])
def test_a_superuser_cannot_delete_a_role_group(root_client, name):
    group = Group.objects.get(name=name)
    assert root_client.get(f"/admin/auth/group/{group.pk}/delete/").status_code == 403
    assert root_client.post(f"/admin/auth/group/{group.pk}/delete/", {"post": "yes"}).status_code == 403
    response = root_client.post("/admin/auth/group/", {"action": "delete_selected", "_selected_action": [group.pk]})
    assert response.status_code in (200, 302)
    assert Group.objects.filter(name=name).exists()


def test_a_superuser_cannot_delete_a_user(root_client, django_user_model):
    other = django_user_model.objects.create_user(username="temp", password="x", is_staff=True)
    assert root_client.post(f"/admin/auth/user/{other.pk}/delete/", {"post": "yes"}).status_code == 403
    assert django_user_model.objects.filter(pk=other.pk).exists()


def test_schedules_are_read_only_for_a_superuser(root_client):
    ensure_schedules()
    sweep = Schedule.objects.get(name="leases.sweep_expired")
    assert root_client.post(f"/admin/django_q/schedule/{sweep.pk}/delete/", {"post": "yes"}).status_code == 403
    page = root_client.get(f"/admin/django_q/schedule/{sweep.pk}/change/")
    assert page.status_code == 200
    assert 'name="minutes"' not in page.content.decode()  # shown, not editable
    changed = root_client.post(f"/admin/django_q/schedule/{sweep.pk}/change/", {"name": "x", "minutes": 60})
    assert changed.status_code == 403
    assert root_client.get("/admin/django_q/schedule/add/").status_code == 403
    assert Schedule.objects.get(pk=sweep.pk).minutes == 1


def test_delete_permissions_are_not_offered_on_the_group_and_user_forms(root_client, admin_user):
    group = Group.objects.get(name=LEDGER_ADMINS)
    body = root_client.get(f"/admin/auth/group/{group.pk}/change/").content.decode()
    delete_task = Permission.objects.get(codename="delete_task", content_type__app_label="ledger")
    change_task = Permission.objects.get(codename="change_task", content_type__app_label="ledger")
    assert f'value="{change_task.pk}"' in body
    assert f'value="{delete_task.pk}"' not in body
    assert 'name="name"' not in body  # the role group's name is read-only
    body = root_client.get(f"/admin/auth/user/{admin_user.pk}/change/").content.decode()
    assert f'value="{delete_task.pk}"' not in body
