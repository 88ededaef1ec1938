"""Ending lapsed leases: lazily inside claims and holder calls, and in batches by the sweep.

Expiry never changes a task's stored status and keeps every note (SPEC §3).
It only marks the attempt `expired`, appends `attempt.expired`, and records
that the task became claimable again (`ready_since`).
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta

from django.db.models import Case, F, Q, Value, When

from config.db import write_transaction
from leases.models import Attempt, AttemptStatus
from leases.selectors import claimable_tasks
from leases.services.allocations import mark_allocations_stale
from ledger import clock
from ledger.actors import SYSTEM
from ledger.models import Event, Project, Severity, Task, TaskStatus
from ledger.services import event_append

SWEEP_BATCH_SIZE = 500


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
            type="attempt.expired",
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
    lapsed_at = {row["task_id"]: row["lease_expires_at"] for row in lapsed}
    Task.objects.filter(pk__in=lapsed_at, status=TaskStatus.READY).update(
        ready_since=Case(*(When(pk=task_id, then=Value(moment)) for task_id, moment in lapsed_at.items()))
    )
    return changed


@dataclass(frozen=True)
class SweepReport:
    expired: int
    batches: int
    worst_batch_seconds: float


@write_transaction
def _sweep_batch(*, now: datetime, batch_size: int) -> int:
    ids = list(
        Attempt.objects.filter(status=AttemptStatus.ACTIVE, lease_expires_at__lte=now)
        .order_by("lease_expires_at")
        .select_for_update(skip_locked=True, no_key=True)
        .values_list("id", flat=True)[:batch_size]
    )
    return expire_lapsed(ids, now=now) if ids else 0


def sweep_expired(*, batch_size: int = SWEEP_BATCH_SIZE) -> SweepReport:
    """Expire every active attempt whose lease lapsed before now, in short batches.

    Uses the partial index on active leases. Each batch is its own
    transaction and takes its rows with SKIP LOCKED on PostgreSQL, so two
    sweeps at once split the work and each attempt gets one event.
    """
    now = clock.now()
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
            type="task.queue_wait_exceeded",
            severity=Severity.WARN,
            actor=SYSTEM,
            at=now,
            task=task,
            payload={"ready_since": ready_since.isoformat(), "waited_seconds": waited_seconds},
        )
    return bool(marked)


def check_queue_wait() -> int:
    """One `task.queue_wait_exceeded` warn event per waiting period of a claimable task.

    A waiting period is identified by `ready_since`; a compare-and-set on
    `queue_wait_alerted_for` makes two concurrent checks alert once.
    """
    now = clock.now()
    alerted = 0
    for project in Project.objects.filter(archived_at__isnull=True):
        threshold = now - timedelta(seconds=project.queue_wait_max_seconds)
        waiting = (
            claimable_tasks(project=project, now=now, include_reserved=True)
            .filter(ready_since__lte=threshold)
            .filter(Q(queue_wait_alerted_for__isnull=True) | ~Q(queue_wait_alerted_for=F("ready_since")))
            .values_list("pk", "ready_since")
        )
        for task_id, ready_since in waiting:
            assert ready_since is not None  # filtered on ready_since__lte
            waited = int((now - ready_since).total_seconds())
            alerted += _alert_queue_wait(task_id=task_id, ready_since=ready_since, waited_seconds=waited, now=now)
    return alerted
