"""The webhooks admin (SPEC §18): add shows the secret once, pages never show it, redeliver queues a delivery again."""

from __future__ import annotations

import pytest
from django.urls import reverse

from ledger.models import EventType
from push.models import DeliveryStatus, WebhookDelivery, WebhookEndpoint
from push.secret_box import decrypt
from tests.factories import TaskFactory, WebhookEndpointFactory

pytestmark = pytest.mark.django_db


def test_adding_an_endpoint_shows_its_secret_once_and_never_again(ops_client, fleet):
    response = ops_client.post(
        reverse("admin:push_webhookendpoint_add"),
        {
            "url": "http://127.0.0.1:9/hook",
            "project": fleet.project.pk,
            "event_types": [EventType.ATTEMPT_CLAIMED],
            "min_severity": "warn",
            "format": "json",
        },
        follow=True,
    )
    endpoint = WebhookEndpoint.objects.get()
    secret = decrypt(endpoint.secret)
    assert secret.encode() in response.content
    assert (endpoint.event_types, endpoint.min_severity) == ([EventType.ATTEMPT_CLAIMED], "warn")
    for url in (
        reverse("admin:push_webhookendpoint_changelist"),
        reverse("admin:push_webhookendpoint_change", args=[endpoint.pk]),
        reverse("admin:ledger_event_changelist"),
    ):
        page = ops_client.get(url)
        assert page.status_code == 200
        assert secret.encode() not in page.content


def test_a_refused_target_is_a_form_error_not_a_500(ops_client, settings):
    settings.LEASEHOLD_WEBHOOK_ALLOW_PRIVATE = False
    response = ops_client.post(
        reverse("admin:push_webhookendpoint_add"),
        {"url": "http://127.0.0.1:9/hook", "min_severity": "info", "format": "json"},
    )
    assert response.status_code == 200
    assert b"LEASEHOLD_WEBHOOK_ALLOW_PRIVATE" in response.content
    assert not WebhookEndpoint.objects.exists()


def test_a_url_with_a_control_character_is_a_form_error_not_an_endpoint(ops_client):
    """A DEL passes the form's URLField but not the HTTP client that would post to it."""
    response = ops_client.post(
        reverse("admin:push_webhookendpoint_add"),
        {"url": "http://127.0.0.1:9/ho\x7fok", "min_severity": "info", "format": "json"},
    )
    assert response.status_code == 200
    assert b"not a valid URL" in response.content
    assert not WebhookEndpoint.objects.exists()


def test_redeliver_from_the_deliveries_log(ops_client, fleet):
    endpoint = WebhookEndpointFactory(event_types=[EventType.TASK_CREATED])
    TaskFactory(project=fleet.project)
    delivery = WebhookDelivery.objects.get(endpoint=endpoint)
    WebhookDelivery.objects.filter(pk=delivery.pk).update(status=DeliveryStatus.DEAD, attempts=8)
    assert ops_client.get(reverse("admin:push_webhookdelivery_change", args=[delivery.pk])).status_code == 200
    response = ops_client.post(
        reverse("admin:push_webhookdelivery_changelist"),
        {"action": "redeliver", "_selected_action": [delivery.pk]},
        follow=True,
    )
    assert b"Queued 1 delivery again" in response.content
    delivery.refresh_from_db()
    assert (delivery.status, delivery.attempts) == (DeliveryStatus.PENDING, 0)


def test_managers_see_the_log_but_cannot_add(manager_client):
    assert manager_client.get(reverse("admin:push_webhookdelivery_changelist")).status_code == 200
    assert manager_client.get(reverse("admin:push_webhookendpoint_add")).status_code == 403
