from __future__ import annotations

import threading
from collections import Counter
from datetime import timedelta

import pytest
from django.db import connection, transaction

from leases.models import Allocation, AllocationStatus, Attempt, AttemptStatus, Note
from leases.services import attempt_release, check_queue_wait, expiry, lease_claim, note_add, sweep_expired, task_update
from ledger.actors import SYSTEM
from ledger.models import Event, EventType, Task, TaskStatus
from tests.concurrency import run_in_threads
from tests.conftest import START
from tests.factories import AgentFactory, EnvironmentFactory, ProjectFactory, TaskFactory
from tests.leases.helpers import proof_of

postgres_only = pytest.mark.skipif(
    connection.vendor != "postgresql", reason="SKIP LOCKED between open transactions needs PostgreSQL"
)


@pytest.fixture
def project():
    return ProjectFactory(slug="web", queue_wait_max_seconds=600)


@pytest.fixture
def agent(project):
    return AgentFactory(projects=[project])


@pytest.mark.django_db
def test_sweep_expires_exactly_the_lapsed_attempts_and_keeps_their_notes(clock, project, agent):
    short = [lease_claim(task=TaskFactory(project=project), agent=agent, lease_seconds=60) for _ in range(3)]
    long = [lease_claim(task=TaskFactory(project=project), agent=agent, lease_seconds=600) for _ in range(2)]
    note_add(proof=proof_of(short[0]), kind="checkpoint", content="keep me")
    Task.objects.filter(pk=short[1].task.pk).update(status=TaskStatus.REVIEW)  # a stored status to keep
    clock.advance(60)
    report = sweep_expired(batch_size=2)
    assert (report.expired, report.batches) == (3, 2)
    statuses = dict(Attempt.objects.values_list("pk", "status"))
    assert {statuses[g.attempt.pk] for g in short} == {AttemptStatus.EXPIRED}
    assert {statuses[g.attempt.pk] for g in long} == {AttemptStatus.ACTIVE}
    assert Note.objects.get().content == "keep me"
    assert Task.objects.get(pk=short[1].task.pk).status == TaskStatus.REVIEW
    assert Task.objects.get(pk=short[0].task.pk).ready_since == clock.now()  # the instant it lapsed
    assert Event.objects.filter(type=EventType.ATTEMPT_EXPIRED).count() == 3
    assert sweep_expired().expired == 0


@pytest.mark.django_db(transaction=True)
def test_two_sweeps_at_once_produce_one_event_per_attempt(clock, project, agent):
    grants = [lease_claim(task=TaskFactory(project=project), agent=agent, lease_seconds=30) for _ in range(40)]
    clock.advance(31)
    results = run_in_threads(2, lambda _: sweep_expired(batch_size=7))
    assert not [r for r in results if isinstance(r, BaseException)], results
    assert sum(r.expired for r in results) == 40
    assert Event.objects.filter(type=EventType.ATTEMPT_EXPIRED).count() == 40
    assert set(Attempt.objects.values_list("status", flat=True)) == {AttemptStatus.EXPIRED}
    assert len(grants) == 40


@pytest.mark.django_db
def test_queue_wait_alerts_once_per_waiting_period(clock, project, agent):
    task = TaskFactory(project=project)
    TaskFactory(project=project, status=TaskStatus.OPEN)  # not claimable: never alerted
    clock.advance(599)
    assert check_queue_wait() == 0
    clock.advance(1)
    assert check_queue_wait() == 1
    assert check_queue_wait() == 0  # same waiting period
    event = Event.objects.get(type=EventType.TASK_QUEUE_WAIT_EXCEEDED)
    assert (event.severity, event.task_id, event.payload["waited_seconds"]) == ("warn", task.pk, 600)
    # A claim and a release start a new waiting period.
    from leases.services import attempt_release

    attempt_release(proof=proof_of(lease_claim(task=task, agent=agent)))
    clock.advance(601)
    assert check_queue_wait() == 1
    assert Event.objects.filter(type=EventType.TASK_QUEUE_WAIT_EXCEEDED).count() == 2


@pytest.mark.django_db
def test_a_backlog_past_the_threshold_is_alerted_over_several_runs_longest_waiting_first(clock, project, monkeypatch):
    monkeypatch.setattr(expiry, "QUEUE_WAIT_ALERTS_PER_RUN", 2)
    oldest = TaskFactory(project=project)
    clock.advance(10)
    second = TaskFactory(project=project)
    clock.advance(10)
    newest = TaskFactory(project=project)
    clock.advance(600)
    assert check_queue_wait() == 2
    first_run = set(Event.objects.filter(type=EventType.TASK_QUEUE_WAIT_EXCEEDED).values_list("task_id", flat=True))
    assert first_run == {oldest.pk, second.pk}
    assert check_queue_wait() == 1
    assert Event.objects.filter(type=EventType.TASK_QUEUE_WAIT_EXCEEDED, task=newest).count() == 1
    assert check_queue_wait() == 0


@pytest.mark.django_db
def test_a_held_task_is_not_waiting(clock, project, agent):
    task = TaskFactory(project=project)
    lease_claim(task=task, agent=agent, lease_seconds=3600)
    clock.advance(1200)
    assert check_queue_wait() == 0
    task_update(task=Task.objects.get(pk=task.pk), actor=SYSTEM, changes={"priority": 2})
    assert check_queue_wait() == 0


@pytest.mark.django_db
def test_the_sweep_uses_the_expiry_of_each_lease(clock, project, agent):
    grant = lease_claim(task=TaskFactory(project=project), agent=agent, lease_seconds=60)
    clock.advance(3600)
    sweep_expired()
    row = Attempt.objects.get(pk=grant.attempt.pk)
    assert row.finished_at == grant.attempt.lease_expires_at == clock.now() - timedelta(seconds=3540)


@pytest.fixture(params=["as_configured", "orm_batch"])
def sweep_path(request, monkeypatch):
    """Each sweep test runs twice: as configured (one statement per batch on PostgreSQL,
    the ORM on SQLite) and with the ORM batch forced, so on PostgreSQL both paths must
    write the rows the test spells out."""
    if request.param == "orm_batch":
        monkeypatch.setattr(expiry, "_sweeps_in_one_statement", lambda: False)
    return request.param


def _task_rows():
    return {
        row["pk"]: row for row in Task.objects.values("pk", "status", "ready_since", "version", "epoch", "updated_at")
    }


@pytest.mark.django_db
def test_a_sweep_batch_writes_exactly_the_rows_of_expiry(clock, sweep_path):
    project = ProjectFactory(slug="web")
    ada = AgentFactory(handle="ada", projects=[project])
    bob = AgentFactory(handle="bob", projects=[project])
    for name in ("preview-a", "preview-b", "preview-c"):
        EnvironmentFactory(project=project, name=name, kind="database", isolation="container")
    # Claimed at 09:00:00: lapses on a whole second, with an environment.
    whole = lease_claim(task=TaskFactory(project=project), agent=ada, lease_seconds=60, environment="preview-a")
    held = lease_claim(task=TaskFactory(project=project), agent=ada, lease_seconds=600, environment="preview-b")
    released = lease_claim(task=TaskFactory(project=project), agent=bob, lease_seconds=30, environment="preview-c")
    attempt_release(proof=proof_of(released))  # finished before its lease could lapse
    # Claimed at 09:00:00.25: lapse on a fraction of a second, without an environment.
    clock.advance(0.25)
    fractional = lease_claim(task=TaskFactory(project=project), agent=bob, lease_seconds=60)
    in_review = lease_claim(task=TaskFactory(project=project), agent=bob, lease_seconds=45)
    Task.objects.filter(pk=in_review.task.pk).update(status=TaskStatus.REVIEW)  # a stored status other than ready
    tasks_before = _task_rows()
    last_event_before = Event.objects.order_by("-id").values_list("id", flat=True).first()
    clock.advance(119.75)  # 09:02:00

    assert sweep_expired().expired == 3

    attempts = {
        pk: (status, finished_at)
        for pk, status, finished_at in Attempt.objects.values_list("pk", "status", "finished_at")
    }
    assert attempts == {
        whole.attempt.pk: (AttemptStatus.EXPIRED, START + timedelta(seconds=60)),
        held.attempt.pk: (AttemptStatus.ACTIVE, None),
        released.attempt.pk: (AttemptStatus.RELEASED, START),
        fractional.attempt.pk: (AttemptStatus.EXPIRED, START + timedelta(seconds=60.25)),
        in_review.attempt.pk: (AttemptStatus.EXPIRED, START + timedelta(seconds=45.25)),
    }
    allocations = {
        attempt_id: (status, released_at)
        for attempt_id, status, released_at in Allocation.objects.values_list("attempt_id", "status", "released_at")
    }
    assert allocations == {
        whole.attempt.pk: (AllocationStatus.STALE, None),  # kept aside, never released by expiry
        held.attempt.pk: (AllocationStatus.ACTIVE, None),
        released.attempt.pk: (AllocationStatus.RELEASED, START),
    }
    # The sweep's only events, in the order of their ids (newest attempt first, as the ORM writes them).
    events = list(
        Event.objects.filter(id__gt=last_event_before)
        .order_by("id")
        .values_list(
            "type",
            "severity",
            "project_id",
            "task_id",
            "attempt_id",
            "actor_agent_id",
            "actor_user_id",
            "payload",
            "created_at",
        )
    )
    sweep_time = START + timedelta(seconds=120)

    def expired_event(grant, handle, lapsed_at):
        payload = {"agent": handle, "epoch": 1, "lapsed_at": lapsed_at}
        return (
            EventType.ATTEMPT_EXPIRED,
            "info",
            project.pk,
            grant.task.pk,
            grant.attempt.pk,
            None,
            None,
            payload,
            sweep_time,
        )

    assert events == [
        expired_event(in_review, "bob", "2026-01-05T09:00:45.250000+00:00"),
        expired_event(fractional, "bob", "2026-01-05T09:01:00.250000+00:00"),
        expired_event(whole, "ada", "2026-01-05T09:01:00+00:00"),
    ]
    assert [event[7]["lapsed_at"] for event in events] == [
        (START + timedelta(seconds=seconds)).isoformat() for seconds in (45.25, 60.25, 60)
    ]
    # Only ready_since moves, and only on tasks whose stored status is ready.
    expected_tasks = {pk: dict(row) for pk, row in tasks_before.items()}
    expected_tasks[whole.task.pk]["ready_since"] = START + timedelta(seconds=60)
    expected_tasks[fractional.task.pk]["ready_since"] = START + timedelta(seconds=60.25)
    assert _task_rows() == expected_tasks

    assert sweep_expired().expired == 0
    assert Event.objects.filter(id__gt=last_event_before).count() == 3


@postgres_only
@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize("locked_rows", ["attempts", "tasks"])
def test_a_sweep_skips_attempts_locked_by_a_call_in_progress_and_expires_them_later(clock, sweep_path, locked_rows):
    """A holder call locks attempts; a claim locks the task first and then its lapsed attempt.
    The sweep waits for neither (waiting on a claim's task would deadlock with it)."""
    project = ProjectFactory(slug="web")
    agent = AgentFactory(projects=[project])
    # Staggered leases: the sweep's order puts the locked five first.
    grants = [lease_claim(task=TaskFactory(project=project), agent=agent, lease_seconds=30 + i) for i in range(12)]
    locked, free = grants[:5], grants[5:]
    clock.advance(60)
    rows_locked = threading.Event()
    sweep_done = threading.Event()

    def work(index):
        if index == 0:  # a call in progress holding its rows until it commits
            with transaction.atomic():
                if locked_rows == "attempts":
                    rows = Attempt.objects.filter(pk__in=[g.attempt.pk for g in locked])
                else:
                    rows = Task.objects.filter(pk__in=[g.attempt.task_id for g in locked])
                list(rows.select_for_update(no_key=True))
                rows_locked.set()
                assert sweep_done.wait(20), "the sweep waited for the locked rows instead of skipping them"
            return None
        assert rows_locked.wait(20)
        try:
            return sweep_expired(batch_size=5)
        finally:
            sweep_done.set()

    holder, report = run_in_threads(2, work)
    assert holder is None, holder
    assert report.expired == len(free), report
    expired_events = Event.objects.filter(type=EventType.ATTEMPT_EXPIRED)
    assert set(expired_events.values_list("attempt_id", flat=True)) == {g.attempt.pk for g in free}
    assert sweep_expired(batch_size=5).expired == len(locked)
    per_attempt = Counter(expired_events.values_list("attempt_id", flat=True))
    assert per_attempt == Counter({g.attempt.pk: 1 for g in grants})
    assert set(Attempt.objects.values_list("status", flat=True)) == {AttemptStatus.EXPIRED}


@pytest.mark.django_db(transaction=True)
def test_two_whole_sweeps_at_once_write_one_event_per_attempt(clock, sweep_path):
    project = ProjectFactory(slug="web")
    agent = AgentFactory(projects=[project])
    grants = [lease_claim(task=TaskFactory(project=project), agent=agent, lease_seconds=30) for _ in range(60)]
    clock.advance(31)
    results = run_in_threads(2, lambda _: sweep_expired(batch_size=4))
    assert not [r for r in results if isinstance(r, BaseException)], results
    assert sum(r.expired for r in results) == 60
    per_attempt = Counter(Event.objects.filter(type=EventType.ATTEMPT_EXPIRED).values_list("attempt_id", flat=True))
    assert per_attempt == Counter({g.attempt.pk: 1 for g in grants})
    assert set(Attempt.objects.values_list("status", flat=True)) == {AttemptStatus.EXPIRED}
