from __future__ import annotations

from datetime import timedelta

import pytest
from django.db import IntegrityError, transaction
from django.test import override_settings

from core.errors import InvalidBranchName, TaskNotClaimable, TaskTaken, ValidationFailed
from leases.models import Attempt, AttemptStatus
from leases.selectors import with_lease_state
from leases.services import attempt_finish, lease_claim, lease_claim_next, sweep_expired, task_update
from ledger.actors import SYSTEM
from ledger.models import Event, EventType, Task, TaskStatus
from ledger.services import dependency_add
from ledger.tokens import hash_token
from tests.factories import AgentFactory, ProjectFactory, TaskFactory
from tests.leases.helpers import proof_of

pytestmark = pytest.mark.django_db


@pytest.fixture
def project():
    return ProjectFactory(slug="web", default_lease_seconds=900)


@pytest.fixture
def agent(project):
    return AgentFactory(handle="agent-07", projects=[project])


@pytest.fixture
def other(project):
    return AgentFactory(handle="agent-08", kind="codex", projects=[project])


def test_claim_bumps_epoch_not_version_and_writes_the_label(clock, project, agent):
    task = TaskFactory(project=project, title="Search copy")
    grant = lease_claim(task=task, agent=agent)
    task.refresh_from_db()
    assert (task.epoch, task.version) == (1, 1)
    assert grant.attempt.epoch == 1
    assert grant.attempt.lease_expires_at == clock.now() + timedelta(seconds=900)
    assert grant.attempt.label == "owner=agent-07;branch=claude/web-1-search-copy;env=-;task=WEB-1;epoch=1"
    assert grant.renew_every_seconds == 300
    assert grant.renew_attempts == 3
    assert Event.objects.filter(type=EventType.ATTEMPT_CLAIMED, attempt_id=grant.attempt.pk).count() == 1


def test_a_live_lease_refuses_a_second_claim_with_task_taken(project, agent, other):
    task = TaskFactory(project=project)
    lease_claim(task=task, agent=agent)
    with pytest.raises(TaskTaken) as caught:
        lease_claim(task=task, agent=other)
    assert caught.value.details["holder"] == "agent-07"
    assert Attempt.objects.filter(task=task).count() == 1


def test_the_database_refuses_two_active_attempts_for_one_task(project, agent, other):
    task = TaskFactory(project=project)
    grant = lease_claim(task=task, agent=agent)
    duplicate = Attempt.objects.get(pk=grant.attempt.pk)
    duplicate.pk = None
    duplicate.agent = other
    with pytest.raises(IntegrityError), transaction.atomic():
        duplicate.save()


def test_the_database_refuses_two_attempts_with_one_epoch(project, agent, other):
    task = TaskFactory(project=project)
    grant = lease_claim(task=task, agent=agent)
    duplicate = Attempt.objects.get(pk=grant.attempt.pk)
    duplicate.pk = None
    duplicate.agent = other
    duplicate.status = AttemptStatus.EXPIRED  # not a second active attempt: only the epoch collides
    duplicate.finished_at = duplicate.lease_expires_at
    with pytest.raises(IntegrityError), transaction.atomic():
        duplicate.save()


def test_a_lapsed_lease_is_expired_lazily_by_the_next_claim(clock, project, agent, other):
    task = TaskFactory(project=project)
    first = lease_claim(task=task, agent=agent, lease_seconds=60)
    clock.advance(60)  # the expiry instant: the lease is no longer live
    second = lease_claim(task=task, agent=other)
    first.attempt.refresh_from_db()
    assert first.attempt.status == AttemptStatus.EXPIRED
    assert first.attempt.finished_at == first.attempt.lease_expires_at
    assert second.attempt.epoch == 2
    types = list(Event.objects.filter(task=task).values_list("type", flat=True))
    assert types[-3:] == [EventType.ATTEMPT_CLAIMED, EventType.ATTEMPT_EXPIRED, EventType.ATTEMPT_CLAIMED]


@pytest.mark.parametrize(
    ("setup", "reason"),
    [
        (lambda t, a: task_update(task=t, actor=SYSTEM, changes={"status": TaskStatus.OPEN}), "status_open"),
        (lambda t, a: task_update(task=t, actor=SYSTEM, changes={"status": TaskStatus.DONE}), "status_done"),
        (
            lambda t, a: dependency_add(task=t, blocked_by=TaskFactory(project=t.project), actor=SYSTEM),
            "unresolved_blockers",
        ),
        (lambda t, a: task_update(task=t, actor=SYSTEM, changes={"reserved_for": a}), "reserved_for_another_agent"),
    ],
)
def test_unclaimable_tasks_are_refused_with_a_reason(project, agent, other, setup, reason):
    task = TaskFactory(project=project)
    setup(task, other)
    with pytest.raises(TaskNotClaimable) as caught:
        lease_claim(task=task, agent=agent)
    assert caught.value.details["reason"] == reason
    task.refresh_from_db()
    assert task.epoch == 0


def test_a_resolved_blocker_no_longer_blocks(project, agent):
    task = TaskFactory(project=project)
    blocker = TaskFactory(project=project)
    dependency_add(task=task, blocked_by=blocker, actor=SYSTEM)
    task_update(task=blocker, actor=SYSTEM, changes={"status": TaskStatus.CANCELLED})
    assert lease_claim(task=task, agent=agent).attempt.status == AttemptStatus.ACTIVE


def test_the_reserved_agent_alone_may_claim(project, agent, other):
    task = TaskFactory(project=project)
    task_update(task=task, actor=SYSTEM, changes={"reserved_for": other})
    assert lease_claim_next(project=project, agent=agent) is None
    assert lease_claim_next(project=project, agent=other).task.pk == task.pk


def test_claim_next_follows_priority_then_age_then_id(clock, project, agent):
    old_low = TaskFactory(project=project, priority=1)
    clock.advance(10)
    young_high = TaskFactory(project=project, priority=5)
    old_high = TaskFactory(project=project, priority=5)
    Task.objects.filter(pk=old_high.pk).update(ready_since=clock.now() - timedelta(hours=1))
    order = [lease_claim_next(project=project, agent=agent).task.pk for _ in range(3)]
    assert order == [old_high.pk, young_high.pk, old_low.pk]
    assert lease_claim_next(project=project, agent=agent) is None


def test_claim_next_filters_by_task_class(project, agent):
    TaskFactory(project=project, task_class="refactor", priority=9)
    migration = TaskFactory(project=project, task_class="migration")
    assert lease_claim_next(project=project, agent=agent, task_class="migration").task.pk == migration.pk


def test_claim_next_skips_a_task_whose_lease_lapsed_only_by_expiring_and_taking_it(clock, project, agent, other):
    task = TaskFactory(project=project)
    lease_claim(task=task, agent=agent, lease_seconds=30)
    assert lease_claim_next(project=project, agent=other) is None
    clock.advance(31)
    grant = lease_claim_next(project=project, agent=other)
    assert grant.task.pk == task.pk
    assert grant.attempt.epoch == 2


def test_archived_projects_hand_out_nothing(clock, project, agent):
    task = TaskFactory(project=project)
    type(project).objects.filter(pk=project.pk).update(archived_at=clock.now())
    assert lease_claim_next(project=project, agent=agent) is None
    with pytest.raises(TaskNotClaimable):
        lease_claim(task=Task.objects.get(pk=task.pk), agent=agent)


@pytest.mark.parametrize(("requested", "granted"), [(5, 30), (600, 600), (10**9, 86400)])
def test_requested_lease_length_is_clamped(project, agent, requested, granted):
    grant = lease_claim(task=TaskFactory(project=project), agent=agent, lease_seconds=requested)
    assert grant.attempt.lease_seconds == granted


@pytest.mark.parametrize("bad", [0, -1, "60", 1.5, True])
def test_nonsense_lease_lengths_are_validation_errors(project, agent, bad):
    with pytest.raises(ValidationFailed):
        lease_claim(task=TaskFactory(project=project), agent=agent, lease_seconds=bad)


def test_lease_sizing_uses_three_times_the_p95_of_25_completed_attempts(clock, project, agent):
    durations = list(range(100, 2600, 100))  # 25 attempts: 100 s … 2,500 s
    for seconds in durations:
        task = TaskFactory(project=project, task_class="migration")
        grant = lease_claim(task=task, agent=agent, lease_seconds=3600)
        clock.advance(seconds)
        attempt_finish(proof=proof_of(grant), outcome="done")
    # Nearest-rank p95 of 25 values is the 24th: 2,400 s.
    grant = lease_claim(task=TaskFactory(project=project, task_class="migration"), agent=agent)
    assert grant.attempt.lease_seconds == 3 * 2400
    unsized = lease_claim(task=TaskFactory(project=project, task_class="docs"), agent=agent)
    assert unsized.attempt.lease_seconds == 900


def test_lease_sizing_is_clamped_to_the_configured_maximum(clock, project, agent):
    for _ in range(20):
        grant = lease_claim(task=TaskFactory(project=project, task_class="slow"), agent=agent, lease_seconds=86400)
        clock.advance(40000)
        attempt_finish(proof=proof_of(grant), outcome="done")
    with override_settings(LEASEHOLD_MAX_LEASE_SECONDS=50000):
        grant = lease_claim(task=TaskFactory(project=project, task_class="slow"), agent=agent)
    assert grant.attempt.lease_seconds == 50000


def test_branch_is_validated_suggested_and_inherited_from_an_expired_predecessor(clock, project, agent, other):
    task = TaskFactory(project=project, title="Fix login")
    with pytest.raises(InvalidBranchName):
        lease_claim(task=task, agent=agent, branch="feature/Foo")
    first = lease_claim(task=task, agent=agent, branch="feature/login-fix", lease_seconds=30)
    clock.advance(31)
    sweep_expired()
    second = lease_claim(task=task, agent=other)
    assert second.attempt.branch == "feature/login-fix"
    assert second.attempt.label == "owner=agent-08;branch=feature/login-fix;env=-;task=WEB-1;epoch=2"
    assert first.attempt.pk != second.attempt.pk


def test_a_failed_predecessor_without_work_does_not_pass_on_its_branch(project, agent, other):
    task = TaskFactory(project=project, title="Fix login")
    first = lease_claim(task=task, agent=agent, branch="feature/login-fix")
    attempt_finish(proof=proof_of(first), outcome="failed", failure_reason_code="tests_failed")
    second = lease_claim(task=task, agent=other)
    assert second.attempt.branch == "codex/web-1-fix-login"


def test_base_commit_must_be_a_full_sha(project, agent):
    with pytest.raises(ValidationFailed):
        lease_claim(task=TaskFactory(project=project), agent=agent, base_commit="abc123")
    grant = lease_claim(task=TaskFactory(project=project), agent=agent, base_commit="a" * 40)
    assert grant.attempt.base_commit == "a" * 40


def test_effective_status_is_computed_from_the_lease(clock, project, agent):
    task = TaskFactory(project=project)
    lease_claim(task=task, agent=agent, lease_seconds=60)

    def effective():
        return with_lease_state(Task.objects.filter(pk=task.pk), now=clock.now()).get().effective_status

    assert effective() == "in_progress"
    assert Task.objects.get(pk=task.pk).status == TaskStatus.READY
    clock.advance(60)
    assert effective() == "ready"  # nothing had to reset the task


def test_no_table_holds_a_plaintext_lease_token(project, agent):
    from django.apps import apps
    from django.db import connection

    tokens = [lease_claim(task=TaskFactory(project=project), agent=agent).token for _ in range(3)]
    dump = []
    with connection.cursor() as cursor:
        for model in apps.get_models():
            cursor.execute(f"SELECT * FROM {connection.ops.quote_name(model._meta.db_table)}")
            dump.append(repr(cursor.fetchall()))
    everything = "\n".join(dump)
    for token in tokens:
        assert token not in everything
        assert hash_token(token) in everything  # what is stored is the hash


def test_task_taken_refusals_are_tallied_per_agent_and_day(project, agent, other):
    from leases.models import ClaimRefusalTally

    task = TaskFactory(project=project)
    lease_claim(task=task, agent=agent)
    for _ in range(3):
        with pytest.raises(TaskTaken):
            lease_claim(task=task, agent=other)
    tally = ClaimRefusalTally.objects.get()
    assert (tally.agent_id, tally.count) == (other.pk, 3)
