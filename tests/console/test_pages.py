"""Every admin page renders, for Ledger admins and Managers alike, and shows no way to delete."""

from __future__ import annotations

import pytest
from django.contrib import admin
from django.urls import reverse

from environments.models import Environment
from tests.factories import EnvironmentFactory

pytestmark = pytest.mark.django_db

LEASEHOLD_APPS = {"ledger", "environments", "leases"}


def leasehold_models():
    return [model for model in admin.site._registry if model._meta.app_label in LEASEHOLD_APPS]


@pytest.fixture
def populated(fleet):
    EnvironmentFactory(project=fleet.project, name="preview-b", kind="database")
    return fleet


@pytest.mark.parametrize("role", ["ops_client", "manager_client"])
def test_every_changelist_and_change_page_renders(request, role, populated):
    client = request.getfixturevalue(role)
    for model in leasehold_models():
        opts = model._meta
        response = client.get(reverse(f"admin:{opts.app_label}_{opts.model_name}_changelist"))
        assert response.status_code == 200, opts.label
        assert b"deletelink" not in response.content
        first = model.objects.order_by("pk").first()
        if first is None:
            continue
        response = client.get(reverse(f"admin:{opts.app_label}_{opts.model_name}_change", args=[first.pk]))
        assert response.status_code == 200, opts.label
        assert b"deletelink" not in response.content, opts.label
        # Change pages are views; only an environment's mapping is editable, by Ledger admins.
        editable = model is Environment and role == "ops_client"
        assert (b'name="_save"' in response.content) is editable, opts.label


def test_no_model_has_a_delete_action_or_permission(ops_client, ledger_admin, rf):
    request = rf.get("/admin/")
    request.user = ledger_admin
    for model, model_admin in admin.site._registry.items():
        if model._meta.app_label not in LEASEHOLD_APPS:
            continue
        assert not model_admin.has_delete_permission(request), model._meta.label
        assert "delete_selected" not in model_admin.get_actions(request), model._meta.label


def test_dashboard_renders_with_charts(ops_client, populated):
    response = ops_client.get(reverse("admin:index"))
    assert response.status_code == 200
    body = response.content.decode()
    assert body.count('<svg class="lh-chart"') == 3
    assert "Tasks by effective status" in body
    assert "Leases expiring in the next 10 minutes" in body
