"""Ending lapsed leases: lazily inside claims and holder calls, and in batches by the sweep.

Expiry never changes a task's stored status and keeps every note (SPEC §3).
It only marks the attempt `expired`, marks its allocations `stale`, appends
`attempt.expired`, and records that the task became claimable again
(`ready_since`). `expire_lapsed` writes that with the ORM; a sweep batch
writes exactly the same rows set-based, with no Python per row: one statement on
PostgreSQL (`SWEEP_BATCH_SQL`), four on SQLite (`SQLITE_SWEEP_SQL`).
"""

from __future__ import annotations

import functools
import json
import sqlite3
import time
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime

from django.db import connection
from django.db.models import F, Q

from core.db import postgres_plan, write_transaction
from leases.models import Allocation, AllocationStatus, Attempt, AttemptStatus, LeaseClock
from leases.selectors import QUEUE_WAIT_READ, queue_wait_unalerted_rows
from leases.services.allocations import mark_allocations_stale
from leases.services.quarantine import quarantine_failing
from ledger import clock
from ledger.actors import SYSTEM
from ledger.models import Agent, Event, EventType, Project, Severity, Task, TaskStatus
from ledger.services import event_append, tasks_wait_again

SWEEP_BATCH_SIZE = 500
# On SQLite a batch holds the only write lock, so claims wait for it: between
# batches the sweep pauses so that a writer queued on the lock gets it before
# the next batch does (docs/performance.md, W5). Batches were 100 while a batch
# cost Python per row; set-based, 500 hold the lock no longer than 100 did.
SQLITE_SWEEP_BATCH_SIZE = 500
SQLITE_SWEEP_PAUSE_SECONDS = 0.005
EXPIRED_EVENT = EventType.ATTEMPT_EXPIRED


def expire_lapsed(attempt_ids: Sequence[int], *, now: datetime) -> int:
    """Mark these attempts expired if they are still active with a lapsed lease.

    Call it inside a transaction that has the attempts locked (or on SQLite,
    inside the write transaction). Appends exactly one `attempt.expired` per
    attempt it changes and returns how many that is.
    """
    # Locked here: a concurrent holder call or sweep that expired one of them
    # first makes it drop out of this result (READ COMMITTED re-checks it).
    lapsed = list(
        Attempt.objects.select_for_update(no_key=True, of=("self",))
        .filter(pk__in=attempt_ids, status=AttemptStatus.ACTIVE, lease_expires_at__lte=now)
        .values("id", "task_id", "task__project_id", "epoch", "agent__handle", "lease_expires_at")
    )
    if not lapsed:
        return 0
    ids = [row["id"] for row in lapsed]
    changed = Attempt.objects.filter(pk__in=ids, status=AttemptStatus.ACTIVE).update(
        status=AttemptStatus.EXPIRED, finished_at=F("lease_expires_at")
    )
    if changed != len(ids):
        raise RuntimeError("expire_lapsed needs the attempts locked by its transaction")
    mark_allocations_stale(ids)
    Event.objects.bulk_create(
        Event(
            type=EXPIRED_EVENT,
            severity=Severity.INFO,
            project_id=row["task__project_id"],
            task_id=row["task_id"],
            attempt_id=row["id"],
            payload={
                "agent": row["agent__handle"],
                "epoch": row["epoch"],
                "lapsed_at": row["lease_expires_at"].isoformat(),
            },
            created_at=now,
        )
        for row in lapsed
    )
    # The task became claimable again when its lease lapsed; set from the
    # rows in hand (a correlated subquery here went quadratic in the sweep).
    tasks_wait_again({row["task_id"]: row["lease_expires_at"] for row in lapsed})
    # SPEC §16.4: the expiry that completes a streak of failures quarantines the task, here.
    quarantine_failing({row["task_id"] for row in lapsed}, now=now)
    return changed


@dataclass(frozen=True)
class SweepReport:
    expired: int
    batches: int
    worst_batch_seconds: float


# One sweep batch on PostgreSQL: the writes of `expire_lapsed`, row for row, in
# one statement with no Python per row (docs/performance.md, F4). Every
# sub-statement sees the same snapshot; the UPDATE re-checks the rows `batch`
# locked, and the others read what it RETURNS. Data-modifying CTEs run to
# completion whether or not the final SELECT reads them, and the INSERT fires
# `ledger_event`'s statement triggers as a plain INSERT does. Table names and
# constants come from the models (formatted in once, see `_sweep_batch_sql`;
# the columns are the fields' own names, none sets `db_column`); only `now` and
# `batch_size` are parameters, so the partial index on active leases matches
# the literal status whatever the driver's binding.
SWEEP_BATCH_SQL = """
WITH batch AS (
    -- The sweep's order through the partial index. It locks the task too, and
    -- never waits: an attempt or task another sweep, a holder call or a claim
    -- has locked is theirs to expire (a claim locks the task, then the lapsed
    -- attempt; waiting for that task later, in `ready`, would deadlock). A row
    -- locked and then skipped stays locked until the batch commits, so such a
    -- claim may wait for one batch; the batch never waits for it.
    -- The lapsed leases come from the lease clock's expiry index (SPEC §25: the attempt table has none).
    SELECT a.id FROM {clock} AS c
    JOIN {attempt} AS a ON a.id = c.attempt_id
    JOIN {task} AS t ON t.id = a.task_id
    WHERE c.expires_at <= %(now)s AND a.status = '{attempt_active}' AND a.lease_expires_at <= %(now)s
    ORDER BY c.expires_at
    LIMIT %(batch_size)s
    FOR NO KEY UPDATE OF a, t SKIP LOCKED
),
expired AS (
    UPDATE {attempt} AS a
    SET status = '{attempt_expired}', finished_at = a.lease_expires_at
    FROM batch
    WHERE a.id = batch.id AND a.status = '{attempt_active}'
    RETURNING a.id, a.task_id, a.agent_id, a.epoch, a.lease_expires_at
),
stale AS (
    -- mark_allocations_stale: status only, no event.
    UPDATE {allocation} SET status = '{allocation_stale}'
    WHERE attempt_id IN (SELECT id FROM expired) AND status = '{allocation_active}'
),
events AS (
    -- The ORM path's payload: `lapsed_at` as Python's isoformat() of the UTC
    -- value, whose microseconds appear only when non-zero, always 6 digits.
    -- Ids are drawn in the ORM path's order too (Attempt's ordering, -id).
    INSERT INTO {event} (project_id, task_id, attempt_id, type, severity, payload, created_at)
    SELECT task.project_id, expired.task_id, expired.id, '{event_type}', '{severity}',
           jsonb_build_object(
               'agent', agent.handle,
               'epoch', expired.epoch,
               'lapsed_at', replace(
                   to_char(expired.lease_expires_at AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.US'),
                   '.000000', ''
               ) || '+00:00'
           ),
           %(now)s
    FROM expired
    JOIN {task} AS task ON task.id = expired.task_id
    JOIN {agent} AS agent ON agent.id = expired.agent_id
    ORDER BY expired.id DESC
),
ready AS (
    -- One active attempt per task, so at most one lapsed lease per task.
    UPDATE {task} AS task SET ready_since = expired.lease_expires_at
    FROM expired
    WHERE task.id = expired.task_id AND task.status = '{task_ready}'
)
SELECT expired.task_id FROM expired
"""


@functools.cache
def _sweep_batch_sql() -> str:
    return SWEEP_BATCH_SQL.format(**_sweep_sql_constants())


# One sweep batch on SQLite, set-based as on PostgreSQL (SQLite has no data-modifying CTEs, so
# the batch is four statements, still with no Python per row): the UPDATE picks and ends the
# batch and RETURNS it; the others read the ended attempts by id (a JSON array, one parameter).
# The batch holds SQLite's write lock from its first statement, so nothing else can end or take
# these rows meanwhile. Django stores a datetime as 'YYYY-MM-DD HH:MM:SS[.ffffff]' in UTC, so
# `lapsed_at` is Python's isoformat() of it: a 'T' and '+00:00'. `json_object` writes the
# payload without spaces; the JSON field reads it back as the same value.
SQLITE_SWEEP_SQL = (
    """
    UPDATE {attempt} SET status = '{attempt_expired}', finished_at = lease_expires_at
    WHERE id IN (
        SELECT attempt_id FROM {clock} WHERE expires_at <= %(now)s ORDER BY expires_at LIMIT %(batch_size)s
    ) AND status = '{attempt_active}' AND lease_expires_at <= %(now)s
    RETURNING id, task_id
    """,
    """
    UPDATE {allocation} SET status = '{allocation_stale}'
    WHERE attempt_id IN (SELECT value FROM json_each(%(ids)s)) AND status = '{allocation_active}'
    """,
    """
    INSERT INTO {event} (project_id, task_id, attempt_id, type, severity, payload, created_at)
    SELECT task.project_id, a.task_id, a.id, '{event_type}', '{severity}',
           json_object(
               'agent', agent.handle,
               'epoch', a.epoch,
               'lapsed_at', replace(a.lease_expires_at, ' ', 'T') || '+00:00'
           ),
           %(now)s
    FROM {attempt} AS a
    JOIN {task} AS task ON task.id = a.task_id
    JOIN {agent} AS agent ON agent.id = a.agent_id
    WHERE a.id IN (SELECT value FROM json_each(%(ids)s))
    ORDER BY a.id DESC
    """,
    """
    UPDATE {task} SET ready_since = ended.lease_expires_at
    FROM (SELECT task_id, lease_expires_at FROM {attempt} WHERE id IN (SELECT value FROM json_each(%(ids)s)))
        AS ended
    WHERE {task}.id = ended.task_id AND {task}.status = '{task_ready}'
    """,
)


def _sweep_sql_constants() -> dict[str, str]:
    return {
        "attempt": Attempt._meta.db_table,
        "clock": LeaseClock._meta.db_table,
        "allocation": Allocation._meta.db_table,
        "event": Event._meta.db_table,
        "task": Task._meta.db_table,
        "agent": Agent._meta.db_table,
        "attempt_active": AttemptStatus.ACTIVE.value,
        "attempt_expired": AttemptStatus.EXPIRED.value,
        "allocation_active": AllocationStatus.ACTIVE.value,
        "allocation_stale": AllocationStatus.STALE.value,
        "event_type": EXPIRED_EVENT,
        "severity": Severity.INFO.value,
        "task_ready": TaskStatus.READY.value,
    }


@functools.cache
def _sqlite_sweep_sql() -> tuple[str, ...]:
    constants = _sweep_sql_constants()
    return tuple(statement.format(**constants) for statement in SQLITE_SWEEP_SQL)


def _sqlite_sweep_batch(*, now: datetime, batch_size: int) -> list[int]:
    """`SQLITE_SWEEP_SQL` inside the caller's write transaction; returns the ended attempts' task ids."""
    pick, stale, events, ready = _sqlite_sweep_sql()
    moment = connection.ops.adapt_datetimefield_value(now)
    with connection.cursor() as cursor:
        cursor.execute(pick, {"now": moment, "batch_size": batch_size})
        ended = cursor.fetchall()
        if not ended:
            return []
        ids = json.dumps([attempt_id for attempt_id, _ in ended])
        cursor.execute(stale, {"ids": ids})
        cursor.execute(events, {"ids": ids, "now": moment})
        cursor.execute(ready, {"ids": ids})
    return [task_id for _, task_id in ended]


# `SQLITE_SWEEP_SQL` needs UPDATE … RETURNING (SQLite 3.35) and UPDATE … FROM (3.33); Django 5.2
# runs on 3.31, so an older SQLite sweeps through `expire_lapsed`, which writes the same rows.
SQLITE_SET_BASED_SWEEP = sqlite3.sqlite_version_info >= (3, 35, 0)


def _sweeps_in_one_statement() -> bool:
    if connection.vendor == "sqlite":
        return SQLITE_SET_BASED_SWEEP
    return connection.vendor == "postgresql"


@write_transaction
def _sweep_batch(*, now: datetime, batch_size: int) -> int:
    if _sweeps_in_one_statement():
        if connection.vendor == "sqlite":
            task_ids = _sqlite_sweep_batch(now=now, batch_size=batch_size)
        else:
            with connection.cursor() as cursor:
                cursor.execute(_sweep_batch_sql(), {"now": now, "batch_size": batch_size})
                task_ids = [task_id for (task_id,) in cursor.fetchall()]
        # SPEC §16.4, in the batch's transaction, as `expire_lapsed` does on the ORM path.
        quarantine_failing(task_ids, now=now)
        return len(task_ids)
    # Attempt and task locked together, never waiting, as in SWEEP_BATCH_SQL.
    batch = (
        Attempt.objects.filter(status=AttemptStatus.ACTIVE, clock__expires_at__lte=now, lease_expires_at__lte=now)
        .select_related("task")
        .only("id", "task__id")
        .order_by("clock__expires_at")
        .select_for_update(skip_locked=True, no_key=True, of=("self", "task"))[:batch_size]
    )
    ids = [attempt.pk for attempt in batch]
    return expire_lapsed(ids, now=now) if ids else 0


def default_sweep_batch_size() -> int:
    return SQLITE_SWEEP_BATCH_SIZE if connection.vendor == "sqlite" else SWEEP_BATCH_SIZE


def sweep_expired(*, batch_size: int | None = None) -> SweepReport:
    """Expire every active attempt whose lease lapsed before now, in short batches.

    Reads the lapsed leases from the lease clock's expiry index. Each batch is its own
    transaction and takes its rows with SKIP LOCKED on PostgreSQL, so two
    sweeps at once split the work and each attempt gets one event (on SQLite
    the write lock serialises them). A batch is set-based: one statement on
    PostgreSQL (`SWEEP_BATCH_SQL`), four on SQLite (`SQLITE_SWEEP_SQL`); both
    write the rows `expire_lapsed` writes.
    """
    now = clock.now()
    batch_size = batch_size or default_sweep_batch_size()
    expired = batches = 0
    worst = 0.0
    while True:
        started = time.perf_counter()
        count = _sweep_batch(now=now, batch_size=batch_size)
        worst = max(worst, time.perf_counter() - started)
        expired += count
        batches += 1
        if count < batch_size:
            return SweepReport(expired=expired, batches=batches, worst_batch_seconds=worst)
        if connection.vendor == "sqlite":
            # Releasing a lock and taking it again at once would win against a
            # waiter the kernel has only just woken: claims would wait out the sweep.
            time.sleep(SQLITE_SWEEP_PAUSE_SECONDS)


@write_transaction
def _alert_queue_wait(*, task_id: int, ready_since: datetime, waited_seconds: int, now: datetime) -> bool:
    marked = (
        Task.objects.filter(pk=task_id, ready_since=ready_since)
        .filter(Q(queue_wait_alerted_for__isnull=True) | ~Q(queue_wait_alerted_for=ready_since))
        .update(queue_wait_alerted_for=ready_since)
    )
    if marked:
        task = Task.objects.select_related("project").get(pk=task_id)
        event_append(
            type=EventType.TASK_QUEUE_WAIT_EXCEEDED,
            severity=Severity.WARN,
            actor=SYSTEM,
            at=now,
            task=task,
            payload={"ready_since": ready_since.isoformat(), "waited_seconds": waited_seconds},
        )
    return bool(marked)


# The most queue-wait alerts one run of the check writes (each is an event and a task write).
QUEUE_WAIT_ALERTS_PER_RUN = QUEUE_WAIT_READ  # one compiled read's rows: what a run may alert


# PostgreSQL, for the check's read: the partial index serves its order (ready_since, id) whole; the ready
# tasks' index `task_ready_since` serves it only with an incremental sort. PostgreSQL cannot estimate the
# unalerted condition (it took 69,251 rows for 0 at 1M), and once the partial index has held a backlog
# alerted since (its pages stay), it costed `task_ready_since` cheaper and walked every waiting task of the
# project, alerted or not: 74,432 rows filtered, 16 ms a project (docs/performance.md, "At 1M, measured
# (stop 44)"). Without incremental sort that plan needs a full sort of its estimate, and loses.
UNALERTED_PLAN = {"enable_incremental_sort": "off"}


def _unalerted(now: datetime) -> list[tuple[int, datetime | None]]:
    """The tasks a run may alert, `queue_wait_unalerted_rows` project by project, at most QUEUE_WAIT_ALERTS_PER_RUN;
    on PostgreSQL the reads in one transaction under UNALERTED_PLAN (two statements more a run, not a project)."""
    found: list[tuple[int, datetime | None]] = []

    def read() -> None:
        for project in Project.objects.filter(archived_at__isnull=True):
            if len(found) >= QUEUE_WAIT_ALERTS_PER_RUN:
                break
            found.extend(queue_wait_unalerted_rows(project, now=now, limit=QUEUE_WAIT_ALERTS_PER_RUN - len(found)))

    with postgres_plan(UNALERTED_PLAN):
        read()
    return found


def check_queue_wait() -> int:
    """One `task.queue_wait_exceeded` warn event per waiting period of a claimable task.

    A waiting period is identified by `ready_since`; a compare-and-set on
    `queue_wait_alerted_for` makes two concurrent checks alert once.

    At most `QUEUE_WAIT_ALERTS_PER_RUN` alerts a run, longest waiting first per project: a backlog that
    crosses the threshold all at once (a bulk import, a stopped fleet) is alerted over the next runs
    instead of holding one run past its job timeout (SPEC §25: 170 s for 100k alerts in one run).

    The tasks not yet alerted are read through the partial index `task_queue_wait_unalerted` (its
    condition is `QUEUE_WAIT_UNALERTED`): an alerted task leaves the index, so a run reads the tasks
    it may alert (and the held or blocked ones among them), not every task alerted before (SPEC §25).
    """
    now = clock.now()
    alerted = 0
    for task_id, ready_since in _unalerted(now):
        assert ready_since is not None  # filtered on ready_since__lte
        waited = int((now - ready_since).total_seconds())
        alerted += _alert_queue_wait(task_id=task_id, ready_since=ready_since, waited_seconds=waited, now=now)
    return alerted
