"""Issue 32: a webhook's signing secret is never in a message, cookie, header or log.

It is shown once on a `no-store` page (like an agent's token), with a copy
button; rolling it is confirmed first and audited (LogEntry); disable, enable
and redeliver write a LogEntry too; the deliveries list is never counted.
"""

from __future__ import annotations

import pytest
from django.contrib.admin.models import LogEntry
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.urls import reverse

from ledger.actors import SYSTEM
from ledger.models import EventType
from push.models import DeliveryStatus, WebhookDelivery, WebhookEndpoint
from push.secret_box import decrypt
from push.services.webhooks import webhook_set_active
from tests.factories import TaskFactory, WebhookEndpointFactory

pytestmark = pytest.mark.django_db

ENDPOINTS = "/admin/push/webhookendpoint/"


def assert_nowhere_but_the_body(client, response, secret: str) -> None:
    """The secret is in the page's body only: no header, no cookie set or kept, and the page is not cached."""
    assert secret in response.content.decode()
    assert "no-store" in response["Cache-Control"]
    for name, value in response.items():
        assert secret not in value, name
    for jar in (response.cookies, client.cookies):
        for morsel in jar.values():
            assert secret not in morsel.value, morsel.key
            assert secret not in morsel.OutputString()
    # Nor on the next page the user opens (a message queued for later would show there).
    following = client.get(ENDPOINTS)
    assert secret not in following.content.decode()
    for morsel in client.cookies.values():
        assert secret not in morsel.value


def test_adding_an_endpoint_shows_the_secret_once_on_a_no_store_page_and_in_no_cookie(ops_client, fleet):
    response = ops_client.post(
        reverse("admin:push_webhookendpoint_add"),
        {"url": "http://127.0.0.1:9/hook", "min_severity": "info", "format": "json"},
    )
    endpoint = WebhookEndpoint.objects.get()
    secret = decrypt(endpoint.secret)
    assert response.status_code == 200
    assert_nowhere_but_the_body(ops_client, response, secret)
    body = response.content.decode()
    assert 'data-copy="lh-secret-' in body  # the copy button
    log = LogEntry.objects.get(object_id=str(endpoint.pk), content_type__model="webhookendpoint")
    assert secret not in log.change_message


def test_rolling_the_secret_is_confirmed_first_then_shown_once_and_audited(ops_client):
    endpoint = WebhookEndpointFactory()
    before = endpoint.secret
    data = {"action": "roll_secret", "_selected_action": [endpoint.pk]}
    confirm = ops_client.post(ENDPOINTS, data)
    assert confirm.status_code == 200
    assert "Roll the signing secret" in confirm.content.decode()
    endpoint.refresh_from_db()
    assert endpoint.secret == before, "nothing is rolled before the confirmation"
    assert not LogEntry.objects.exists()

    response = ops_client.post(ENDPOINTS, {**data, "post": "yes"})
    assert response.status_code == 200
    endpoint.refresh_from_db()
    assert endpoint.secret != before
    secret = decrypt(endpoint.secret)
    assert_nowhere_but_the_body(ops_client, response, secret)
    log = LogEntry.objects.get(object_id=str(endpoint.pk))
    assert "Rolled the signing secret" in log.change_message
    assert secret not in log.change_message


def test_disable_enable_and_redeliver_write_a_log_entry(ops_client, fleet):
    endpoint = WebhookEndpointFactory(event_types=[EventType.TASK_CREATED])
    ops_client.post(ENDPOINTS, {"action": "disable", "_selected_action": [endpoint.pk]})
    ops_client.post(ENDPOINTS, {"action": "enable", "_selected_action": [endpoint.pk]})
    messages = list(
        LogEntry.objects.filter(object_id=str(endpoint.pk)).order_by("id").values_list("change_message", flat=True)
    )
    assert messages == ["Disabled the endpoint.", "Enabled the endpoint (failure streak cleared)."]

    TaskFactory(project=fleet.project)
    delivery = WebhookDelivery.objects.get(endpoint=endpoint)
    WebhookDelivery.objects.filter(pk=delivery.pk).update(status=DeliveryStatus.DEAD, attempts=8)
    ops_client.post(
        reverse("admin:push_webhookdelivery_changelist"), {"action": "redeliver", "_selected_action": [delivery.pk]}
    )
    log = LogEntry.objects.get(object_id=str(delivery.pk), content_type__model="webhookdelivery")
    assert "Redelivered" in log.change_message


def test_disabling_an_endpoint_already_disabled_logs_nothing(ops_client):
    endpoint = WebhookEndpointFactory()
    webhook_set_active(endpoint=endpoint, active=False, actor=SYSTEM)
    ops_client.post(ENDPOINTS, {"action": "disable", "_selected_action": [endpoint.pk]})
    assert not LogEntry.objects.exists()


def test_the_deliveries_list_never_counts_its_table(ops_client, fleet):
    WebhookEndpointFactory(event_types=[EventType.TASK_CREATED])
    for _ in range(3):
        TaskFactory(project=fleet.project)
    with CaptureQueriesContext(connection) as queries:
        response = ops_client.get(reverse("admin:push_webhookdelivery_changelist"))
    assert response.status_code == 200
    counted = [q["sql"] for q in queries.captured_queries if "COUNT(" in q["sql"].upper() and "webhook" in q["sql"]]
    assert counted == []
    assert "3 webhook deliveries" in response.content.decode()


def test_an_uncounted_list_says_more_than_never_an_estimate_as_the_total(ops_client, fleet, settings):
    from console.fleet.attempts import AttemptAdmin
    from leases.services import lease_claim

    for number in range(7):
        task = TaskFactory(project=fleet.project, title=f"t{number}")
        lease_claim(task=task, agent=fleet.other if number % 2 else fleet.holder)
    AttemptAdmin.list_per_page, per_page = 1, AttemptAdmin.list_per_page
    try:
        body = ops_client.get(reverse("admin:leases_attempt_changelist")).content.decode()
    finally:
        AttemptAdmin.list_per_page = per_page
    # 8 attempts, one a page, five pages looked ahead: "more than 5", never "6 attempts".
    assert "More than 5 attempts" in body
    assert "6 attempts" not in body
    assert "Select all 6" not in body
