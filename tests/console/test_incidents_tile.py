"""The dashboard's open-incidents tile (issue 32): open, unsnoozed incidents, linking to the incidents page."""

from __future__ import annotations

import pytest

from insight.models import Incident, IncidentStatus
from insight.services.incidents import incident_acknowledge, incident_snooze, incidents_check
from ledger.actors import SYSTEM, Actor
from push.models import WebhookEndpoint
from push.services.webhooks import webhook_create
from reconciliation.models import ReconciliationRun, RunStatus
from tests.console.test_aggregate_permissions import staff_with

pytestmark = pytest.mark.django_db

INCIDENTS = "/admin/insight/incident/"


def _tile(body: str) -> tuple[str, str]:
    """The tile's opening tag and its content."""
    start = body.rindex("<a", 0, body.index('id="lh-tile-incidents"'))
    end = body.index("</a>", start)
    tag_end = body.index(">", start)
    return body[start:tag_end], body[tag_end:end]


def _open_two(clock) -> list[Incident]:
    """Reconciliation failing and a webhook endpoint failing, opened by the check."""
    for _ in range(3):
        ReconciliationRun.objects.create(started_at=clock.now(), status=RunStatus.PARTIAL)
    endpoint, _ = webhook_create(url="https://hooks.example.com/in", actor=SYSTEM)
    WebhookEndpoint.objects.filter(pk=endpoint.pk).update(consecutive_failures=3)
    incidents_check()
    return list(Incident.objects.filter(status=IncidentStatus.OPEN).order_by("id"))


def test_the_tile_counts_open_incidents_links_them_and_drops_snoozed_ones(ops_client, ledger_admin, clock):
    tag, content = _tile(ops_client.get("/admin/").content.decode())
    assert '<div class="lh-stat-value">0</div>' in content
    assert "lh-stat-alert" not in tag
    assert "lh-stat-warn" not in tag
    assert f'href="{INCIDENTS}?status__exact=open"' in tag

    reconcile, webhook = _open_two(clock)
    tag, content = _tile(ops_client.get("/admin/").content.decode())
    assert '<div class="lh-stat-value">2</div>' in content
    assert "lh-stat-alert" in tag  # nobody acknowledged them

    actor = Actor(user=ledger_admin)
    incident_acknowledge(incident=reconcile, actor=actor)
    incident_acknowledge(incident=webhook, actor=actor)
    tag, content = _tile(ops_client.get("/admin/").content.decode())
    assert '<div class="lh-stat-value">2</div>' in content
    assert "lh-stat-warn" in tag
    assert "lh-stat-alert" not in tag

    incident_snooze(incident=webhook, actor=actor, seconds=3600)
    assert '<div class="lh-stat-value">1</div>' in _tile(ops_client.get("/admin/").content.decode())[1]
    clock.advance(3601)  # the snooze ends: counted again
    assert '<div class="lh-stat-value">2</div>' in _tile(ops_client.get("/admin/").content.decode())[1]

    # The link lands on the incidents page, which lists both.
    page = ops_client.get(f"{INCIDENTS}?status__exact=open").content.decode()
    assert "reconciliation failed or finished with errors" in page
    assert "failed 3 times in a row" in page

    ReconciliationRun.objects.create(started_at=clock.now(), status=RunStatus.SUCCEEDED)
    WebhookEndpoint.objects.update(consecutive_failures=0)
    incidents_check()  # resolves both
    assert '<div class="lh-stat-value">0</div>' in _tile(ops_client.get("/admin/").content.decode())[1]


def test_the_tile_is_shown_only_to_a_user_who_may_view_incidents(client, django_user_model, clock):
    _open_two(clock)
    blind = staff_with(django_user_model, "blind", "ledger.view_task")
    client.force_login(blind)
    assert 'id="lh-tile-incidents"' not in client.get("/admin/").content.decode()
    sighted = staff_with(django_user_model, "sighted", "insight.view_incident")
    client.force_login(sighted)
    assert '<div class="lh-stat-value">2</div>' in _tile(client.get("/admin/").content.decode())[1]
