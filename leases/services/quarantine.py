"""Quarantine of tasks that keep failing (SPEC §16.4), and its release by an admin.

After `Project.max_consecutive_failures` work attempts of a task in a row
ended `failed` or `expired` (0: never), the task moves to `blocked` with the
reason "quarantined: N attempts in a row failed or expired (last: …)" and a
`task.quarantined` warn event — in the transaction that ended the last of
them: a failed finish, a lazy expiry (claim, holder call, revocation) or a
sweep batch on either path. Claim-next never hands out a blocked task.

A streak counts only work attempts (a review attempt is no try at the work)
and only those after the attempt that triggered the task's latest quarantine,
so a task released from quarantine gets N fresh tries.
"""

from __future__ import annotations

from collections.abc import Iterable
from datetime import datetime

from django.db import connection
from django.db.models import F, Max, Window
from django.db.models.functions import RowNumber

from core.db import write_transaction
from core.errors import ValidationFailed
from leases.models import Attempt, AttemptKind, AttemptStatus
from ledger import clock
from ledger.actors import SYSTEM, Actor
from ledger.models import Event, EventType, Severity, Task, TaskStatus
from ledger.services import apply_task_update, event_append, lock_task

QUARANTINE_REASON_PREFIX = "quarantined:"
STREAK_STATUSES = frozenset({AttemptStatus.FAILED, AttemptStatus.EXPIRED})


def quarantine_reason(*, attempts: int, last_id: int, last_status: str, failure_reason_code: str) -> str:
    last = f"attempt {last_id} {last_status}" + (f", {failure_reason_code}" if failure_reason_code else "")
    return f"{QUARANTINE_REASON_PREFIX} {attempts} attempts in a row failed or expired (last: {last})"


def is_quarantined(task: Task) -> bool:
    return task.status == TaskStatus.BLOCKED and task.blocked_reason.startswith(QUARANTINE_REASON_PREFIX)


# The `count` latest ended work attempts of each task, newest first: on PostgreSQL a LATERAL walk
# of the (task, -id) index per task, which reads `count` rows each (a sweep batch of 500 tasks with
# long histories: the window below read every attempt of every task, half the batch's time).
LATEST_ENDED_WORK_SQL = """
SELECT t.task_id, a.id, a.status, a.failure_reason_code
FROM unnest(%(task_ids)s::bigint[]) AS t (task_id)
CROSS JOIN LATERAL (
    SELECT id, status, failure_reason_code FROM {attempt}
    WHERE task_id = t.task_id AND kind = %(work)s AND status <> %(active)s
    ORDER BY id DESC
    LIMIT %(count)s
) AS a
ORDER BY t.task_id, a.id DESC
"""


def _latest_ended_work(task_ids: list[int], count: int) -> list[tuple[int, int, str, str]]:
    if connection.vendor == "postgresql":
        with connection.cursor() as cursor:
            cursor.execute(
                LATEST_ENDED_WORK_SQL.format(attempt=connection.ops.quote_name(Attempt._meta.db_table)),
                {"task_ids": task_ids, "work": AttemptKind.WORK, "active": AttemptStatus.ACTIVE, "count": count},
            )
            return [tuple(row) for row in cursor.fetchall()]
    return list(
        Attempt.objects.filter(task_id__in=task_ids, kind=AttemptKind.WORK)
        .exclude(status=AttemptStatus.ACTIVE)
        .annotate(rank=Window(RowNumber(), partition_by=[F("task_id")], order_by=F("id").desc()))
        .filter(rank__lte=count)
        .order_by("task_id", "-id")
        .values_list("task_id", "id", "status", "failure_reason_code")
    )


def quarantine_failing(task_ids: Iterable[int], *, now: datetime) -> dict[int, Task]:
    """Quarantine those of these tasks whose latest work attempts all failed or expired; returns them.

    Runs inside the transaction that just ended an attempt of each task. Two
    statements decide for a whole sweep batch (the recent attempts of every
    candidate by a window, and each task's latest quarantine); only a task
    that is quarantined costs more.
    """
    limits = dict(
        Task.objects.filter(pk__in=list(task_ids), status=TaskStatus.READY, project__max_consecutive_failures__gt=0)
        .values_list("pk", "project__max_consecutive_failures")
        .order_by()
    )
    if not limits:
        return {}
    longest = max(limits.values())
    streaks: dict[int, list[tuple[int, str, str]]] = {}
    for task_id, attempt_id, status, failure in _latest_ended_work(list(limits), longest):
        streaks.setdefault(task_id, []).append((attempt_id, status, failure))
    counted_after = dict(
        Event.objects.filter(task_id__in=list(limits), type=EventType.TASK_QUARANTINED)
        .values("task_id")
        .annotate(last=Max("attempt_id"))
        .values_list("task_id", "last")
        .order_by()
    )
    quarantined: dict[int, Task] = {}
    for task_id, limit in limits.items():
        runs = [run for run in streaks.get(task_id, [])[:limit] if run[0] > (counted_after.get(task_id) or 0)]
        if len(runs) < limit or any(status not in STREAK_STATUSES for _, status, _ in runs):
            continue
        last_id, last_status, failure = runs[0]
        reason = quarantine_reason(
            attempts=limit, last_id=last_id, last_status=last_status, failure_reason_code=failure
        )
        task, _ = apply_task_update(
            locked=lock_task(task_id),
            actor=SYSTEM,
            changes={"status": TaskStatus.BLOCKED, "blocked_reason": reason},
            now=now,
        )
        event_append(
            type=EventType.TASK_QUARANTINED,
            severity=Severity.WARN,
            actor=SYSTEM,
            at=now,
            task=task,
            attempt_id=last_id,
            payload={"attempts": limit, "last_attempt": last_id, "last_status": last_status},
        )
        quarantined[task_id] = task
    return quarantined


@write_transaction
def task_release_quarantine(*, task: Task, actor: Actor) -> Task:
    """Make a quarantined task ready again (an admin's action); its next attempts start a fresh streak."""
    locked = lock_task(task.pk)
    if not is_quarantined(locked):
        raise ValidationFailed(f"{locked.key} is not quarantined.", details={"task": locked.key})
    now = clock.now()
    locked, _ = apply_task_update(locked=locked, actor=actor, changes={"status": TaskStatus.READY}, now=now)
    event_append(
        type=EventType.TASK_QUARANTINE_RELEASED,
        severity=Severity.INFO,
        actor=actor,
        at=now,
        task=locked,
        payload={"version": locked.version},
    )
    return locked
