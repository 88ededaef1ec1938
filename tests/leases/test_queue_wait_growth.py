"""The queue-wait check follows the alerts it may write, not history (issue 33, SPEC §25).

The check reads a project's tasks past the threshold that are not yet alerted for their waiting period
through the partial index `task_queue_wait_unalerted`, whose condition is the check's own filter
(`ledger.models.QUEUE_WAIT_UNALERTED`). These tests hold: the plan names that index (PostgreSQL `EXPLAIN`,
SQLite `EXPLAIN QUERY PLAN`), the rows it reads on PostgreSQL are the unalerted ones only, and the statements
of a run are the same with ten times the done and alerted tasks.
"""

from __future__ import annotations

import re

import pytest
from django.db import connection
from django.db.models import F
from django.test.utils import CaptureQueriesContext

from leases.selectors import queue_wait_unalerted, queue_wait_unalerted_rows
from leases.services import check_queue_wait
from ledger import clock as ledger_clock
from ledger.models import Event, EventType, Project, Task, TaskStatus
from ledger.services.tasks import task_numbers_take
from tests.factories import ProjectFactory, TaskFactory

pytestmark = pytest.mark.django_db

INDEX = "task_queue_wait_unalerted"


@pytest.fixture
def project():
    return ProjectFactory(slug="web", queue_wait_max_seconds=600)


def bulk_tasks(project: Project, count: int, *, status: str) -> list[int]:
    """`count` tasks written in one statement (the task triggers fire; no events: history, not the subject)."""
    numbers = task_numbers_take(project, count)
    now = ledger_clock.now()
    rows = [
        Task(
            project=project,
            number=number,
            key=f"{project.key_prefix}-{number}",
            title=f"history {number}",
            status=status,
            ready_since=now if status == TaskStatus.READY else None,
            created_at=now,
            updated_at=now,
        )
        for number in numbers
    ]
    return [task.pk for task in Task.objects.bulk_create(rows)]


def history(project: Project, *, done: int, alerted: int) -> None:
    """`done` finished tasks and `alerted` ready ones already alerted for their present waiting period."""
    bulk_tasks(project, done, status=TaskStatus.DONE)
    waiting = bulk_tasks(project, alerted, status=TaskStatus.READY)
    Task.objects.filter(pk__in=waiting).update(queue_wait_alerted_for=F("ready_since"))


def plan_of(project: Project, now) -> str:
    sql, params = queue_wait_unalerted(project, now=now, limit=1000).query.sql_with_params()
    with connection.cursor() as cursor:
        if connection.vendor == "postgresql":
            cursor.execute("ANALYZE ledger_task")
            # A table this small is read whole, or by a bitmap and a sort, whatever its indexes: with those
            # off, the plan shows which index can serve the check (its condition implied by the query's).
            for setting in ("enable_seqscan", "enable_bitmapscan", "enable_sort", "enable_incremental_sort"):
                cursor.execute(f"SET LOCAL {setting} = off")
            cursor.execute(f"EXPLAIN (ANALYZE, COSTS OFF, TIMING OFF, SUMMARY OFF) {sql}", params)
        else:
            cursor.execute("ANALYZE")
            cursor.execute(f"EXPLAIN QUERY PLAN {sql}", params)
        return "\n".join(" ".join(str(part) for part in row) for row in cursor.fetchall())


def rows_read_by_the_index(plan: str) -> int:
    """PostgreSQL: the rows the scan of the partial index returned (`actual rows=`)."""
    line = next(line for line in plan.splitlines() if INDEX in line)
    found = re.search(r"actual rows=(\d+)", line)
    assert found, plan
    return int(found.group(1))


def test_the_check_reads_the_unalerted_tasks_by_their_partial_index(clock, project):
    history(project, done=400, alerted=300)
    clock.advance(600)
    fresh = TaskFactory.create_batch(3, project=project)  # below the threshold: in the index, not read past it
    clock.advance(600)
    plan = plan_of(project, clock.now())
    assert INDEX in plan, plan
    assert check_queue_wait() == 3
    assert set(Event.objects.filter(type=EventType.TASK_QUEUE_WAIT_EXCEEDED).values_list("task_id", flat=True)) == {
        task.pk for task in fresh
    }
    assert check_queue_wait() == 0


@pytest.mark.skipif(connection.vendor != "postgresql", reason="actual row counts come from PostgreSQL's EXPLAIN")
def test_the_rows_read_do_not_grow_with_done_or_alerted_tasks(clock, project):
    """At N and 10N done and alerted tasks, the index scan returns the two unalerted waiting tasks only."""
    read = []
    for size in (10, 100):
        history(project, done=size, alerted=size)
        clock.advance(601)
        TaskFactory.create_batch(2, project=project)
        clock.advance(601)
        plan = plan_of(project, clock.now())
        read.append(rows_read_by_the_index(plan))
        assert check_queue_wait() == 2
    assert read == [2, 2]


def test_a_run_is_the_same_statements_at_ten_times_the_history(clock, project):
    counts = []
    for size in (10, 100):
        history(project, done=size, alerted=size)
        clock.advance(601)
        with CaptureQueriesContext(connection) as captured:
            assert check_queue_wait() == 0
        counts.append(len(captured.captured_queries))
    assert counts[0] == counts[1]


def test_the_compiled_read_answers_as_the_queryset(clock, project):
    """The check reads through `queue_wait_unalerted_rows`, compiled once (issue 33: building the rule's
    queryset was most of a project's read): the same rows as `queue_wait_unalerted`, cut at the limit."""
    history(project, done=5, alerted=4)
    TaskFactory.create_batch(3, project=project)
    other = ProjectFactory(slug="api", queue_wait_max_seconds=60)
    TaskFactory.create_batch(2, project=other)
    clock.advance(601)
    TaskFactory.create_batch(2, project=project)  # below the threshold
    now = clock.now()
    for each, limit in ((project, 10), (project, 2), (other, 10)):
        expected = list(queue_wait_unalerted(each, now=now, limit=limit))
        assert queue_wait_unalerted_rows(each, now=now, limit=limit) == expected
    assert len(queue_wait_unalerted_rows(project, now=now, limit=10)) == 3
    assert len(queue_wait_unalerted_rows(other, now=now, limit=10)) == 2
