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

On PostgreSQL the secondary indexes and foreign keys of the tables the seed fills in bulk (events,
attempts, notes, path reservations, allocations) are dropped for the load, then the indexes built and the
keys added (checked) after it (`deferred_indexes`, PostgreSQL's "Populating a Database" advice): no trigger
of those tables reads those indexes (their triggers read tasks, attempts and the rollup tables by primary
key), a sorted build is a fraction of 10 million random insertions into each of them, and one join checks a
key for every row at once instead of one locking lookup per row. Unique indexes and primary keys stay, and
every trigger of the schema still fires on every row.

`align_lapses` (before every measurement, of a fresh seed or a kept one) makes the lapsed leases the same at
every scale: every live lease left is expired (untimed), then 200 leases that lapsed a minute before the
measurement starts are written, so its first sweep expires exactly those, however long the seed took.
`align_queue_wait` (likewise) leaves every waiting task alerted for its waiting period, as a fleet's
running queue-wait check would have, so every measurement's queue-wait check and alert panels meet only
the live work's alerts.
"""

from __future__ import annotations

import json
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


# The tables the seed fills in bulk, whose secondary indexes are built and foreign keys checked after the load
# (PostgreSQL).
DEFERRED_INDEX_TABLES = (
    "ledger_event",
    "leases_attempt",
    "leases_note",
    "leases_pathreservation",
    "leases_allocation",
)
# Memory for those builds (a session setting; the server's default is 64 MB: 10M events' sorts spill).
INDEX_BUILD_MEMORY = "1GB"


def _say(progress: Callable[[str], None] | None, started: float, text: str) -> None:
    if progress is not None:
        progress(f"[seed +{time.perf_counter() - started:7.1f} s] {text}")


def seed(
    tasks: int, now: datetime, *, extra: int, progress: Callable[[str], None] | None = None, defer: bool = True
) -> dict[str, Any]:
    """The ledger, and what the measurements need: {"sizes", "links", "project", "agent", "token", "phases"}.
    `progress` gets a line per phase and per bulk write (`bench.data`)."""
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
        if table.startswith(("index ", "foreign key ")):  # a deferred index's build, a key's check
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
        "phases": phases,
    }


@contextmanager
def deferred_indexes(
    tables: Sequence[str], *, progress: Callable[[str, int, float, float], None] | None = None
) -> Iterator[None]:
    """PostgreSQL: drop `tables`' secondary indexes (neither unique nor primary nor a constraint's) and their
    foreign keys for a bulk load; after it, build the indexes and add the foreign keys again under the same
    names and definitions (adding a foreign key checks every row in one join). Elsewhere: nothing.

    A foreign key is a pair of triggers: per row, a lookup that locks the referenced row (10 million events,
    four keys each, checked at COMMIT), 40 % of an event's insert at 10k tasks. The schema's own triggers
    are untouched and fire on every row."""
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
        indexes = cursor.fetchall()
        # A partition's copy of its table's key (conparentid) goes and comes back with the table's.
        cursor.execute(
            "SELECT conrelid::regclass::text, conname, pg_get_constraintdef(oid) FROM pg_constraint "
            "WHERE contype = 'f' AND conrelid = ANY(%s::regclass[]) AND conparentid = 0 ORDER BY conrelid, conname",
            [list(tables)],
        )
        keys = cursor.fetchall()
        for table, name, _ in keys:
            cursor.execute(f'ALTER TABLE {table} DROP CONSTRAINT "{name}"')
        for name, _ in indexes:
            cursor.execute(f"DROP INDEX {name}")
    try:
        yield
    finally:
        with connection.cursor() as cursor:
            cursor.execute(f"SET maintenance_work_mem = '{INDEX_BUILD_MEMORY}'")
            for name, definition in indexes:
                began = time.perf_counter()
                # A partitioned table's index reads `ON ONLY parent`: built on the parent, it builds every partition's.
                cursor.execute(definition.replace(" ON ONLY ", " ON ", 1))
                if progress is not None:
                    progress(f"index {name}", 0, time.perf_counter() - began, 0.0)
            cursor.execute("RESET maintenance_work_mem")
            for table, name, definition in keys:
                began = time.perf_counter()
                cursor.execute(f'ALTER TABLE {table} ADD CONSTRAINT "{name}" {definition}')
                if progress is not None:
                    progress(f"foreign key {name}", 0, time.perf_counter() - began, 0.0)


LAPSED = 200  # lapsed leases every measurement's first sweep meets (pages.seed's LIVE, at every scale)


def align_lapses(at: datetime, *, measuring_project: Any, count: int = LAPSED) -> int:
    """Make every measurement meet the same lapsed leases, whatever the seed's duration or the measurements
    before it on a kept database (`--reuse`): every live lease there is (the seed's, or `bench.held`'s of an
    earlier measurement) is expired first, untimed; then `count` leases that lapsed a minute before `at`
    are written (active attempts, through the attempt table's triggers: `Task.held`, the lease clock) on
    the newest ready tasks of the seeded projects other than the measuring one. Returns how many."""
    from django.db import connection, transaction
    from django.db.models import F

    from bench.data import ATTEMPT_COLUMNS, _copy_rows
    from bench.pages import PROJECTS
    from leases.models import Attempt
    from leases.services import sweep_expired
    from ledger.models import Agent, Task

    with transaction.atomic(), connection.cursor() as cursor:
        cursor.execute(
            f"UPDATE {Attempt._meta.db_table} SET lease_expires_at = %s WHERE status = 'active'",
            [at - timedelta(days=1)],
        )
    sweep_expired()
    seeded = [f"p{index}" for index in range(PROJECTS)]
    tasks = list(
        Task.objects.filter(status="ready", held=False, project__slug__in=seeded)
        .exclude(project=measuring_project)
        .order_by("-id")
        .values_list("id", "project_id", "epoch", "version")[:count]
    )
    agents = {
        project_id: Agent.objects.filter(projects=project_id).order_by("id").values_list("id", flat=True).first()
        for project_id in {project_id for _, project_id, _, _ in tasks}
    }
    claimed, steps = at - timedelta(minutes=16), json.dumps([])

    def rows() -> Iterator[tuple[Any, ...]]:
        for task_id, project_id, epoch, version in tasks:
            label = f"task={task_id};epoch={epoch + 1};lapsed"
            lease = (900, at - timedelta(minutes=1), claimed, 0, None)
            yield (task_id, agents[project_id], epoch + 1, "active", "0" * 64, "0" * 32, *lease, "", "", label,
                   version, "", steps, "", "", "", "")  # fmt: skip

    _copy_rows("leases_attempt", ATTEMPT_COLUMNS, rows())
    Task.objects.filter(pk__in=[task_id for task_id, *_ in tasks]).update(epoch=F("epoch") + 1)
    return len(tasks)


def align_queue_wait(at: datetime) -> int:
    """Mark every task waiting past its project's queue-wait threshold at `at` alerted for its waiting period,
    as the queue-wait check of a fleet that ran through the history the seed models would have left it:
    alerted long ago, so without an event in any window a page or job reads. Returns how many.

    A bulk-seeded backlog was never alerted: without this, the check alerts its bound (1,000) every run at
    1M and the whole backlog once at 10k, and the day of warnings that leaves (read by the dashboard's alert
    panels, counted by the incident check's tally catch-up and by `/metrics`) is the seed's, not live work
    (stops 42-43: the "`--runs 3` artefact"). The burst itself is measured on its own by
    `bench.jobs_growth` (its backlog row), and is bounded per run by `QUEUE_WAIT_ALERTS_PER_RUN`."""
    from django.db.models import F

    from ledger.models import QUEUE_WAIT_UNALERTED, Project, Task

    aligned = 0
    for project in Project.objects.all():
        # Every ready task, held or not: the 200 lapsed leases `align_lapses` wrote are swept back to
        # claimable with their waiting period unchanged, and a fleet's check alerted it before they were held.
        threshold = at - timedelta(seconds=project.queue_wait_max_seconds)
        waiting = Task.objects.filter(QUEUE_WAIT_UNALERTED, project=project, status="ready", ready_since__lte=threshold)
        aligned += waiting.update(queue_wait_alerted_for=F("ready_since"))
    return aligned


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
