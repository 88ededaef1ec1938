"""The report's rollup equals the attempts it counts, on both databases, whatever changed and in which order.

`ReportDayTally` (plus the changes not folded yet) holds, per UTC day of the
finish, project, agent, task class, status, failure reason and lead-time
bucket, how many attempts ended and their lead times added up
(`insight.models.report_tally`, migration `insight.0003_report_tally`). Each
test computes the same from the attempts, their tasks and the tasks' first
ready times, and asserts equality after writes through the services, a first
ready time that arrives after the attempts (an import writes events last), a
class changed after the finish, and a set-based UPDATE.
"""

from __future__ import annotations

import importlib
from collections import Counter
from datetime import UTC, datetime, timedelta

import pytest
from django.db import connection
from django.db.models import F

from insight.models import ReportDayTally, ReportDayTallyChange, TaskFirstReady
from insight.models.report_tally import NO_LEAD, lead_bucket_of
from insight.reports import fleet_report
from insight.services.rollups import report_tally_fold
from leases.models import Attempt
from leases.services import attempt_finish, lease_claim, sweep_expired, task_update
from ledger.actors import SYSTEM
from ledger.models import Task, TaskStatus
from ledger.services import task_create
from tests.factories import AgentFactory, ProjectFactory, TaskFactory
from tests.leases.helpers import proof_of

pytestmark = pytest.mark.django_db

Key = tuple[object, ...]


def counted_from_attempts() -> dict[Key, tuple[int, float]]:
    """(day, project, agent, class, status, reason, bucket) → (attempts, lead seconds), from the rows."""
    ready = dict(TaskFirstReady.objects.values_list("task_id", "ready_at"))
    counts: Counter[Key] = Counter()
    leads: dict[Key, float] = {}
    rows = Attempt.objects.filter(finished_at__isnull=False).values_list(
        "finished_at", "task__project_id", "agent_id", "task__task_class", "status", "failure_reason_code", "task_id"
    )
    for finished, project, agent, task_class, status, reason, task_id in rows:
        assert finished is not None
        lead = (finished - ready[task_id]).total_seconds() if task_id in ready else None
        bucket = lead_bucket_of(lead) if status == "completed" and lead is not None else NO_LEAD
        key = (finished.astimezone(UTC).date(), project, agent, task_class, status, reason, bucket)
        counts[key] += 1
        leads[key] = leads.get(key, 0.0) + (lead if bucket != NO_LEAD and lead is not None else 0.0)
    return {key: (n, leads[key]) for key, n in counts.items()}


def tallied() -> dict[Key, tuple[int, float]]:
    """The tally as the report reads it: folded rows plus pending changes, keys that net to zero left out."""
    columns = ("day", "project_id", "agent_id", "task_class", "status", "failure_reason_code", "lead_bucket")
    counts: Counter[Key] = Counter()
    leads: dict[Key, float] = {}
    for model in (ReportDayTally, ReportDayTallyChange):
        for *key, n, lead in model.objects.values_list(*columns, "n", "lead_seconds"):
            counts[tuple(key)] += n
            leads[tuple(key)] = leads.get(tuple(key), 0.0) + lead
    return {key: (n, leads[key]) for key, n in counts.items() if n}


def assert_tally_matches() -> None:
    expected, kept = counted_from_attempts(), tallied()
    assert set(kept) == set(expected)
    for key, (n, lead) in expected.items():
        assert kept[key][0] == n, key
        assert kept[key][1] == pytest.approx(lead, abs=1e-6), key


def finished_work(clock, project, agents) -> list[Task]:
    """Completed, failed, expired and released attempts over two days, by two agents and two classes."""
    tasks = []
    for number, agent in enumerate(agents * 3):
        task = task_create(
            project=project,
            title=f"Work {number}",
            actor=SYSTEM,
            status=TaskStatus.READY,
            task_class="api" if number % 2 else "ui",
        )
        tasks.append(task)
        clock.advance(600 * (number + 1))
        grant = lease_claim(task=task, agent=agent, lease_seconds=3600)
        clock.advance(300)
        if number % 3 == 0:
            attempt_finish(proof=proof_of(grant), outcome="done", result_summary="Done")
        elif number % 3 == 1:
            attempt_finish(proof=proof_of(grant), outcome="failed", failure_reason_code="tests_failed")
    clock.advance(20 * 3600)
    sweep_expired()  # the unfinished ones expire, on the day their lease lapsed
    return tasks


def test_ended_attempts_are_tallied_per_day_agent_class_status_reason_and_lead_bucket(clock):
    project = ProjectFactory()
    agents = [AgentFactory(projects=[project]) for _ in range(2)]
    finished_work(clock, project, agents)
    assert_tally_matches()
    assert {key[4] for key in tallied()} == {"completed", "failed", "expired"}
    assert any(key[6] != NO_LEAD for key in tallied())  # the completed ones have a lead time


def test_a_claim_and_a_renewal_append_nothing(clock):
    project = ProjectFactory()
    agent = AgentFactory(projects=[project])
    task = TaskFactory(project=project)
    before = ReportDayTallyChange.objects.count()
    lease_claim(task=task, agent=agent, lease_seconds=600)
    assert ReportDayTallyChange.objects.count() == before


def test_a_first_ready_time_written_after_the_attempts_moves_them_into_their_lead_bucket(clock):
    """An import writes the attempts before the events, so the first ready time arrives last."""
    project = ProjectFactory()
    agent = AgentFactory(projects=[project])
    task = TaskFactory(project=project, status=TaskStatus.READY)
    TaskFirstReady.objects.filter(task=task).delete()
    grant = lease_claim(task=task, agent=agent, lease_seconds=600)
    clock.advance(90)
    attempt_finish(proof=proof_of(grant), outcome="done", result_summary="Done")
    assert [key[6] for key in tallied()] == [NO_LEAD]

    TaskFirstReady.objects.create(task=task, ready_at=clock.now() - timedelta(hours=2))
    assert_tally_matches()
    assert [key[6] for key in tallied()] == [lead_bucket_of(2 * 3600)]
    TaskFirstReady.objects.filter(task=task).update(ready_at=clock.now() - timedelta(hours=5))
    assert_tally_matches()
    report = fleet_report(first=clock.now().date(), last=clock.now().date())
    assert report.total.lead_median == pytest.approx(5 * 3600)


def test_a_class_or_project_changed_after_the_finish_moves_the_attempts(clock):
    project, other = ProjectFactory(), ProjectFactory()
    agents = [AgentFactory(projects=[project, other]) for _ in range(2)]
    tasks = finished_work(clock, project, agents)
    task_update(task=tasks[0], actor=SYSTEM, changes={"task_class": "infra"})
    Task.objects.filter(pk=tasks[1].pk).update(project=other)
    assert_tally_matches()
    report = fleet_report(first=clock.now().date() - timedelta(days=2), last=clock.now().date(), project=other)
    assert report.total.failed + report.total.completed == 1


def test_a_set_based_update_moves_finish_days_statuses_and_agents(clock):
    project = ProjectFactory()
    agents = [AgentFactory(projects=[project]) for _ in range(2)]
    finished_work(clock, project, agents)
    Attempt.objects.filter(status="failed").update(finished_at=F("finished_at") - timedelta(days=3))
    Attempt.objects.filter(status="expired").update(agent=agents[0])
    Attempt.objects.filter(status="completed").update(status="released")
    assert_tally_matches()


def test_the_report_reads_the_same_before_and_after_a_fold(clock):
    project = ProjectFactory()
    agents = [AgentFactory(projects=[project]) for _ in range(2)]
    finished_work(clock, project, agents)
    day = clock.now().date()
    before = fleet_report(first=day - timedelta(days=3), last=day)
    assert report_tally_fold() > 0
    assert not ReportDayTallyChange.objects.exists()
    assert fleet_report(first=day - timedelta(days=3), last=day) == before
    assert report_tally_fold() == 0
    assert_tally_matches()


def test_the_report_counts_what_the_attempts_say(clock):
    """The page's figures from the rollup equal the ones counted from the attempts (nearest-rank lead time
    within its bucket's 2 %)."""
    project = ProjectFactory()
    agents = [AgentFactory(projects=[project]) for _ in range(2)]
    finished_work(clock, project, agents)
    day = clock.now().date()
    report = fleet_report(first=day - timedelta(days=3), last=day)
    ended = Attempt.objects.filter(finished_at__isnull=False)
    assert report.finished == ended.count()
    assert report.total.completed == ended.filter(status="completed").count()
    assert report.total.failed == ended.filter(status="failed").count()
    assert report.total.expired == ended.filter(status="expired").count()
    ready = dict(TaskFirstReady.objects.values_list("task_id", "ready_at"))
    leads = sorted((a.finished_at - ready[a.task_id]).total_seconds() for a in ended.filter(status="completed"))
    assert report.total.lead_median == pytest.approx(leads[(len(leads) + 1) // 2 - 1], rel=0.02)


def test_the_migration_backfill_computes_what_the_triggers_kept(clock):
    project = ProjectFactory()
    agents = [AgentFactory(projects=[project]) for _ in range(2)]
    finished_work(clock, project, agents)
    kept = tallied()
    ReportDayTally.objects.all().delete()
    ReportDayTallyChange.objects.all().delete()
    migration = importlib.import_module("insight.migrations.0003_report_tally")
    with connection.cursor() as cursor:
        cursor.execute(migration.backfill(connection.vendor))
    assert tallied().keys() == kept.keys()
    assert {key: n for key, (n, _) in tallied().items()} == {key: n for key, (n, _) in kept.items()}
    assert_tally_matches()


def test_the_report_triggers_exist_after_migrate():
    """A later SQLite migration that rebuilds the attempt, task or first-ready table drops them silently."""
    with connection.cursor() as cursor:
        if connection.vendor == "postgresql":
            cursor.execute("SELECT tgname FROM pg_trigger WHERE tgname LIKE 'insight%%' AND NOT tgisinternal")
        else:
            cursor.execute("SELECT name FROM sqlite_master WHERE type = 'trigger' AND name LIKE 'insight%'")
        names = {name for (name,) in cursor.fetchall()}
    assert names == {
        "insight_attempt_report_insert",
        "insight_attempt_report_update",
        "insight_first_ready_report_insert",
        "insight_first_ready_report_update",
        "insight_task_report_update",
        # Agent health's latest checkpoint per agent (insight.models.agent_checkpoint, migration insight 0004).
        "insight_note_checkpoint_insert",
        # Agent health's 7-day counts (insight.models.agent_day_tally, migration insight 0005).
        "insight_attempt_agent_day_insert",
        "insight_attempt_agent_day_update",
    }


def test_lead_buckets_are_two_percent_wide():
    assert lead_bucket_of(-1) == NO_LEAD
    assert lead_bucket_of(0) == lead_bucket_of(0.99) == 0
    assert lead_bucket_of(1) == 1
    assert lead_bucket_of(3600) < lead_bucket_of(3600 * 1.03)
    assert lead_bucket_of(3600) == lead_bucket_of(3600 * 1.0001)
    assert lead_bucket_of(datetime(2100, 1, 1, tzinfo=UTC).timestamp()) < 1100
