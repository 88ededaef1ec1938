"""Who may do what: nobody deletes; Managers view and export; Ledger admins run the actions."""

from __future__ import annotations

import pytest
from django.contrib import admin
from django.test import RequestFactory

from environments.models import Environment
from leases.models import Attempt, AttemptStatus
from ledger.models import Task

pytestmark = pytest.mark.django_db

TASKS = "/admin/ledger/task/"
OPERATOR_ACTIONS = {
    "mark_ready",
    "cancel",
    "reopen",
    "reassign",
    "force_release",
    "clear_reservation",
    "release_from_quarantine",
    "set_budget",
}


def test_delete_selected_is_disabled_site_wide():
    assert "delete_selected" not in dict(admin.site.actions)


@pytest.mark.parametrize("role", ["ledger_admin", "manager", "admin_user"])
def test_nobody_may_delete_anything(request, role):
    user = request.getfixturevalue(role)
    http = RequestFactory().get("/admin/")
    http.user = user
    for model, model_admin in admin.site._registry.items():
        if model._meta.app_label in {"ledger", "environments", "leases"}:
            assert not model_admin.has_delete_permission(http), model._meta.label
            # Change pages are views, except an environment's mapping, which
            # Ledger admins edit through environments.services.environment_update.
            editable = model is Environment and role != "manager"
            assert model_admin.has_change_permission(http) is editable, model._meta.label


def test_ledger_admins_get_the_task_actions_and_managers_none(ledger_admin, manager):
    task_admin = admin.site._registry[Task]
    for user, expected in ((ledger_admin, OPERATOR_ACTIONS), (manager, set())):
        http = RequestFactory().get(TASKS)
        http.user = user
        assert set(task_admin.get_actions(http)) == expected


def test_a_manager_posting_a_force_release_changes_nothing(manager_client, fleet):
    data = {
        "action": "force_release",
        "_selected_action": [fleet.held.pk],
        "index": 0,
        "post": "yes",
        "reason": "I should not be able to",
        "process_gone": "on",
    }
    response = manager_client.post(TASKS, data, follow=True)
    assert response.status_code in (200, 403)
    assert Attempt.objects.get(pk=fleet.grant.attempt.pk).status == AttemptStatus.ACTIVE


@pytest.mark.parametrize(
    "path",
    [
        "/admin/ledger/task/{held}/force-release/",
        "/admin/ledger/task/{held}/reassign/",
        "/admin/ledger/agent/{holder}/rotate-token/",
        "/admin/ledger/agent/add/",
        "/admin/ledger/task/add/",
        "/admin/ledger/project/add/",
        "/admin/environments/environment/add/",
        "/admin/ledger/task/{held}/delete/",
        "/admin/ledger/event/1/delete/",
    ],
)
def test_a_manager_is_refused_every_write_page(manager_client, fleet, path):
    url = path.format(held=fleet.held.pk, holder=fleet.holder.pk)
    assert manager_client.get(url).status_code in (403, 404)
    assert manager_client.post(url, {"post": "yes", "reason": "x", "process_gone": "on"}).status_code in (403, 404)
    assert Attempt.objects.get(pk=fleet.grant.attempt.pk).status == AttemptStatus.ACTIVE


def test_a_manager_sees_everything_read_only(manager_client, fleet):
    for path in (TASKS, f"{TASKS}{fleet.held.pk}/change/", "/admin/", "/admin/ledger/event/"):
        response = manager_client.get(path)
        assert response.status_code == 200, path
        body = response.content.decode()
        assert "Force-release" not in body, path
        assert 'name="_save"' not in body, path


def test_a_ledger_admin_may_open_the_confirmation_pages(ops_client, fleet):
    response = ops_client.get(f"{TASKS}{fleet.held.pk}/force-release/")
    assert response.status_code == 200
    assert "I have confirmed the agent process is gone" in response.content.decode()
