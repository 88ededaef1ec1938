"""Issue 32: one permission rule for every aggregate (`ledger.permissions.may_view`, `console.permissions`).

Each dashboard panel, the report, the CSV exports, job health, agent health
and `/metrics` show their figures only to a user who may view every model
they are read from; an action the user could not perform is not offered.
Two partial-permission staff users request every console URL.
"""

from __future__ import annotations

import pytest
from django.contrib import admin
from django.contrib.auth.models import Permission
from django.urls import reverse

from ledger.models import Agent
from reconciliation.models import Condition, SubjectType
from tests.console.conftest import make_staff
from tests.factories import FindingFactory

pytestmark = pytest.mark.django_db

WORKTREE = "/srv/worktrees/web-secret-wt"
AGGREGATES = (
    "/admin/",
    "/admin/jobs/",
    "/admin/reports/",
    "/admin/reports/tasks.csv",
    "/admin/reports/attempts.csv",
    "/admin/ledger/agent/health/",
    "/metrics",
)


def staff_with(django_user_model, username: str, *codenames: str):
    user = make_staff(django_user_model, username, None)
    for codename in codenames:
        app_label, name = codename.split(".")
        user.user_permissions.add(Permission.objects.get(content_type__app_label=app_label, codename=name))
    return django_user_model.objects.get(pk=user.pk)  # a fresh permission cache


@pytest.fixture
def viewer(django_user_model):
    """The issue's staff user: view-only task, event and attempt permissions."""
    return staff_with(django_user_model, "viewer", "ledger.view_task", "ledger.view_event", "leases.view_attempt")


@pytest.fixture
def triager(django_user_model):
    """Finding permissions only."""
    return staff_with(django_user_model, "triager", "reconciliation.view_finding", "reconciliation.change_finding")


@pytest.fixture
def findings(fleet):
    worktree = FindingFactory(
        project=fleet.project,
        condition=Condition.ORPHAN_WORKTREE,
        subject_type=SubjectType.WORKTREE,
        subject_key=WORKTREE,
        detail={"path": WORKTREE},
    )
    dead = FindingFactory(
        project=fleet.project,
        condition=Condition.LIVE_LEASE_DEAD_AGENT,
        subject_type=SubjectType.ATTEMPT,
        subject_key=str(fleet.grant.attempt.pk),
        attempt=fleet.grant.attempt,
        task=fleet.held,
    )
    return worktree, dead


def every_console_url() -> list[str]:
    urls = list(AGGREGATES)
    for model in admin.site._registry:
        opts = model._meta
        urls.append(reverse(f"admin:{opts.app_label}_{opts.model_name}_changelist"))
    return urls


def test_a_view_only_user_sees_no_aggregate_beyond_its_permissions(client, viewer, findings, fleet):
    client.force_login(viewer)
    statuses = {}
    for url in every_console_url():
        response = client.get(url)
        assert response.status_code != 500, url
        statuses[url] = response.status_code
        body = b"".join(response.streaming_content) if response.streaming else response.content
        assert WORKTREE.encode() not in body, url  # a finding's path: no finding permission
    # Pages whose models it may not all view answer 403; the dashboard shows what it may.
    for url in AGGREGATES[1:]:
        assert statuses[url] == 403, url
    assert statuses["/admin/"] == 200
    body = client.get("/admin/").content.decode()
    for panel_id in ("lh-findings", "lh-spend", "lh-job-health", "lh-status-table", "lh-charts"):
        assert f'id="{panel_id}"' not in body, panel_id
        assert f'class="{panel_id}"' not in body, panel_id
    assert 'id="lh-recent-alerts"' in body  # events and tasks: its own
    assert 'id="lh-expiring"' not in body  # names agents: no agent permission
    assert reverse("admin:leasehold_report") not in body
    assert reverse("admin:leasehold_jobs") not in body


def test_a_triager_is_not_offered_force_release_it_could_not_perform(client, triager, findings):
    _, dead = findings
    client.force_login(triager)
    page = client.get(reverse("admin:reconciliation_finding_change", args=[dead.pk]))
    assert page.status_code == 200
    body = page.content.decode()
    assert "Force-release the attempt" not in body
    assert "Acknowledge" in body  # what it may do is still offered
    assert client.get(reverse("admin:ledger_task_force_release", args=[dead.task_id])).status_code == 403
    for url in AGGREGATES[1:]:
        assert client.get(url).status_code == 403, url
    dashboard = client.get("/admin/").content.decode()
    assert 'id="lh-findings"' not in dashboard  # the panel names tasks
    assert "Open findings" in dashboard  # the tile counts findings only


def test_a_ledger_admin_still_sees_every_aggregate(ops_client, findings):
    for url in AGGREGATES:
        assert ops_client.get(url).status_code == 200, url
    body = ops_client.get("/admin/").content.decode()
    for panel_id in ("lh-findings", "lh-spend", "lh-job-health", "lh-status-table", "lh-expiring"):
        assert f'id="{panel_id}"' in body, panel_id


def test_a_ledger_admin_is_offered_force_release_on_a_dead_agent_finding(ops_client, findings):
    _, dead = findings
    body = ops_client.get(reverse("admin:reconciliation_finding_change", args=[dead.pk])).content.decode()
    assert "Force-release the attempt" in body
    assert Agent.objects.exists()
