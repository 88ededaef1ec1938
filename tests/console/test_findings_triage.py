"""Triage on the findings pages: open by default, the remedy, the fitting action buttons, acknowledge, resolve."""

from __future__ import annotations

import pytest
from django.contrib.admin.models import LogEntry
from django.utils.html import escape

from environments.models import EnvironmentStatus
from leases.services import attempt_release, lease_claim
from ledger.models import Event, EventType
from reconciliation.models import AttemptDiscard, Condition, FindingStatus, SubjectType
from reconciliation.remedies import REMEDIES
from tests.factories import AgentFactory, EnvironmentFactory, FindingFactory, ProjectFactory, TaskFactory
from tests.leases.helpers import proof_of

pytestmark = pytest.mark.django_db


@pytest.fixture
def world(clock):
    web = ProjectFactory(slug="web")
    agent = AgentFactory(handle="agent-07", projects=[web])
    task = TaskFactory(project=web, title="Silent holder's task")
    grant = lease_claim(task=task, agent=agent, branch="feature/silent")
    dead = FindingFactory(
        project=web,
        condition=Condition.LIVE_LEASE_DEAD_AGENT,
        subject_type=SubjectType.ATTEMPT,
        subject_key=str(grant.attempt.pk),
        attempt=grant.attempt,
        task=task,
    )
    environment = EnvironmentFactory(project=web, name="preview-1", kind="database")
    leaked = FindingFactory(
        project=web,
        condition=Condition.LEAKED_ENVIRONMENT,
        subject_type=SubjectType.ENVIRONMENT,
        subject_key="preview-1",
        environment=environment,
    )
    old = FindingFactory(project=web, condition=Condition.ORPHAN_BRANCH, subject_key="lh/old")
    old.status = FindingStatus.RESOLVED
    old.resolved_at = clock.now()
    old.save()
    return web, agent, task, grant, dead, leaked, environment, old


def test_the_list_shows_open_findings_by_default(ops_client, world):
    *_, dead, _, _, old = world
    body = ops_client.get("/admin/reconciliation/finding/").content.decode()
    assert f'href="/admin/reconciliation/finding/{dead.pk}/change/' in body
    assert f'href="/admin/reconciliation/finding/{old.pk}/change/' not in body
    everything = ops_client.get("/admin/reconciliation/finding/?status__exact=all").content.decode()
    assert f'href="/admin/reconciliation/finding/{old.pk}/change/' in everything


def test_the_list_names_the_task_of_an_attempt_finding(ops_client, world):
    _, _, task, *_ = world
    body = ops_client.get("/admin/reconciliation/finding/").content.decode()
    assert task.key in body
    assert "Silent holder&#x27;s task" in body


def test_a_finding_page_shows_its_remedy_and_the_force_release_button(ops_client, world):
    _, _, task, _, dead, *_ = world
    body = ops_client.get(f"/admin/reconciliation/finding/{dead.pk}/change/").content.decode()
    assert escape(REMEDIES[Condition.LIVE_LEASE_DEAD_AGENT]) in body
    assert f'href="/admin/ledger/task/{task.pk}/force-release/"' in body
    assert 'id="lh-triage-open-task"' in body
    confirm = ops_client.get(f"/admin/ledger/task/{task.pk}/force-release/").content.decode()
    assert "I have confirmed the agent process is gone" in confirm


def test_environment_buttons_post_the_environment_actions(ops_client, world):
    *_, leaked, environment, _ = world
    body = ops_client.get(f"/admin/reconciliation/finding/{leaked.pk}/change/").content.decode()
    assert 'id="lh-triage-quarantine"' in body
    assert 'id="lh-triage-release-environment"' in body
    page = ops_client.post(
        "/admin/environments/environment/",
        {"action": "quarantine", "_selected_action": [environment.pk], "index": "0"},
    )
    assert "Quarantine 1 environment" in page.content.decode()
    ops_client.post(
        "/admin/environments/environment/",
        {"action": "quarantine", "_selected_action": [environment.pk], "post": "yes", "reason": "leaked"},
    )
    environment.refresh_from_db()
    assert environment.status == EnvironmentStatus.QUARANTINED


def test_acknowledge_with_owner_and_note_then_resolve_with_a_note(ops_client, world):
    *_, dead, _, _, _ = world
    ops_client.post(
        f"/admin/reconciliation/finding/{dead.pk}/acknowledge/", {"owner": "maria", "note": "paging the host"}
    )
    dead.refresh_from_db()
    assert dead.status == FindingStatus.ACKNOWLEDGED
    assert dead.owner == "maria"
    assert dead.acknowledged_by == "user:ops"
    assert dead.resolution_note == "paging the host"
    assert Event.objects.get(type=EventType.FINDING_ACKNOWLEDGED).payload["owner"] == "maria"
    ops_client.post(f"/admin/reconciliation/finding/{dead.pk}/resolve/", {"note": "host replaced"})
    dead.refresh_from_db()
    assert dead.status == FindingStatus.RESOLVED
    assert dead.resolution_note == "host replaced"


def test_managers_see_the_remedy_but_no_buttons_and_cannot_post(manager_client, world):
    *_, dead, _, _, _ = world
    body = manager_client.get(f"/admin/reconciliation/finding/{dead.pk}/change/").content.decode()
    assert 'id="lh-remedy"' in body
    assert 'id="lh-triage"' not in body
    assert manager_client.post(f"/admin/reconciliation/finding/{dead.pk}/resolve/", {"note": "x"}).status_code == 403


def test_discard_the_ended_attempt_of_an_orphan_branch(ops_client, clock, world):
    web, agent, *_ = world
    task = TaskFactory(project=web, title="Abandoned")
    grant = lease_claim(task=task, agent=agent, branch="feature/abandoned")
    attempt_release(proof=proof_of(grant))
    orphan = FindingFactory(project=web, condition=Condition.ORPHAN_BRANCH, subject_key="feature/abandoned")
    body = ops_client.get(f"/admin/reconciliation/finding/{orphan.pk}/change/").content.decode()
    assert 'id="lh-triage-discard"' in body
    url = f"/admin/reconciliation/finding/{orphan.pk}/discard/"
    assert "Yes, discard its work" in ops_client.get(url).content.decode()
    ops_client.post(url, {"post": "yes", "reason": "superseded by WEB-9"})
    discard = AttemptDiscard.objects.get(attempt=grant.attempt)
    assert discard.reason == "superseded by WEB-9"


def test_discarding_work_already_discarded_logs_no_discard_and_is_not_offered(ops_client, clock, world):
    """Issue 32: the service keeps the first record; the admin said "discarded" and logged it anyway."""
    web, agent, *_ = world
    task = TaskFactory(project=web, title="Abandoned twice")
    grant = lease_claim(task=task, agent=agent, branch="feature/twice")
    attempt_release(proof=proof_of(grant))
    orphan = FindingFactory(project=web, condition=Condition.ORPHAN_BRANCH, subject_key="feature/twice")
    url = f"/admin/reconciliation/finding/{orphan.pk}/discard/"
    ops_client.post(url, {"post": "yes", "reason": "first"})
    logged = LogEntry.objects.count()
    body = ops_client.get(f"/admin/reconciliation/finding/{orphan.pk}/change/").content.decode()
    assert 'id="lh-triage-discard"' not in body
    response = ops_client.post(url, {"post": "yes", "reason": "second"}, follow=True)
    assert "is discarded" not in response.content.decode()
    assert LogEntry.objects.count() == logged
    assert AttemptDiscard.objects.get(attempt=grant.attempt).reason == "first"
