"""Alerts as incidents: one per rule and subject, opened and resolved by the check, notified once, snoozable."""

from __future__ import annotations

from datetime import timedelta
from typing import cast

import pytest

from insight.jobs import check_incidents_job
from insight.models import Incident, IncidentRule, IncidentStatus
from insight.models.job_heartbeat import JobName
from insight.services.incidents import incident_acknowledge, incident_assign, incident_snooze, incidents_check
from insight.services.job_heartbeat import job_started
from leases.services import lease_claim
from ledger.actors import SYSTEM, Actor
from ledger.models import Event, EventType, Task, TaskStatus
from ledger.services import agent_heartbeat
from push.models import WebhookDelivery, WebhookEndpoint
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


def _open_rules() -> set[tuple[str, str]]:
    return set(Incident.objects.filter(status=IncidentStatus.OPEN).values_list("rule", "subject"))


def test_the_thresholds_are_settings_and_a_changed_one_changes_what_opens(clock, settings):
    """`LEASEHOLD_INCIDENT_*` decide the rules (docs/admin.md): the same state opens, or does not, by them."""
    project = ProjectFactory(slug="web")
    endpoint, _ = webhook_create(url="https://hooks.example.com/in", actor=SYSTEM)
    WebhookEndpoint.objects.filter(pk=endpoint.pk).update(consecutive_failures=4)
    for _ in range(2):
        ReconciliationRun.objects.create(started_at=clock.now(), status=RunStatus.FAILED)
    task = TaskFactory(project=project)
    Task.objects.filter(pk=task.pk).update(
        status=TaskStatus.DELIVERED, delivered_commit="a" * 40, delivered_at=clock.now()
    )
    clock.advance(20 * 60)
    webhook = (IncidentRule.WEBHOOK_FAILING, f"webhook:{endpoint.pk}")
    reconcile = (IncidentRule.RECONCILIATION_PARTIAL, "job:reconcile")
    landing = (IncidentRule.LANDING_STUCK, "project:web")

    # The defaults: 3 runs, 3 failures, 30 minutes. Four failures hold; two runs and 20 minutes do not.
    assert settings.LEASEHOLD_INCIDENT_WEBHOOK_FAILURES == 3
    incidents_check()
    assert _open_rules() == {webhook}

    # Stricter: 2 runs and 15 minutes hold as well; 5 failures no longer do (resolved).
    settings.LEASEHOLD_INCIDENT_WEBHOOK_FAILURES = 5
    settings.LEASEHOLD_INCIDENT_RECONCILIATION_RUNS = 2
    settings.LEASEHOLD_INCIDENT_LANDING_STUCK_MINUTES = 15
    check = incidents_check()
    assert (check.opened, check.resolved) == (2, 1)
    assert _open_rules() == {reconcile, landing}
    assert "2 times in a row" in Incident.objects.get(rule=IncidentRule.RECONCILIATION_PARTIAL).title
    assert "15 min" in Incident.objects.get(rule=IncidentRule.LANDING_STUCK).title

    # Laxer again: nothing holds.
    settings.LEASEHOLD_INCIDENT_RECONCILIATION_RUNS = 3
    settings.LEASEHOLD_INCIDENT_LANDING_STUCK_MINUTES = 60
    assert incidents_check().resolved == 2
    assert _open_rules() == set()


def test_a_queue_wait_incident_counts_the_waiting_up_to_a_bound(clock, monkeypatch):
    """Issue 33: the check counts a project's waiting tasks up to WAITING_COUNTED, not its whole backlog, and
    says when it stopped counting."""
    from insight import incidents as rules

    monkeypatch.setattr(rules, "WAITING_COUNTED", 3)
    project = ProjectFactory(slug="web", queue_wait_max_seconds=60)
    for _ in range(3):
        TaskFactory(project=project)
    clock.advance(120)

    def detail():
        incidents_check()
        return Incident.objects.get(rule=IncidentRule.QUEUE_WAIT, subject="project:web").detail

    assert detail() == {"waited_seconds": 120, "waiting": 3}
    late = cast(Task, TaskFactory(project=project))
    Task.objects.filter(pk=late.pk).update(ready_since=clock.now() - timedelta(seconds=100))
    assert detail() == {"waited_seconds": 120, "waiting": 3, "waiting_more": True}


def test_the_waiting_count_walks_the_ready_since_index_longest_waiting_first(clock):
    """Stop 43: counted unordered, PostgreSQL read 800,000 task rows by a sequential scan to count 1,001 of a
    project's waiting tasks at 1M (it expected them early and met them late); counted longest waiting
    first, the count walks `task_ready_since` (project, ready_since; ready tasks) and stops at its bound."""
    from django.db import connection
    from django.test.utils import CaptureQueriesContext

    project = ProjectFactory(slug="web", queue_wait_max_seconds=60)
    for _ in range(3):
        TaskFactory(project=project)
    clock.advance(120)
    with CaptureQueriesContext(connection) as captured:
        incidents_check()
    [count] = [q["sql"] for q in captured.captured_queries if q["sql"].startswith("SELECT COUNT(*) FROM (SELECT")]
    assert 'ORDER BY "ledger_task"."ready_since" ASC' in count
    assert "LIMIT 1001" in count
    if connection.vendor != "postgresql":
        return
    with connection.cursor() as cursor:
        # A test table is tiny (a sequential scan is cheaper than any walk): ask which index serves the order.
        cursor.execute("SET enable_seqscan = off; SET enable_sort = off")
        cursor.execute("EXPLAIN " + count)
        plan = "\n".join(row[0] for row in cursor.fetchall())
        cursor.execute("RESET enable_seqscan; RESET enable_sort")
    assert "task_ready_since" in plan or "task_queue_wait_unalerted" in plan, plan
