"""The factories per room build what the services build: a usable lease token, the events, the defaults."""

from __future__ import annotations

from datetime import timedelta

import pytest

from leases.models import AllocationStatus, AttemptStatus, ReviewStatus
from leases.services import attempt_renew
from leases.tokens import lease_token_matches
from ledger.models import Event, EventType
from reconciliation.models import Condition, FindingStatus
from tests.factories import (
    AllocationFactory,
    AttemptFactory,
    EnvironmentFactory,
    FindingFactory,
    NoteFactory,
    ProjectFactory,
    ReviewRequestFactory,
    WebhookEndpointFactory,
)
from tests.leases.helpers import proof_of

pytestmark = pytest.mark.django_db


def test_an_attempt_holds_a_live_lease_whose_token_the_services_accept(clock):
    attempt = AttemptFactory(lease_seconds=600)
    assert attempt.status == AttemptStatus.ACTIVE
    assert attempt.agent.projects.filter(pk=attempt.task.project_id).exists()
    assert attempt.lease_expires_at == clock.now() + timedelta(seconds=600)
    assert lease_token_matches(attempt.lease_token, attempt.token_hash)
    clock.advance(60)
    attempt_renew(proof=proof_of(attempt.grant))  # refused unless the token is the one the claim derived
    assert Event.objects.filter(type=EventType.ATTEMPT_CLAIMED, attempt_id=attempt.pk).count() == 1


def test_a_note_is_written_by_its_attempt_and_logged():
    note = NoteFactory(content="Halfway there")
    assert (note.attempt.status, note.kind, note.content) == (AttemptStatus.ACTIVE, "progress", "Halfway there")
    assert Event.objects.filter(type=EventType.NOTE_ADDED, attempt_id=note.attempt_id).count() == 1


def test_an_allocation_is_active_for_a_claim_in_the_environments_project():
    environment = EnvironmentFactory(kind="database")
    allocation = AllocationFactory(environment=environment)
    assert allocation.status == AllocationStatus.ACTIVE
    assert allocation.environment == environment
    assert allocation.attempt.task.project_id == environment.project_id
    assert Event.objects.filter(type=EventType.ENVIRONMENT_ALLOCATED, attempt_id=allocation.attempt_id).exists()


def test_a_review_request_is_open_for_the_finished_attempt():
    request = ReviewRequestFactory()
    assert request.status == ReviewStatus.OPEN
    assert request.work_attempt.status != AttemptStatus.ACTIVE
    assert Event.objects.filter(type=EventType.REVIEW_REQUESTED, task=request.task).count() == 1


def test_a_finding_is_an_open_orphan_branch_seen_now(clock):
    finding = FindingFactory()
    other = FindingFactory(project=finding.project)
    assert (finding.condition, finding.status) == (Condition.ORPHAN_BRANCH, FindingStatus.OPEN)
    assert finding.first_seen_at == finding.last_seen_at == clock.now()
    assert finding.subject_key != other.subject_key


def test_a_webhook_endpoint_is_created_through_its_service():
    project = ProjectFactory()
    endpoint = WebhookEndpointFactory(project=project, event_types=[EventType.TASK_CREATED])
    assert endpoint.is_active
    assert endpoint.event_types == [EventType.TASK_CREATED]
    assert endpoint.secret
    assert Event.objects.filter(type=EventType.WEBHOOK_CREATED, project=project).count() == 1
