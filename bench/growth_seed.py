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

Then the pending rollup changes are folded (as the sweep job does every minute), `/metrics`' event tally
is caught up (`event_tally_catch_up`, as the incident job does every minute: unfolded, the first scrapes
would count the seeded history, 200k events each, at every scale above 20k tasks) and the database is
vacuumed and analyzed once (as autovacuum would leave it).

On PostgreSQL the secondary indexes of the four tables the seed fills in bulk (events, attempts, notes,
path reservations) are dropped for the load and built after it (`deferred_indexes`): no trigger of those
tables reads them (their triggers read tasks, attempts and the rollup tables by primary key), and a sorted
build is a fraction of 10 million random insertions into each of them. Unique indexes and primary keys stay,
and every trigger still fires on every row.

`align_lapses` (before every measurement, of a fresh seed or a kept one) makes the lapsed leases the same at
every scale: the seed's LIVE live leases lapsed a minute before the measurement starts, and no other.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from datetime import datetime, timedelta
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


# The tables the seed fills in bulk, whose secondary indexes are built after the load (PostgreSQL).
DEFERRED_INDEX_TABLES = ("ledger_event", "leases_attempt", "leases_note", "leases_pathreservation")
# Memory for those builds (a session setting; the server's default is 64 MB: 10M events' sorts spill).
INDEX_BUILD_MEMORY = "1GB"


def _say(progress: Callable[[str], None] | None, started: float, text: str) -> None:
    if progress is not None:
        progress(f"[seed +{time.perf_counter() - started:7.1f} s] {text}")


def seed(
    tasks: int, now: datetime, *, extra: int, progress: Callable[[str], None] | None = None, defer: bool = True
) -> dict[str, Any]:
    """The ledger, and what the measurements need: {"sizes", "links", "project", "agent", "token",
    "last_seeded_attempt", "phases"}. `progress` gets a line per phase and per bulk write (`bench.data`)."""
    from bench import data, pages
    from insight.services import rollups, task_counts
    from insight.services.event_tally import event_tally_catch_up
    from ledger.actors import SYSTEM
    from ledger.models import Project, Task
    from ledger.services import agent_create

    started = time.perf_counter()
    phases: dict[str, float] = {}

    @contextmanager
    def phase(name: str) -> Iterator[None]:
        began = time.perf_counter()
        _say(progress, started, f"{name} ...")
        yield
        phases[name] = round(time.perf_counter() - began, 1)
        _say(progress, started, f"{name}: {phases[name]} s")

    def copied(table: str, rows: int, seconds: float, generating: float) -> None:
        if table.startswith("index "):  # a deferred index's build
            phases[table] = round(seconds, 1)
            _say(progress, started, f"  {table} built in {seconds:.1f} s")
            return
        key = f"copy {table}"
        phases[key] = round(phases.get(key, 0.0) + seconds, 1)
        phases[f"{key}, making the rows"] = round(phases.get(f"{key}, making the rows", 0.0) + generating, 1)
        _say(progress, started, f"  {table}: {rows:,} rows in {seconds:.1f} s ({generating:.1f} s making them)")

    scale, base = scale_of(tasks)
    data.copy_progress = copied
    try:
        with phase("bulk load"), deferred_indexes(DEFERRED_INDEX_TABLES if defer else (), progress=copied):
            sizes = pages.seed(scale, now, base=base, vacuum=False)
            links = sizes.pop("links")
            last_task = Task.objects.order_by("-id").values_list("id", flat=True).first()
            Task.objects.filter(pk__lte=last_task).update(epoch=ATTEMPTS_PER_TASK)
            sizes["notes"] = _notes(now)
            sizes["allocations"] = _allocations(now)
    finally:
        data.copy_progress = None
    last_seeded_attempt = _last_attempt()
    project = Project.objects.order_by("id")[1]  # the first has landing on (bench.page_list.seed_extras)
    agent, token = agent_create(handle="growth-agent", kind="claude", projects=[project], actor=SYSTEM)
    data.bulk_ready_tasks(project, EXTRA_READY + extra, since=now)
    with phase("folds"):
        task_counts.task_counts_fold()
        rollups.fleet_tally_fold()
    with phase("event tally catch-up"):
        sizes["events_tallied"] = event_tally_catch_up()
    with phase("vacuum analyze"):
        data.vacuum_analyze()
    phases["total"] = round(time.perf_counter() - started, 1)
    return {
        "sizes": sizes,
        "links": links,
        "project": project,
        "agent": agent,
        "token": token,
        "last_seeded_attempt": last_seeded_attempt,
        "phases": phases,
    }


def _last_attempt() -> int:
    from leases.models import Attempt

    return Attempt.objects.order_by("-id").values_list("id", flat=True).first() or 0


@contextmanager
def deferred_indexes(
    tables: Sequence[str], *, progress: Callable[[str, int, float, float], None] | None = None
) -> Iterator[None]:
    """PostgreSQL: drop `tables`' secondary indexes (neither unique nor primary nor a constraint's) for a bulk
    load, and build them again after it, under the same names and definitions. Elsewhere: nothing."""
    from django.db import connection

    if not tables or connection.vendor != "postgresql":
        yield
        return
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT i.indexrelid::regclass::text, pg_get_indexdef(i.indexrelid) FROM pg_index i "
            "WHERE i.indrelid = ANY(%s::regclass[]) AND NOT i.indisunique AND NOT i.indisprimary "
            "AND NOT EXISTS (SELECT 1 FROM pg_constraint c WHERE c.conindid = i.indexrelid) "
            "ORDER BY i.indrelid, i.indexrelid",
            [list(tables)],
        )
        found = cursor.fetchall()
        for name, _ in found:
            cursor.execute(f"DROP INDEX {name}")
    try:
        yield
    finally:
        with connection.cursor() as cursor:
            cursor.execute(f"SET maintenance_work_mem = '{INDEX_BUILD_MEMORY}'")
            for name, definition in found:
                began = time.perf_counter()
                # A partitioned table's index reads `ON ONLY parent`: built on the parent, it builds every partition's.
                cursor.execute(definition.replace(" ON ONLY ", " ON ", 1))
                if progress is not None:
                    progress(f"index {name}", 0, time.perf_counter() - began, 0.0)
            cursor.execute("RESET maintenance_work_mem")


def align_lapses(last_seeded_attempt: int, at: datetime) -> int:
    """Make every measurement meet the same lapsed leases, whatever the seed's duration or the measurements
    before it on a kept database: the seed's live leases (attempt ids up to `last_seeded_attempt`) lapse a
    minute before `at`; every other live lease (left by an earlier measurement: `bench.held`'s holds) is
    expired first, untimed. Returns how many seeded leases are lapsed for the measurement's first sweep."""
    from django.db import connection, transaction

    from leases.models import Attempt
    from leases.services import sweep_expired

    table = Attempt._meta.db_table
    with transaction.atomic(), connection.cursor() as cursor:
        cursor.execute(
            f"UPDATE {table} SET lease_expires_at = %s WHERE status = 'active' AND id <= %s",
            [at + timedelta(days=1), last_seeded_attempt],
        )
        cursor.execute(
            f"UPDATE {table} SET lease_expires_at = %s WHERE status = 'active' AND id > %s",
            [at - timedelta(days=1), last_seeded_attempt],
        )
    sweep_expired()
    with transaction.atomic(), connection.cursor() as cursor:
        cursor.execute(
            f"UPDATE {table} SET lease_expires_at = %s WHERE status = 'active' AND id <= %s",
            [at - timedelta(minutes=1), last_seeded_attempt],
        )
        return cursor.rowcount


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
