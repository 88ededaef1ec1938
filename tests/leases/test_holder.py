from __future__ import annotations

from datetime import timedelta

import pytest

from core.errors import (
    AcknowledgementRequired,
    InvalidLeaseToken,
    LeaseExpired,
    LeaseNotHeld,
    NotFound,
    StaleEpoch,
    ValidationFailed,
)
from leases.models import Attempt, AttemptStatus, Note
from leases.services import (
    HolderProof,
    attempt_finish,
    attempt_release,
    attempt_renew,
    attempt_set_git,
    lease_claim,
    note_add,
    task_force_release,
    task_update,
)
from ledger.actors import SYSTEM, Actor
from ledger.models import Event, EventType, TaskStatus
from tests.factories import AgentFactory, TaskFactory
from tests.leases.helpers import proof_of

pytestmark = pytest.mark.django_db


@pytest.fixture
def other(project):
    return AgentFactory(handle="agent-08", projects=[project])


@pytest.fixture
def grant(project, agent, clock):
    return lease_claim(task=TaskFactory(project=project, title="Search copy"), agent=agent, lease_seconds=600)


def attempt_row(grant):
    return Attempt.objects.get(pk=grant.attempt.pk)


def test_renew_extends_from_now_and_counts(clock, grant):
    clock.advance(500)
    renewed = attempt_renew(proof=proof_of(grant))
    assert renewed.lease_expires_at == clock.now() + timedelta(seconds=600)
    assert (renewed.renew_count, renewed.last_renewed_at) == (1, clock.now())
    assert not Event.objects.filter(type__contains="renew").exists()  # renewals are counted, not logged


def test_a_twenty_hour_lease_is_not_shortened_by_a_renewal(clock, project, agent):
    grant = lease_claim(task=TaskFactory(project=project), agent=agent, lease_seconds=20 * 3600)
    original = grant.attempt.lease_expires_at
    clock.advance(60)
    renewed = attempt_renew(proof=proof_of(grant), lease_seconds=300)
    assert renewed.lease_expires_at == original
    assert attempt_row(grant).lease_expires_at == original


def test_renewing_at_the_expiry_instant_expires_the_attempt(clock, grant):
    clock.advance(600)
    with pytest.raises(LeaseExpired):
        attempt_renew(proof=proof_of(grant))
    row = attempt_row(grant)
    assert row.status == AttemptStatus.EXPIRED  # committed although the call was refused
    assert Event.objects.filter(type=EventType.ATTEMPT_EXPIRED, attempt_id=row.pk).count() == 1
    with pytest.raises(LeaseExpired):
        attempt_renew(proof=proof_of(grant))  # an expired attempt is never resumed


def test_a_wrong_token_is_refused_and_changes_nothing(clock, grant):
    before = attempt_row(grant).lease_expires_at
    clock.advance(10)
    with pytest.raises(InvalidLeaseToken):
        attempt_renew(proof=proof_of(grant, token="x" * 43))
    with pytest.raises(InvalidLeaseToken):
        note_add(proof=proof_of(grant, token=""), kind="progress", content="forged")
    assert attempt_row(grant).lease_expires_at == before
    assert not Note.objects.exists()


def test_an_old_epoch_is_refused_as_stale(clock, project, agent, other, grant):
    clock.advance(600)
    newer = lease_claim(task=grant.task, agent=other)
    assert newer.attempt.epoch == 2
    # The dead holder comes back with its own token and epoch.
    with pytest.raises(StaleEpoch) as caught:
        note_add(proof=proof_of(grant), kind="progress", content="late write")
    assert caught.value.details["current_epoch"] == 2
    # The message names the stale epoch, never "at epoch 2; this write carries epoch 2" (issue 13).
    assert caught.value.message == f"{grant.task.key} is at epoch 2; attempt {grant.attempt.pk} is of epoch 1."
    with pytest.raises(StaleEpoch):
        attempt_finish(proof=proof_of(grant), outcome="done")
    # The live holder, presenting a stale epoch, is refused too.
    with pytest.raises(StaleEpoch):
        attempt_renew(proof=proof_of(newer, epoch=1))
    assert not Note.objects.exists()
    assert attempt_row(newer).status == AttemptStatus.ACTIVE


def test_a_revoked_holder_gets_lease_not_held(grant, user_actor):
    task_force_release(task=grant.task, actor=user_actor, reason="agent process gone")
    for call in (
        lambda: attempt_renew(proof=proof_of(grant)),
        lambda: note_add(proof=proof_of(grant), kind="progress", content="x"),
        lambda: attempt_finish(proof=proof_of(grant), outcome="done"),
    ):
        with pytest.raises(LeaseNotHeld) as caught:
            call()
        assert caught.value.details["status"] == AttemptStatus.REVOKED


def test_another_agent_cannot_use_a_stolen_proof(grant, other):
    stolen = HolderProof(attempt_id=grant.attempt.pk, token=grant.token, epoch=1, agent=other)
    with pytest.raises(NotFound):
        attempt_renew(proof=stolen)


def test_holder_writes_renew_the_lease(clock, grant):
    clock.advance(500)
    written = note_add(proof=proof_of(grant), kind="checkpoint", content="half way", next_steps=["finish tests"])
    assert written.lease_expires_at == clock.now() + timedelta(seconds=600)
    clock.advance(500)
    attempt = attempt_set_git(proof=proof_of(grant), branch="feature/search-copy", base_commit="b" * 40)
    assert attempt.lease_expires_at == clock.now() + timedelta(seconds=600)
    assert attempt.label == "owner=agent-07;branch=feature/search-copy;env=-;task=WEB-1;epoch=1"
    clock.advance(500)
    updated = task_update(
        task=grant.task, actor=Actor(agent=grant.attempt.agent), changes={"title": "New"}, proof=proof_of(grant)
    )
    assert updated.lease_expires_at == clock.now() + timedelta(seconds=600)
    assert attempt_row(grant).renew_count == 0


def test_notes_longer_than_8000_characters_are_refused_not_cut(grant):
    with pytest.raises(ValidationFailed) as caught:
        note_add(proof=proof_of(grant), kind="progress", content="x" * 8001)
    assert caught.value.details["length"] == 8001
    note_add(proof=proof_of(grant), kind="progress", content="x" * 8000)
    assert Note.objects.get().content == "x" * 8000


@pytest.mark.parametrize(
    "steps", [["s"] * 21, ["x" * 501], "not a list", [1, 2]], ids=["too-many", "too-long", "string", "ints"]
)
def test_next_steps_are_bounded(grant, steps):
    with pytest.raises(ValidationFailed):
        note_add(proof=proof_of(grant), kind="checkpoint", content="c", next_steps=steps)


@pytest.mark.parametrize(
    ("outcome", "extra", "attempt_status", "task_status"),
    [
        ("done", {}, AttemptStatus.COMPLETED, TaskStatus.DONE),
        ("review", {}, AttemptStatus.COMPLETED, TaskStatus.REVIEW),
        ("failed", {"failure_reason_code": "tests_failed"}, AttemptStatus.FAILED, TaskStatus.READY),
        ("handoff", {"interruption_reason_code": "context_limit"}, AttemptStatus.INTERRUPTED, TaskStatus.READY),
    ],
)
def test_finish_outcomes(clock, grant, outcome, extra, attempt_status, task_status):
    clock.advance(5)
    finished = attempt_finish(proof=proof_of(grant), outcome=outcome, result_summary="s", next_steps=["n"], **extra)
    row = attempt_row(grant)
    assert (row.status, row.finished_at, row.next_steps) == (attempt_status, clock.now(), ["n"])
    assert finished.task.status == task_status
    assert Event.objects.filter(type=EventType.ATTEMPT_FINISHED, attempt_id=row.pk).count() == 1


@pytest.mark.parametrize(
    "kwargs",
    [
        {"outcome": "failed"},
        {"outcome": "handoff"},
        {"outcome": "done", "failure_reason_code": "other"},
        {"outcome": "failed", "failure_reason_code": "bogus"},
        {"outcome": "finished"},
    ],
)
def test_finish_reason_codes_exactly_when_required(grant, kwargs):
    with pytest.raises(ValidationFailed):
        attempt_finish(proof=proof_of(grant), **kwargs)
    assert attempt_row(grant).status == AttemptStatus.ACTIVE


def test_finishing_after_the_description_changed_needs_an_acknowledgement(grant):
    task_update(task=grant.task, actor=SYSTEM, changes={"description": "New requirements"})
    with pytest.raises(AcknowledgementRequired) as caught:
        attempt_finish(proof=proof_of(grant), outcome="done")
    assert caught.value.details == {"current_version": 2, "changed": ["description"]}
    with pytest.raises(AcknowledgementRequired):
        attempt_finish(proof=proof_of(grant), outcome="done", acknowledged_version=1)
    finished = attempt_finish(proof=proof_of(grant), outcome="done", acknowledged_version=2)
    assert finished.task.status == TaskStatus.DONE


def test_a_title_change_needs_no_acknowledgement(grant):
    task_update(task=grant.task, actor=SYSTEM, changes={"title": "Renamed", "priority": 3})
    assert attempt_finish(proof=proof_of(grant), outcome="done").task.status == TaskStatus.DONE


def test_release_gives_the_task_back(clock, grant, other):
    clock.advance(5)
    released = attempt_release(proof=proof_of(grant))
    assert released.attempt.status == AttemptStatus.RELEASED
    assert released.task.status == TaskStatus.READY
    assert released.task.ready_since == clock.now()
    assert lease_claim(task=grant.task, agent=other).attempt.epoch == 2


def test_a_contested_write_records_one_event_and_leaves_the_lease_alone(clock, grant, other):
    before = attempt_row(grant).lease_expires_at
    clock.advance(30)
    task_update(
        task=grant.task, actor=Actor(agent=other), changes={"status": TaskStatus.BLOCKED, "blocked_reason": "x"}
    )
    contested = list(Event.objects.filter(type=EventType.TASK_CONTESTED))
    assert len(contested) == 1
    assert contested[0].severity == "warn"
    assert contested[0].payload["actor"] == "agent-08"
    assert contested[0].payload["holder"] == "agent-07"
    assert (contested[0].payload["from"], contested[0].payload["to"]) == ("ready", "blocked")
    row = attempt_row(grant)
    assert (row.status, row.lease_expires_at) == (AttemptStatus.ACTIVE, before)


def test_a_non_status_edit_by_someone_else_is_not_contested(grant, other):
    task_update(task=grant.task, actor=Actor(agent=other), changes={"title": "typo fix"})
    assert not Event.objects.filter(type=EventType.TASK_CONTESTED).exists()


def test_no_contested_event_once_the_lease_has_lapsed(clock, grant, user_actor):
    clock.advance(600)
    task_update(task=grant.task, actor=user_actor, changes={"status": TaskStatus.OPEN})
    assert not Event.objects.filter(type=EventType.TASK_CONTESTED).exists()
