"""Git facts (SPEC §15.4): validated once, recorded by the holder's git call and by finish, evented, counted as work."""

from __future__ import annotations

from datetime import timedelta

import pytest

from core.errors import InvalidBranchName, StaleEpoch, ValidationFailed
from leases.models import Attempt
from leases.services import attempt_finish, attempt_renew, attempt_set_git, lease_claim, note_add, task_update
from leases.services.git_facts import git_facts
from ledger.actors import Actor
from ledger.models import Event, EventType
from tests.factories import TaskFactory
from tests.leases.helpers import proof_of

pytestmark = pytest.mark.django_db

HEAD = "c" * 40
FACTS = {
    "head_commit": HEAD,
    "commits_ahead": 2,
    "dirty": True,
    "pushed": False,
    "worktree_path": "/home/dev/web.worktrees/WEB-1",
    "host": "build-07.example.com",
}


@pytest.fixture
def grant(project, agent, clock):
    return lease_claim(task=TaskFactory(project=project, title="Search copy"), agent=agent, lease_seconds=600)


def row(grant) -> Attempt:
    return Attempt.objects.get(pk=grant.attempt.pk)


def test_every_fact_is_recorded_and_one_event_says_what_changed(clock, grant):
    attempt_set_git(proof=proof_of(grant), base_commit="b" * 40, **FACTS)
    stored = row(grant)
    assert {name: getattr(stored, name) for name in FACTS} == FACTS
    assert stored.base_commit == "b" * 40
    (event,) = Event.objects.filter(type=EventType.ATTEMPT_UPDATED, attempt_id=stored.pk)
    assert event.payload == {"base_commit": "b" * 40, **FACTS}

    attempt_set_git(proof=proof_of(grant), commits_ahead=3, dirty=True, host=FACTS["host"])
    latest = Event.objects.filter(type=EventType.ATTEMPT_UPDATED, attempt_id=stored.pk).order_by("-id").first()
    assert latest is not None
    assert latest.payload == {"commits_ahead": 3}  # only what changed
    assert row(grant).head_commit == HEAD  # a fact not given is kept


def test_reporting_the_same_facts_again_appends_no_event(grant):
    attempt_set_git(proof=proof_of(grant), **FACTS)
    attempt_set_git(proof=proof_of(grant), **FACTS)
    assert Event.objects.filter(type=EventType.ATTEMPT_UPDATED).count() == 1


def test_a_null_fact_is_not_reported_and_clears_nothing(grant):
    attempt_set_git(proof=proof_of(grant), **FACTS)
    attempt_set_git(proof=proof_of(grant), pushed=True, head_commit=None)
    assert (row(grant).pushed, row(grant).head_commit) == (True, HEAD)


def test_nothing_given_renews_as_a_heartbeat_and_records_nothing(clock, grant):
    """Every fact None ("not reported"): the lease is renewed, not worked on, and no event says a fact
    changed (an empty request body is refused by the door, as the schema's minProperties says)."""
    before = row(grant)
    clock.advance(60)
    attempt_set_git(proof=proof_of(grant))
    after = row(grant)
    assert after.lease_expires_at > before.lease_expires_at
    assert (after.renew_count, after.last_worked_at) == (before.renew_count + 1, before.last_worked_at)
    assert not Event.objects.filter(type=EventType.ATTEMPT_UPDATED, attempt_id=grant.attempt.pk).exists()


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("head_commit", "abc123"),
        ("head_commit", "C" * 40),
        ("head_commit", 40),
        ("base_commit", "g" * 40),
        ("commits_ahead", -1),
        ("commits_ahead", 2**31),
        ("commits_ahead", True),
        ("commits_ahead", "3"),
        ("dirty", "yes"),
        ("dirty", 1),
        ("pushed", "false"),
        ("worktree_path", "relative/path"),
        ("worktree_path", "/" + "x" * 500),
        ("worktree_path", "/w/with\nnewline"),
        ("worktree_path", ""),
        ("host", ""),
        ("host", "h" * 201),
        ("host", "bad\x00host"),
        ("host", 7),
    ],
)
def test_a_bad_fact_is_a_validation_error_naming_its_field(grant, field, value):
    with pytest.raises(ValidationFailed) as caught:
        attempt_set_git(proof=proof_of(grant), **{field: value})
    assert set(caught.value.details["fields"]) == {field}
    assert not Event.objects.filter(type=EventType.ATTEMPT_UPDATED).exists()


def test_the_limits_themselves_are_accepted(grant):
    attempt_set_git(
        proof=proof_of(grant),
        commits_ahead=0,
        worktree_path="/" + "x" * 499,
        host="h" * 200,
        dirty=False,
        pushed=False,
    )
    stored = row(grant)
    assert (stored.commits_ahead, len(stored.worktree_path or ""), len(stored.host or "")) == (0, 500, 200)
    attempt_set_git(proof=proof_of(grant), worktree_path="C:\\work\\web.worktrees\\WEB-1")
    assert row(grant).worktree_path == "C:\\work\\web.worktrees\\WEB-1"


def test_unknown_facts_are_refused_by_name():
    with pytest.raises(ValidationFailed) as caught:
        git_facts({"head_commit": HEAD, "head": HEAD, "ahead": 1})
    assert caught.value.details["fields"] == {"ahead": ["unknown field"], "head": ["unknown field"]}


def test_a_bad_branch_is_invalid_branch_name_as_for_a_claim(grant):
    with pytest.raises(InvalidBranchName):
        attempt_set_git(proof=proof_of(grant), branch="Feature/X")


def test_a_new_branch_rewrites_the_label(grant):
    attempt = attempt_set_git(proof=proof_of(grant), branch="feature/search-copy", commits_ahead=1)
    assert attempt.label == "owner=agent-07;branch=feature/search-copy;env=-;task=WEB-1;epoch=1"
    event = Event.objects.get(type=EventType.ATTEMPT_UPDATED)
    assert event.payload == {"branch": "feature/search-copy", "commits_ahead": 1}


def test_finish_records_its_git_facts_before_the_attempt_ends(grant):
    attempt_finish(proof=proof_of(grant), outcome="failed", failure_reason_code="tests_failed", git=FACTS)
    stored = row(grant)
    assert {name: getattr(stored, name) for name in FACTS} == FACTS
    updated, finished = Event.objects.filter(
        attempt_id=stored.pk, type__in=(EventType.ATTEMPT_UPDATED, EventType.ATTEMPT_FINISHED)
    )
    assert (updated.type, finished.type) == (EventType.ATTEMPT_UPDATED, EventType.ATTEMPT_FINISHED)
    assert updated.payload == FACTS


def test_finish_refuses_bad_git_facts_before_touching_anything(grant):
    with pytest.raises(ValidationFailed) as caught:
        attempt_finish(proof=proof_of(grant), outcome="done", git={"commits_ahead": -2})
    assert set(caught.value.details["fields"]) == {"commits_ahead"}
    assert row(grant).status == "active"
    with pytest.raises(ValidationFailed):
        attempt_finish(proof=proof_of(grant), outcome="done", git={"sha": HEAD})
    with pytest.raises(ValidationFailed):
        attempt_finish(proof=proof_of(grant), outcome="done", git=["not", "an", "object"])


def test_a_stale_holder_records_no_facts(project, agent, clock):
    first = lease_claim(task=TaskFactory(project=project), agent=agent, lease_seconds=60)
    clock.advance(61)
    lease_claim(task=first.task, agent=agent)
    with pytest.raises(StaleEpoch):
        attempt_set_git(proof=proof_of(first), **FACTS)
    assert row(first).head_commit is None


def test_notes_git_facts_and_task_writes_are_work_and_renewals_are_not(clock, grant):
    assert row(grant).last_worked_at is None
    clock.advance(60)
    attempt_renew(proof=proof_of(grant))
    assert row(grant).last_worked_at is None
    note_add(proof=proof_of(grant), kind="progress", content="parser done")
    assert row(grant).last_worked_at == clock.now()
    clock.advance(60)
    attempt_set_git(proof=proof_of(grant), commits_ahead=1)
    assert row(grant).last_worked_at == clock.now()
    clock.advance(60)
    task_update(task=grant.task, actor=Actor(agent=grant.attempt.agent), changes={"priority": 3}, proof=proof_of(grant))
    assert row(grant).last_worked_at == clock.now()
    clock.advance(60)
    attempt_renew(proof=proof_of(grant))
    assert row(grant).last_worked_at == clock.now() - timedelta(seconds=60)
