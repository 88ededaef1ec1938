"""The growth workload's ledger (issue 33): `tasks` tasks with 60 days of history, written in bulk.

Per task: 3 attempts, 3 notes (one per attempt), 1 allocation and 10 events, as the issue's outside
measurement had them. The tasks, attempts and events are `bench.pages.seed`'s (COPY on PostgreSQL,
one executemany on SQLite, through the tables' names; the schema's triggers fire on every row: the
rollups, `Task.held`, the lease samples), plus, here:

- each task's epoch set to its last attempt's (the seed leaves it at 0: a claim of such a task would
  collide with its history);
- one checkpoint note per attempt (`bench.data.bulk_notes`: the notes' search triggers index them);
- one environment per project and one released allocation per task (its last finished attempt), by an
  `INSERT … SELECT` (the allocation table has no trigger);
- the agent the measurements act as (`agent_create`, so its API token is known) and `EXTRA_READY + extra`
  fresh ready tasks in the second project, behind its seeded ready ones, so the operations and the
  1,000 storage cycles never run out of work at the smallest scale.

Then the pending rollup changes are folded (as the sweep job does every minute) and the database is
vacuumed and analyzed once (as autovacuum would leave it).
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

BASE_TASKS = 10_000
EXTRA_READY = 200
ATTEMPTS_PER_TASK = 3
EVENTS_PER_TASK = 10


def scale_of(tasks: int) -> tuple[int, dict[str, int]]:
    """`bench.pages.seed`'s (scale, base) for `tasks` tasks: whole multiples of 10,000, or one smaller base."""
    if tasks >= BASE_TASKS and tasks % BASE_TASKS == 0:
        return tasks // BASE_TASKS, {"tasks": BASE_TASKS, "attempts": 3 * BASE_TASKS, "events": 10 * BASE_TASKS}
    return 1, {"tasks": tasks, "attempts": ATTEMPTS_PER_TASK * tasks, "events": EVENTS_PER_TASK * tasks}


def seed(tasks: int, now: datetime, *, extra: int) -> dict[str, Any]:
    """The ledger, and what the measurements need: {"sizes", "links", "project", "agent", "token"}."""
    from bench import data, pages
    from insight.services import rollups, task_counts
    from ledger.actors import SYSTEM
    from ledger.models import Project, Task
    from ledger.services import agent_create

    scale, base = scale_of(tasks)
    sizes = pages.seed(scale, now, base=base, vacuum=False)
    links = sizes.pop("links")
    last_task = Task.objects.order_by("-id").values_list("id", flat=True).first()
    Task.objects.filter(pk__lte=last_task).update(epoch=ATTEMPTS_PER_TASK)
    sizes["notes"] = _notes(now)
    sizes["allocations"] = _allocations(now)
    project = Project.objects.order_by("id")[1]  # the first has landing on (bench.page_list.seed_extras)
    agent, token = agent_create(handle="growth-agent", kind="claude", projects=[project], actor=SYSTEM)
    data.bulk_ready_tasks(project, EXTRA_READY + extra, since=now)
    task_counts.task_counts_fold()
    rollups.fleet_tally_fold()
    data.vacuum_analyze()
    return {"sizes": sizes, "links": links, "project": project, "agent": agent, "token": token}


def _notes(now: datetime) -> int:
    from bench.data import bulk_notes
    from leases.models import Attempt

    ids = Attempt.objects.order_by("id").values_list("id", flat=True)
    first, last = ids.first(), ids.last()
    if first is None or last is None:
        return 0
    return bulk_notes(first, last, per_attempt=1, now=now)


def _allocations(now: datetime) -> int:
    """One environment per project; one released allocation on each task's last finished attempt."""
    from django.db import connection, transaction

    from environments.models import Environment, EnvironmentKind
    from leases.models import Allocation, Attempt
    from ledger.models import Project, Task

    for project in Project.objects.all():
        Environment.objects.create(
            project=project, name="growth-db", kind=EnvironmentKind.DATABASE, created_at=now, updated_at=now
        )
    tables = {
        "allocation": Allocation._meta.db_table,
        "attempt": Attempt._meta.db_table,
        "task": Task._meta.db_table,
        "environment": Environment._meta.db_table,
    }
    sql = (
        "INSERT INTO {allocation} (environment_id, attempt_id, status, allocated_at, released_at, provisioned) "
        "SELECT e.id, a.id, 'released', a.claimed_at, a.finished_at, '{{}}' FROM {attempt} a "
        "JOIN {task} t ON t.id = a.task_id JOIN {environment} e ON e.project_id = t.project_id "
        "WHERE a.epoch = %s AND a.finished_at IS NOT NULL"
    ).format(**tables)
    with transaction.atomic(), connection.cursor() as cursor:
        cursor.execute(sql, [ATTEMPTS_PER_TASK])
        return cursor.rowcount
