"""Admin triage: acknowledge, resolve by hand; and the invariants the database keeps for findings."""

from __future__ import annotations

import pytest
from django.db import IntegrityError, transaction

from core.errors import ValidationFailed
from ledger.models import DeletionRefused, Event, EventType
from reconciliation.models import Condition, Finding, FindingStatus, ReconciliationRun, SubjectType
from reconciliation.services import finding_acknowledge, finding_resolve, reconcile
from tests.factories import ProjectFactory
from tests.reconciliation import scenarios

pytestmark = pytest.mark.django_db


@pytest.fixture
def open_finding(tmp_path, clock):
    scenario = scenarios.duplicate_branch_label(tmp_path / "git", clock)
    reconcile()
    return scenario, Finding.objects.get()


def test_acknowledging_keeps_the_finding_until_its_condition_ends(open_finding, user_actor, clock):
    scenario, finding = open_finding
    finding = finding_acknowledge(finding=finding, actor=user_actor, note="looking into it")
    assert finding.status == FindingStatus.ACKNOWLEDGED
    assert finding.acknowledged_by == "user:root"
    event = Event.objects.get(type=EventType.FINDING_ACKNOWLEDGED)
    assert event.actor_user == user_actor.user
    assert event.project_id == finding.project_id

    clock.advance(60)
    reconcile()
    finding.refresh_from_db()
    assert finding.status == FindingStatus.ACKNOWLEDGED  # no duplicate opened beside it
    assert finding.last_seen_at == clock.now()
    assert Finding.objects.count() == 1

    scenario.repair()
    reconcile()
    finding.refresh_from_db()
    assert finding.status == FindingStatus.RESOLVED


def test_resolving_by_hand_while_the_condition_holds_opens_a_new_finding_next_run(open_finding, user_actor, clock):
    _, finding = open_finding
    finding = finding_resolve(finding=finding, actor=user_actor, note="fixed the agent config")
    assert finding.status == FindingStatus.RESOLVED
    assert finding.resolved_by == "user:root"
    assert finding.resolution_note == "fixed the agent config"
    assert Event.objects.filter(type=EventType.FINDING_RESOLVED, actor_user=user_actor.user).count() == 1

    clock.advance(60)
    reconcile()
    reopened = Finding.objects.exclude(pk=finding.pk).get()
    assert reopened.status == FindingStatus.OPEN
    assert reopened.first_seen_at == clock.now()


def test_resolving_twice_appends_one_event_and_a_resolved_finding_cannot_be_acknowledged(open_finding, user_actor):
    _, finding = open_finding
    finding_resolve(finding=finding, actor=user_actor)
    finding_resolve(finding=finding, actor=user_actor)
    assert Event.objects.filter(type=EventType.FINDING_RESOLVED).count() == 1
    with pytest.raises(ValidationFailed):
        finding_acknowledge(finding=finding, actor=user_actor)


def test_the_database_refuses_a_second_unresolved_finding_for_one_subject(clock):
    project = ProjectFactory()
    fields = {
        "condition": Condition.ORPHAN_BRANCH,
        "project": project,
        "subject_type": SubjectType.BRANCH,
        "subject_key": "feature/x",
        "first_seen_at": clock.now(),
        "last_seen_at": clock.now(),
    }
    first = Finding.objects.create(**fields)
    with pytest.raises(IntegrityError), transaction.atomic():
        Finding.objects.create(**fields, status=FindingStatus.ACKNOWLEDGED)
    Finding.objects.filter(pk=first.pk).update(status=FindingStatus.RESOLVED, resolved_at=clock.now())
    Finding.objects.create(**fields)  # a resolved one does not count


def test_findings_and_runs_are_never_deleted(open_finding):
    _, finding = open_finding
    with pytest.raises(DeletionRefused):
        finding.delete()
    with pytest.raises(DeletionRefused):
        Finding.objects.all().delete()
    with pytest.raises(DeletionRefused):
        ReconciliationRun.objects.all().delete()
