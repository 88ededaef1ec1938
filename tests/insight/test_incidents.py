"""Alerts as incidents: one per rule and subject, opened and resolved by the check, notified once, snoozable."""

from __future__ import annotations

from datetime import timedelta

import pytest

from insight.jobs import check_incidents_job
from insight.models import Incident, IncidentRule, IncidentStatus
from insight.models.job_heartbeat import JobName
from insight.services.incidents import incident_acknowledge, incident_assign, incident_snooze, incidents_check
from insight.services.job_heartbeat import job_started
from leases.services import lease_claim
from ledger.actors import SYSTEM, Actor
from ledger.models import Event, EventType
from ledger.services import agent_heartbeat
from push.models import WebhookDelivery
from push.services.webhooks import webhook_create
from reconciliation.models import ReconciliationRun, RunStatus
from tests.factories import AgentFactory, ProjectFactory, TaskFactory

pytestmark = pytest.mark.django_db

SILENCE = 600


def _incident_events(kind: str) -> int:
    return Event.objects.filter(type=kind).count()


@pytest.fixture
def silent_fleet(clock, settings):
    settings.LEASEHOLD_AGENT_SILENCE_SECONDS = SILENCE
    project = ProjectFactory(slug="web")
    agent = AgentFactory(handle="worker-1", projects=[project])
    endpoint, _ = webhook_create(
        url="https://hooks.example.com/in", actor=SYSTEM, event_types=[EventType.INCIDENT_OPENED]
    )
    agent_heartbeat(agent=agent)
    lease_claim(task=TaskFactory(project=project), agent=agent, lease_seconds=3600)
    return project, agent, endpoint


def test_a_silent_agent_opens_one_incident_notified_once_snoozed_and_resolved_when_it_returns(
    clock, silent_fleet, django_user_model
):
    _, agent, endpoint = silent_fleet
    assert incidents_check().opened == 0  # heard from just now
    clock.advance(SILENCE + 60)
    first = incidents_check()
    assert first.opened == 1
    incident = Incident.objects.get()
    assert (incident.rule, incident.subject, incident.status) == (
        IncidentRule.AGENT_SILENT,
        "agent:worker-1",
        IncidentStatus.OPEN,
    )
    # Still silent, minute after minute: the same incident, no second notification.
    for _ in range(3):
        clock.advance(60)
        assert incidents_check().opened == 0
    assert Incident.objects.count() == 1
    assert _incident_events(EventType.INCIDENT_OPENED) == 1
    assert WebhookDelivery.objects.filter(endpoint=endpoint).count() == 1
    person = django_user_model.objects.create_user(username="oncall", password="pw-for-tests")
    actor = Actor(user=person)
    assert incident_acknowledge(incident=incident, actor=actor)
    assert not incident_acknowledge(incident=incident, actor=actor)  # the first acknowledgement stands
    incident_assign(incident=incident, assignee=person, actor=actor)
    until = incident_snooze(incident=incident, actor=actor, seconds=3600)
    assert until == clock.now() + timedelta(hours=1)
    # The agent returns: resolved, one `incident.resolved`.
    agent_heartbeat(agent=agent)
    assert incidents_check().resolved == 1
    incident.refresh_from_db()
    assert incident.status == IncidentStatus.RESOLVED
    assert incident.resolved_at == clock.now()
    assert incident.assignee == person
    assert _incident_events(EventType.INCIDENT_RESOLVED) == 1
    # It goes silent again within the snooze: a new incident, opened without a notification.
    clock.advance(SILENCE + 60)
    assert incidents_check().opened == 1
    again = Incident.objects.get(status=IncidentStatus.OPEN)
    assert not again.notified
    assert _incident_events(EventType.INCIDENT_OPENED) == 1
    assert WebhookDelivery.objects.filter(endpoint=endpoint).count() == 1


def test_the_job_records_its_run_and_an_agent_holding_nothing_is_no_incident(clock, settings):
    settings.LEASEHOLD_AGENT_SILENCE_SECONDS = SILENCE
    agent = AgentFactory(handle="idle")
    agent_heartbeat(agent=agent)
    clock.advance(SILENCE * 10)
    check = check_incidents_job()
    assert check.as_dict() == {"opened": 0, "resolved": 0, "open": 0}


def test_reconciliation_partial_three_times_is_one_incident_and_a_success_resolves_it(clock):
    for _ in range(3):
        ReconciliationRun.objects.create(started_at=clock.now(), status=RunStatus.PARTIAL)
    incidents_check()
    assert list(Incident.objects.values_list("rule", "subject")) == [
        (IncidentRule.RECONCILIATION_PARTIAL, "job:reconcile")
    ]
    ReconciliationRun.objects.create(started_at=clock.now(), status=RunStatus.SUCCEEDED)
    assert incidents_check().resolved == 1


def test_a_job_killed_at_its_timeout_is_an_incident(clock):
    job_started(name=JobName.SWEEP)
    clock.advance(240 + 61)
    job_started(name=JobName.QUEUE_WAIT)  # the other jobs still run
    incidents_check()
    subjects = set(Incident.objects.filter(rule=IncidentRule.JOB_FAILING).values_list("subject", flat=True))
    assert "job:sweep_expired" in subjects
    assert "job:check_queue_wait" not in subjects


def test_snoozes_are_bounded(clock, django_user_model):
    from core.errors import ValidationFailed

    for _ in range(3):
        ReconciliationRun.objects.create(started_at=clock.now(), status=RunStatus.FAILED)
    incidents_check()
    incident = Incident.objects.get()
    person = django_user_model.objects.create_user(username="oncall", password="pw-for-tests")
    with pytest.raises(ValidationFailed):
        incident_snooze(incident=incident, actor=Actor(user=person), seconds=31 * 24 * 3600)
    with pytest.raises(ValidationFailed):
        incident_snooze(incident=incident, actor=SYSTEM, seconds=60)
