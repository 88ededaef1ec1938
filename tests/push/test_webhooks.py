"""Webhooks (SPEC §18): delivery rows made in the event's transaction, signed POSTs to a real receiver, retries.

The receiver is a real http.server on loopback (tests/webhook_receiver.py)
that checks every signature; the delivery run is called in-process with the
fake clock, so backoff is walked without sleeping. The cluster delivering is
tests/push/test_webhook_cluster.py.
"""

from __future__ import annotations

import json
from datetime import timedelta

import pytest
from django.core.management import call_command
from django.db import connection, transaction
from django.test import override_settings
from django.test.utils import CaptureQueriesContext

from core.errors import ValidationFailed
from leases.services import lease_claim, task_update
from ledger.actors import SYSTEM, Actor
from ledger.models import Event, EventType
from ledger.services.events import event_append
from push.models import DeliveryStatus, WebhookDelivery, WebhookEndpoint
from push.secret_box import decrypt
from push.services.deliveries import BACKOFF_SECONDS, DISABLE_AFTER_FAILURES, MAX_TRIES, webhook_deliveries_run
from push.services.webhooks import delivery_redeliver, webhook_create, webhook_roll_secret, webhook_set_active
from tests.factories import AgentFactory, ProjectFactory, TaskFactory, WebhookEndpointFactory
from tests.webhook_receiver import running_receiver, signature_valid

pytestmark = pytest.mark.django_db


@pytest.fixture
def project():
    return ProjectFactory()


@pytest.fixture
def receiver():
    with running_receiver() as running:
        yield running


def subscribe(receiver, **options):
    endpoint = WebhookEndpointFactory(url=receiver.url, **options)
    receiver.secrets.append(decrypt(endpoint.secret))
    return endpoint


def test_a_matching_event_gets_a_delivery_row_in_its_own_transaction(clock, project):
    everything = WebhookEndpointFactory()
    this_project = WebhookEndpointFactory(project=project)
    other_project = WebhookEndpointFactory(project=ProjectFactory())
    claims_only = WebhookEndpointFactory(event_types=[EventType.ATTEMPT_CLAIMED])
    warnings = WebhookEndpointFactory(min_severity="warn")
    off = WebhookEndpointFactory()
    webhook_set_active(endpoint=off, active=False, actor=SYSTEM)
    WebhookDelivery.objects.all().update(status=DeliveryStatus.DEAD)  # the endpoints' own events
    agent = AgentFactory(projects=[project])
    grant = lease_claim(task=TaskFactory(project=project), agent=agent)
    claimed = Event.objects.get(type=EventType.ATTEMPT_CLAIMED, attempt_id=grant.attempt.pk)
    got = set(WebhookDelivery.objects.filter(event=claimed).values_list("endpoint_id", flat=True))
    assert got == {everything.pk, this_project.pk, claims_only.pk}
    row = WebhookDelivery.objects.get(event=claimed, endpoint=everything)
    assert (row.status, row.attempts, row.next_attempt_at) == (DeliveryStatus.PENDING, 0, claimed.created_at)
    task_update(
        task=grant.task,
        actor=Actor(agent=AgentFactory(projects=[project])),
        changes={"status": "blocked", "blocked_reason": "x"},
    )
    contested = Event.objects.get(type=EventType.TASK_CONTESTED)
    got = set(WebhookDelivery.objects.filter(event=contested).values_list("endpoint_id", flat=True))
    assert got == {everything.pk, this_project.pk, warnings.pk}
    assert other_project.pk not in got
    assert off.pk not in got


def test_a_rolled_back_event_leaves_no_delivery(project):
    WebhookEndpointFactory()
    before = WebhookDelivery.objects.count()
    seen_inside = []

    def append_then_fail():
        with transaction.atomic():
            event_append(type=EventType.TASK_UPDATED, actor=SYSTEM, at=project.created_at, project=project)
            seen_inside.append(WebhookDelivery.objects.count())
            raise RuntimeError("roll back")

    with pytest.raises(RuntimeError):
        append_then_fail()
    assert seen_inside == [before + 1]
    assert WebhookDelivery.objects.count() == before


def test_with_no_endpoint_the_event_path_issues_no_extra_statement(project):
    with CaptureQueriesContext(connection) as queries:
        event_append(type=EventType.TASK_UPDATED, actor=SYSTEM, at=project.created_at, project=project)
    assert len(queries) == 1  # the INSERT; the trigger runs inside it
    assert not WebhookDelivery.objects.exists()


def test_endpoint_input_is_validated(project):
    with pytest.raises(ValidationFailed, match="Unknown event type"):
        webhook_create(url="http://127.0.0.1:9/", event_types=["task.nonsense"], actor=SYSTEM)
    with pytest.raises(ValidationFailed, match="min_severity"):
        webhook_create(url="http://127.0.0.1:9/", min_severity="loud", actor=SYSTEM)
    with pytest.raises(ValidationFailed, match="format"):
        webhook_create(url="http://127.0.0.1:9/", format="xml", actor=SYSTEM)
    with pytest.raises(ValidationFailed, match="http"):
        webhook_create(url="ftp://example.com/", actor=SYSTEM)
    assert not WebhookEndpoint.objects.exists()


@override_settings(LEASEHOLD_WEBHOOK_ALLOW_PRIVATE=False)
@pytest.mark.parametrize(
    "url",
    ["http://127.0.0.1:8000/", "http://localhost/x", "http://10.1.2.3/", "http://169.254.169.254/", "http://[::1]/"],
)
def test_loopback_private_and_link_local_targets_are_refused(url):
    with pytest.raises(ValidationFailed, match="LEASEHOLD_WEBHOOK_ALLOW_PRIVATE"):
        webhook_create(url=url, actor=SYSTEM)


def test_the_secret_never_reaches_an_event(receiver):
    endpoint = subscribe(receiver)
    rolled, new = webhook_roll_secret(endpoint=endpoint, actor=SYSTEM)
    text = json.dumps(list(Event.objects.values_list("payload", flat=True)))
    assert receiver.secrets[0] not in text
    assert new not in text
    assert decrypt(rolled.secret) == new
    assert decrypt(rolled.previous_secret) == receiver.secrets[0]


def test_a_claim_reaches_the_receiver_signed_with_the_full_event(clock, project, receiver):
    subscribe(receiver, project=project, event_types=[EventType.ATTEMPT_CLAIMED])
    agent = AgentFactory(projects=[project])
    grant = lease_claim(task=TaskFactory(project=project), agent=agent)
    run = webhook_deliveries_run()
    assert (run.tries, run.delivered) == (1, 1)
    (got,) = receiver.requests
    assert got.valid
    assert got.headers["Leasehold-Event-Id"] == str(got.document["id"])
    assert got.headers["Leasehold-Signature"].startswith(f"t={int(clock.now().timestamp())},v1=")
    assert set(got.document) == {
        "id",
        "type",
        "severity",
        "project",
        "task",
        "attempt",
        "actor",
        "payload",
        "created_at",
    }
    assert got.document["type"] == EventType.ATTEMPT_CLAIMED
    assert (got.document["project"], got.document["task"]) == (project.slug, grant.task.key)
    assert (got.document["attempt"], got.document["actor"]) == (grant.attempt.pk, agent.handle)
    row = WebhookDelivery.objects.get(event_id=got.document["id"])
    assert (row.status, row.attempts, row.last_status_code) == (DeliveryStatus.DELIVERED, 1, 200)


def test_failing_three_times_then_succeeding_takes_exactly_four_tries(clock, project, receiver):
    subscribe(receiver, event_types=[EventType.TASK_CREATED])
    TaskFactory(project=project)
    receiver.fail_next(3)
    delivery = WebhookDelivery.objects.get(event__type=EventType.TASK_CREATED)
    for wait in (0, *BACKOFF_SECONDS[:3]):
        clock.advance(wait)
        webhook_deliveries_run()
        assert webhook_deliveries_run().tries == 0  # not due again before its backoff
    delivery.refresh_from_db()
    assert (delivery.status, delivery.attempts) == (DeliveryStatus.DELIVERED, 4)
    assert [r.answered for r in receiver.requests] == [500, 500, 500, 200]
    assert len({r.headers["Leasehold-Event-Id"] for r in receiver.requests}) == 1
    clock.advance(86400)
    assert webhook_deliveries_run().tries == 0


def test_a_receiver_down_for_good_ends_dead_after_eight_tries_over_a_day(clock, project, receiver):
    endpoint = subscribe(receiver, event_types=[EventType.TASK_CREATED])
    TaskFactory(project=project)
    receiver.fail_always = True
    start = clock.now()
    while (due := WebhookDelivery.objects.filter(status__in=["pending", "failed"]).first()) is not None:
        clock.freeze(max(due.next_attempt_at, clock.now()))
        webhook_deliveries_run()
    delivery = WebhookDelivery.objects.get()
    assert (delivery.status, delivery.attempts, delivery.last_status_code) == (DeliveryStatus.DEAD, MAX_TRIES, 503)
    assert MAX_TRIES == 8
    assert timedelta(hours=23) < delivery.last_attempt_at - start < timedelta(hours=25)
    endpoint.refresh_from_db()
    assert endpoint.is_active
    assert endpoint.consecutive_failures == 8


def test_twenty_failures_in_a_row_disable_the_endpoint_with_a_warn_event(clock, project, receiver):
    endpoint = subscribe(receiver, event_types=[EventType.TASK_CREATED])
    for _ in range(3):
        TaskFactory(project=project)
    receiver.fail_always = True
    for _ in range(100):
        if not WebhookEndpoint.objects.get(pk=endpoint.pk).is_active:
            break
        webhook_deliveries_run()
        due = WebhookDelivery.objects.filter(status__in=["pending", "failed"]).order_by("event_id").first()
        clock.freeze(max(due.next_attempt_at, clock.now()))
    endpoint.refresh_from_db()
    assert not endpoint.is_active
    assert len(receiver.requests) == DISABLE_AFTER_FAILURES
    statuses = list(WebhookDelivery.objects.order_by("event_id").values_list("status", "attempts"))
    assert statuses == [("dead", 8), ("dead", 8), ("failed", 4)]  # in event-id order, one head at a time
    disabled = Event.objects.get(type=EventType.WEBHOOK_DISABLED)
    assert disabled.severity == "warn"
    assert disabled.payload["endpoint"] == endpoint.pk
    clock.advance(86400)
    assert webhook_deliveries_run().tries == 0  # a disabled endpoint gets nothing
    receiver.fail_always = False
    webhook_set_active(endpoint=endpoint, active=True, actor=SYSTEM)
    webhook_deliveries_run()
    assert WebhookDelivery.objects.get(status__in=["delivered"]).attempts == 5


def test_a_warn_endpoint_gets_only_warnings(clock, project, receiver):
    subscribe(receiver, min_severity="warn")
    grant = lease_claim(task=TaskFactory(project=project), agent=AgentFactory(projects=[project]))
    task_update(
        task=grant.task,
        actor=Actor(agent=AgentFactory(projects=[project])),
        changes={"status": "blocked", "blocked_reason": "x"},
    )
    webhook_deliveries_run()
    assert receiver.requests
    assert all(r.document["severity"] in ("warn", "error") for r in receiver.requests)
    assert EventType.TASK_CONTESTED in [r.document["type"] for r in receiver.requests]


def test_deliveries_of_one_endpoint_go_in_event_id_order(clock, project, receiver):
    subscribe(receiver, event_types=[EventType.TASK_CREATED])
    for _ in range(5):
        TaskFactory(project=project)
    webhook_deliveries_run()
    ids = [r.document["id"] for r in receiver.requests]
    assert ids == sorted(ids)
    assert len(ids) == 5


def test_after_a_roll_both_secrets_sign_for_a_day(clock, project, receiver):
    endpoint = subscribe(receiver, event_types=[EventType.TASK_CREATED])
    old = receiver.secrets[0]
    _, new = webhook_roll_secret(endpoint=endpoint, actor=SYSTEM)
    TaskFactory(project=project)
    webhook_deliveries_run()
    header, body = receiver.requests[-1].headers["Leasehold-Signature"], receiver.requests[-1].body
    assert header.count("v1=") == 2
    assert signature_valid(header, body, old)
    assert signature_valid(header, body, new)
    clock.advance(86401)
    TaskFactory(project=project)
    webhook_deliveries_run()
    header, body = receiver.requests[-1].headers["Leasehold-Signature"], receiver.requests[-1].body
    assert header.count("v1=") == 1
    assert signature_valid(header, body, new)
    assert not signature_valid(header, body, old)


def test_slack_format_posts_one_line_with_the_task_key_and_an_admin_link(clock, project, receiver):
    subscribe(receiver, format="slack", event_types=[EventType.TASK_CREATED])
    task = TaskFactory(project=project)
    webhook_deliveries_run()
    text = receiver.requests[0].document["text"]
    assert "\n" not in text
    assert task.key in text
    assert EventType.TASK_CREATED in text
    assert f"/admin/ledger/task/{task.pk}/change/" in text


def test_redeliver_posts_a_delivered_event_again(clock, project, receiver):
    subscribe(receiver, event_types=[EventType.TASK_CREATED])
    TaskFactory(project=project)
    webhook_deliveries_run()
    delivery = WebhookDelivery.objects.get()
    assert delivery_redeliver(deliveries=[delivery], actor=SYSTEM) == 1
    webhook_deliveries_run()
    assert len(receiver.delivered()) == 2
    assert WebhookDelivery.objects.get().status == DeliveryStatus.DELIVERED


def test_create_webhook_prints_the_secret_alone_on_the_last_line(project, capsys):
    call_command(
        "create_webhook",
        "http://127.0.0.1:9/hook",
        "--project",
        project.slug,
        "--events",
        "attempt.claimed,finding.opened",
        "--min-severity",
        "warn",
        "--format",
        "slack",
    )
    lines = capsys.readouterr().out.strip().splitlines()
    endpoint = WebhookEndpoint.objects.get()
    assert lines[-1] == decrypt(endpoint.secret)
    assert lines[-1].startswith("lhwh_")
    assert lines[-1] not in "\n".join(lines[:-1])
    assert (endpoint.project, endpoint.event_types, endpoint.min_severity, endpoint.format) == (
        project,
        [EventType.ATTEMPT_CLAIMED, EventType.FINDING_OPENED],
        "warn",
        "slack",
    )


def test_events_about_an_endpoint_name_its_origin_never_its_path(project):
    """A Slack incoming-webhook URL is a credential: events reach agents, the feed, webhooks and exports."""
    secret_path = "/services/T0000/B0000/XXXXXXXXXXXXXXXXXXXXXXXX"
    endpoint, _ = webhook_create(url="http://127.0.0.1:9" + secret_path, project=project, actor=SYSTEM)
    webhook_set_active(endpoint=endpoint, active=False, actor=SYSTEM)
    payloads = [event.payload for event in Event.objects.filter(type__startswith="webhook.")]
    assert len(payloads) == 2
    assert {payload["url"] for payload in payloads} == {"http://127.0.0.1:9/…"}
    assert not any("XXXX" in json.dumps(payload) for payload in payloads)
