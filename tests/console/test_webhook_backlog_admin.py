"""Webhooks at scale in the console (issue 32): each endpoint's backlog on its row (one grouped query for
the list) and page; a disabled endpoint's backlog dropped (marked dead) after a confirmation, audited;
"Send test" queues one test delivery."""

from __future__ import annotations

import pytest
from django.contrib.admin.models import LogEntry
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.urls import reverse

from ledger.actors import SYSTEM
from ledger.models import EventType
from push.models import DeliveryStatus, WebhookDelivery
from push.services.webhooks import webhook_set_active
from tests.factories import TaskFactory, WebhookEndpointFactory

pytestmark = pytest.mark.django_db

ENDPOINTS = "/admin/push/webhookendpoint/"


def backlog_queries(queries) -> list[str]:
    return [q["sql"] for q in queries.captured_queries if "ledger_webhookdelivery" in q["sql"]]


def test_each_row_shows_its_backlog_from_one_grouped_query(ops_client, fleet, clock):
    endpoints = [WebhookEndpointFactory(event_types=[EventType.TASK_CREATED]) for _ in range(4)]
    TaskFactory(project=fleet.project)
    clock.advance(600)
    TaskFactory(project=fleet.project)
    with CaptureQueriesContext(connection) as queries:
        response = ops_client.get(ENDPOINTS)
    assert response.status_code == 200
    body = response.content.decode()
    assert len(backlog_queries(queries)) == 1, backlog_queries(queries)
    for header in ("pending", "oldest pending", "last delivered", "lag"):
        assert f">{header}<" in body.lower() or f">{header}</a>" in body.lower(), header
    assert body.count('class="lh-backlog">2<') == len(endpoints)
    assert "10m 00s" in body  # the lag: the oldest open delivery is ten minutes old


def test_the_endpoint_page_shows_its_backlog(ops_client, fleet):
    endpoint = WebhookEndpointFactory(event_types=[EventType.TASK_CREATED])
    TaskFactory(project=fleet.project)
    body = ops_client.get(reverse("admin:push_webhookendpoint_change", args=[endpoint.pk])).content.decode()
    assert 'class="lh-backlog">1<' in body
    assert "Last delivered" in body


def test_dropping_a_disabled_endpoints_backlog_is_confirmed_audited_and_keeps_the_rows(ops_client, fleet):
    endpoint = WebhookEndpointFactory(event_types=[EventType.TASK_CREATED])
    active = WebhookEndpointFactory(event_types=[EventType.TASK_CREATED])
    for _ in range(2):
        TaskFactory(project=fleet.project)
    webhook_set_active(endpoint=endpoint, active=False, actor=SYSTEM)
    data = {"action": "drop_backlog", "_selected_action": [endpoint.pk, active.pk]}

    confirm = ops_client.post(ENDPOINTS, data)
    assert confirm.status_code == 200
    assert "Drop the backlog" in confirm.content.decode()
    assert not WebhookDelivery.objects.filter(status=DeliveryStatus.DEAD).exists()

    ops_client.post(ENDPOINTS, {**data, "post": "yes"})
    assert WebhookDelivery.objects.filter(endpoint=endpoint).count() == 2
    assert set(WebhookDelivery.objects.filter(endpoint=endpoint).values_list("status", flat=True)) == {"dead"}
    assert set(WebhookDelivery.objects.filter(endpoint=active).values_list("status", flat=True)) == {"pending"}
    log = LogEntry.objects.get(object_id=str(endpoint.pk), content_type__model="webhookendpoint")
    assert "Dropped the backlog: 2 deliveries marked dead" in log.change_message
    assert not LogEntry.objects.filter(object_id=str(active.pk), content_type__model="webhookendpoint").exists()


def test_send_test_queues_one_test_delivery_and_is_audited(ops_client):
    endpoint = WebhookEndpointFactory()
    other = WebhookEndpointFactory()
    response = ops_client.post(ENDPOINTS, {"action": "send_test", "_selected_action": [endpoint.pk]}, follow=True)
    assert response.status_code == 200
    tests = WebhookDelivery.objects.filter(event__type=EventType.WEBHOOK_TEST)
    assert list(tests.values_list("endpoint_id", flat=True)) == [endpoint.pk]
    assert not tests.filter(endpoint=other).exists()
    log = LogEntry.objects.get(object_id=str(endpoint.pk), content_type__model="webhookendpoint")
    assert "test delivery" in log.change_message


def test_a_manager_is_offered_neither_lever(manager_client):
    WebhookEndpointFactory()
    body = manager_client.get(ENDPOINTS).content.decode()
    assert "drop_backlog" not in body
    assert "send_test" not in body
