"""Reads the API needs beyond `leases.selectors`: scoped task rows with lease state, attempts, notes.

Scoping: an agent sees the tasks of its projects only; `agent=None` (a staff
user) sees everything. Everything else is NOT_FOUND, never PERMISSION_DENIED,
so an agent cannot learn that another project's task exists.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from django.db.models import Count, IntegerField, QuerySet, Subquery
from django.db.models.functions import Coalesce, Length, Substr

from config.errors import NotFound
from leases.models import Attempt, Note
from leases.selectors import unresolved_blockers, unresolved_blockers_of, with_lease_state
from ledger.models import Agent, Task, TaskDependency

COMPACT_TASK_FIELDS = (
    "id",
    "key",
    "title",
    "status",
    "effective_status",
    "priority",
    "task_class",
    "version",
    "epoch",
    "holder_handle",
    "lease_expires_at",
    "blocked_by_count",
)
NOTE_EXCERPT_CHARS = 300
ATTEMPT_NOTES_SHOWN = 50
BLOCKERS_SHOWN = 100


def tasks_visible_to(agent: Agent | None) -> QuerySet[Task]:
    tasks = Task.objects.all()
    if agent is not None:
        tasks = tasks.filter(project__agents=agent)
    return tasks


def with_compact_state(tasks: QuerySet[Task], *, now: datetime) -> QuerySet[Task]:
    """Lease state (`effective_status`, holder, expiry) plus the count of unresolved blockers."""
    blocker_count = unresolved_blockers().order_by().values("task").annotate(n=Count("pk")).values("n")
    return with_lease_state(tasks, now=now).annotate(
        blocked_by_count=Coalesce(Subquery(blocker_count, output_field=IntegerField()), 0)
    )


def ended_task_row(task: Task) -> dict[str, Any]:
    """The compact row of `task` as its attempt just ended: the state of that commit.

    No live lease exists then (one active attempt per task, and it just
    ended), so the lease columns need no subqueries; only the blocker count
    is read.
    """
    return {
        "id": task.pk,
        "key": task.key,
        "title": task.title,
        "status": task.status,
        "effective_status": task.status,
        "priority": task.priority,
        "task_class": task.task_class,
        "version": task.version,
        "epoch": task.epoch,
        "holder_handle": None,
        "lease_expires_at": None,
        "blocked_by_count": unresolved_blockers_of(task).count(),
    }


def full_task_read(task: Task, *, now: datetime) -> tuple[Task, list[dict[str, Any]]]:
    """The task with lease state and blocker count, and its present dependencies (key, status)."""
    annotated = with_compact_state(Task.objects.select_related("project", "reserved_for"), now=now).get(pk=task.pk)
    blockers: list[dict[str, Any]] = [
        dict(row)
        for row in TaskDependency.objects.filter(task=task, removed_at__isnull=True)
        .order_by("blocked_by__number")
        .values("blocked_by__key", "blocked_by__status")[:BLOCKERS_SHOWN]
    ]
    return annotated, blockers


def attempt_visible_to(attempt_id: int, *, agent: Agent | None) -> Attempt:
    """An attempt of a task the caller can see (reading only; acting needs the holder's proof)."""
    attempts = Attempt.objects.select_related("task", "agent")
    if agent is not None:
        attempts = attempts.filter(task__project__agents=agent)
    attempt = attempts.filter(pk=attempt_id).first()
    if attempt is None:
        raise NotFound(f"No attempt {attempt_id}.", details={"attempt": attempt_id})
    return attempt


def attempt_notes(attempt: Attempt) -> tuple[list[dict[str, Any]], int]:
    """The attempt's latest notes, oldest first, each with an excerpt; and how many there are."""
    rows = list(
        Note.objects.filter(attempt=attempt)
        .order_by("-id")
        .annotate(excerpt=Substr("content", 1, NOTE_EXCERPT_CHARS), content_length=Length("content"))
        .values("id", "kind", "important", "created_at", "excerpt", "content_length", "next_steps")[
            :ATTEMPT_NOTES_SHOWN
        ]
    )
    total = len(rows) if len(rows) < ATTEMPT_NOTES_SHOWN else Note.objects.filter(attempt=attempt).count()
    return list(reversed(rows)), total
