"""Webhooks at scale (issue 32): an endpoint's backlog read in one grouped query, a disabled endpoint's
backlog marked dead (rows kept, never deleted), and a test delivery queued for one endpoint only."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

from core.errors import ValidationFailed
from ledger.actors import SYSTEM
from ledger.models import Event, EventType
from push.models import DeliveryStatus, WebhookDelivery
from push.secret_box import decrypt
from push.selectors import endpoint_backlogs
from push.services.deliveries import webhook_deliveries_run
from push.services.webhooks import webhook_backlog_drop, webhook_send_test, webhook_set_active
from tests.factories import ProjectFactory, TaskFactory, WebhookEndpointFactory
from tests.webhook_receiver import running_receiver

pytestmark = pytest.mark.django_db


def test_backlogs_of_many_endpoints_are_read_in_one_query(clock):
    project = ProjectFactory()
    busy = WebhookEndpointFactory(event_types=[EventType.TASK_CREATED])
    idle = WebhookEndpointFactory(event_types=[EventType.TASK_LANDED])
    first_at = clock.now()
    TaskFactory(project=project)
    clock.advance(300)
    TaskFactory(project=project)
    clock.advance(300)
    first = WebhookDelivery.objects.filter(endpoint=busy).order_by("id").first()
    WebhookDelivery.objects.filter(pk=first.pk).update(status=DeliveryStatus.DELIVERED, delivered_at=clock.now())

    with CaptureQueriesContext(connection) as queries:
        backlogs = endpoint_backlogs([busy, idle], now=clock.now())
    assert len(queries.captured_queries) == 1
    assert backlogs[busy.pk].pending == 1
    assert backlogs[busy.pk].oldest_pending_at == first_at + timedelta(minutes=5)
    assert backlogs[busy.pk].lag == timedelta(minutes=5)
    assert backlogs[idle.pk].pending == 0
    assert backlogs[idle.pk].oldest_pending_at is None
    assert backlogs[idle.pk].lag is None


def test_last_delivered_is_kept_on_the_endpoint_by_the_delivery_run(clock):
    project = ProjectFactory()
    with running_receiver() as receiver:
        endpoint = WebhookEndpointFactory(url=receiver.url, event_types=[EventType.TASK_CREATED])
        receiver.secrets.append(decrypt(endpoint.secret))
        TaskFactory(project=project)
        webhook_deliveries_run()
    endpoint.refresh_from_db()
    assert endpoint.last_delivered_at == clock.now()
    assert endpoint_backlogs([endpoint], now=clock.now())[endpoint.pk].last_delivered_at == clock.now()


def test_a_disabled_endpoints_backlog_is_marked_dead_and_kept(clock):
    project = ProjectFactory()
    endpoint = WebhookEndpointFactory(event_types=[EventType.TASK_CREATED])
    other = WebhookEndpointFactory(event_types=[EventType.TASK_CREATED])
    for _ in range(3):
        TaskFactory(project=project)
    with pytest.raises(ValidationFailed):
        webhook_backlog_drop(endpoint=endpoint, actor=SYSTEM)  # still active: disable it first
    webhook_set_active(endpoint=endpoint, active=False, actor=SYSTEM)

    dropped = webhook_backlog_drop(endpoint=endpoint, actor=SYSTEM)

    assert dropped == 3
    rows = WebhookDelivery.objects.filter(endpoint=endpoint)
    assert rows.count() == 3, "never deleted"
    assert set(rows.values_list("status", flat=True)) == {DeliveryStatus.DEAD}
    assert all("dropped" in error for error in rows.values_list("last_error", flat=True))
    assert WebhookDelivery.objects.filter(endpoint=other, status=DeliveryStatus.PENDING).count() == 3
    event = Event.objects.filter(type=EventType.WEBHOOK_BACKLOG_DROPPED).get()
    assert event.payload["endpoint"] == endpoint.pk
    assert event.payload["count"] == 3
    assert webhook_backlog_drop(endpoint=endpoint, actor=SYSTEM) == 0


def test_send_test_queues_one_delivery_for_that_endpoint_only(clock):
    endpoint = WebhookEndpointFactory()
    every_event = WebhookEndpointFactory()  # subscribed to every type of every project

    delivery = webhook_send_test(endpoint=endpoint, actor=SYSTEM)

    assert delivery.endpoint_id == endpoint.pk
    assert delivery.status == DeliveryStatus.PENDING
    assert delivery.event.type == EventType.WEBHOOK_TEST
    assert WebhookDelivery.objects.filter(event=delivery.event).count() == 1
    assert not WebhookDelivery.objects.filter(endpoint=every_event, event=delivery.event).exists()


def test_a_test_delivery_is_posted_signed_by_the_run(clock):
    with running_receiver() as receiver:
        endpoint = WebhookEndpointFactory(url=receiver.url)
        receiver.secrets.append(decrypt(endpoint.secret))
        webhook_send_test(endpoint=endpoint, actor=SYSTEM)
        webhook_deliveries_run()
        types = [received.document["type"] for received in receiver.delivered()]
    assert types == [EventType.WEBHOOK_CREATED, EventType.WEBHOOK_TEST]  # its own creation, then the test
