"""Reads of attempts and what they leave: who may see which attempts and notes, live leases and path
reservations, what a new attempt inherits (SPEC §15.4), checkpoints, notes, lease sizing, releasable
allocations.

Visibility has the meaning of `ledger.selectors` (`*_visible_to(agent)`): an
agent sees the attempts and notes of its projects; `agent=None` — staff —
sees everything.
"""

from __future__ import annotations

import math
from datetime import datetime
from decimal import Decimal
from typing import Any

from django.conf import settings
from django.db.models import Count, IntegerField, OuterRef, Q, QuerySet, Subquery
from django.db.models.functions import Coalesce, Length, Substr

from core.errors import NotFound
from leases.models import (
    Allocation,
    AllocationStatus,
    Attempt,
    AttemptKind,
    AttemptStatus,
    AttemptUsage,
    LeaseClock,
    LeaseSample,
    Note,
    NoteKind,
    PathReservation,
)
from ledger.models import Agent, Event, EventType, Project, Task

LEASE_SIZING_MIN_SAMPLES = 20


LEASE_SIZING_SAMPLE_LIMIT = 1000


NOTE_EXCERPT_CHARS = 300


ATTEMPT_NOTES_SHOWN = 50


def attempts_visible_to(agent: Agent | None) -> QuerySet[Attempt]:
    """The attempts on the tasks of the agent's projects; every attempt for staff (`agent=None`)."""
    attempts = Attempt.objects.all()
    return attempts if agent is None else attempts.filter(task__project__agents=agent)


def notes_visible_to(agent: Agent | None) -> QuerySet[Note]:
    """The notes on the tasks of the agent's projects; every note for staff (`agent=None`)."""
    notes = Note.objects.all()
    return notes if agent is None else notes.filter(attempt__task__project__agents=agent)


def live_attempts(now: datetime) -> QuerySet[Attempt]:
    """Active attempts whose lease has not lapsed at `now`."""
    return Attempt.objects.filter(status=AttemptStatus.ACTIVE, lease_expires_at__gt=now)


def lapsed_attempts(now: datetime) -> QuerySet[Attempt]:
    """Active attempts whose lease has lapsed at `now`, not yet expired (by a claim, a holder call or the sweep)."""
    return Attempt.objects.filter(status=AttemptStatus.ACTIVE, lease_expires_at__lte=now)


def lapsed_leases(now: datetime) -> QuerySet[LeaseClock]:
    """The lease clocks of the active attempts lapsed at `now`, oldest first, read from `lease_clock_expiry`
    (the attempt table has no expiry index: SPEC §25, leases/models/lease_clock.py)."""
    return LeaseClock.objects.filter(expires_at__lte=now).order_by("expires_at")


def attempt_spent(attempt: Attempt) -> dict[str, Any]:
    """What `attempt` reported spending (SPEC §19)."""
    row = AttemptUsage.objects.filter(attempt=attempt).values_list("input_tokens", "output_tokens", "cost_usd").first()
    input_tokens, output_tokens, cost_usd = row or (0, 0, Decimal(0))
    return {"input_tokens": input_tokens, "output_tokens": output_tokens, "cost_usd": cost_usd}


def comments_since_claim() -> Coalesce:
    """The number of comments on the outer attempt's task since its claim (SPEC §16.2), as a column.

    Counted from the `task.commented` events after the attempt's `event_id_at_claim`
    (every comment appends one), over the event table's (task, id) index.
    """
    comments = (
        Event.objects.filter(
            task=OuterRef("task"), type=EventType.TASK_COMMENTED, id__gt=Coalesce(OuterRef("event_id_at_claim"), 0)
        )
        .order_by()
        .values("task")
        .annotate(n=Count("pk"))
        .values("n")
    )
    return Coalesce(Subquery(comments, output_field=IntegerField()), 0)


def live_reservations(*, project: Project, now: datetime) -> QuerySet[PathReservation]:
    """The project's path reservations whose attempt holds a live lease (SPEC §19), newest first.

    A reservation has no end of its own: it is live exactly while its attempt's lease is.
    """
    return PathReservation.objects.filter(
        project=project, attempt__status=AttemptStatus.ACTIVE, attempt__lease_expires_at__gt=now
    ).order_by("-attempt_id")


def recent_terminal_attempts(task: Task, *, limit: int) -> list[Attempt]:
    """The task's latest terminal attempts, newest first, with their agents."""
    return list(
        Attempt.objects.filter(task=task)
        .exclude(status=AttemptStatus.ACTIVE)
        .select_related("agent")
        .order_by("-id")[:limit]
    )


# SPEC §15.4: a new attempt continues the work of the latest of these that left work on its branch.
INHERITING_STATUSES = (AttemptStatus.EXPIRED, AttemptStatus.INTERRUPTED, AttemptStatus.RELEASED, AttemptStatus.FAILED)


# Ended without a chance to say (a crash, a hand-off): with no commit count at
# all, such an attempt is taken to have left its work on its branch, as its
# successor always inherited before git facts existed.
PRESUMED_AT_WORK_STATUSES = (AttemptStatus.EXPIRED, AttemptStatus.INTERRUPTED)


def left_work() -> Q:
    """The inheritance rule as a filter: an ended attempt that left work on its branch.

    Work is commits beyond its base, as the holder reported them
    (`commits_ahead`) or reconciliation saw them (`seen_commits_ahead`); with
    neither count known, an attempt that expired or was handed off is
    presumed to have left some. `left_work_on_branch` is the same rule on
    values already read; a test holds the two together.
    """
    counted = Q(commits_ahead__gt=0) | Q(seen_commits_ahead__gt=0)
    presumed = Q(commits_ahead__isnull=True, seen_commits_ahead__isnull=True, status__in=PRESUMED_AT_WORK_STATUSES)
    # A review attempt (SPEC §16.1) reads the work's branch; it leaves no work of its own there.
    return Q(status__in=INHERITING_STATUSES, kind=AttemptKind.WORK) & ~Q(branch="") & (counted | presumed)


def left_work_on_branch(
    *,
    status: str,
    branch: str,
    commits_ahead: int | None,
    seen_commits_ahead: int | None,
    kind: str = AttemptKind.WORK,
) -> bool:
    """`left_work()` for one attempt's values (a claim judges the lapsed attempt it expires without a query)."""
    if status not in INHERITING_STATUSES or not branch or kind != AttemptKind.WORK:
        return False
    if commits_ahead is None and seen_commits_ahead is None:
        return status in PRESUMED_AT_WORK_STATUSES
    return (commits_ahead or 0) > 0 or (seen_commits_ahead or 0) > 0


def predecessor_with_work(task: Task, *, before: Attempt | None = None) -> Attempt | None:
    """The task's latest ended attempt (older than `before`) that left work on its branch, with its agent.

    Without `before`: what a new claim would inherit.
    """
    attempts = Attempt.objects.filter(left_work(), task=task)
    if before is not None:
        attempts = attempts.filter(pk__lt=before.pk)
    return attempts.select_related("agent").order_by("-id").first()


def previous_attempt(task: Task) -> Attempt | None:
    """The task's latest terminal attempt: what a new holder inherits (SPEC §4)."""
    recent = recent_terminal_attempts(task, limit=1)
    return recent[0] if recent else None


def latest_checkpoint(task: Task) -> Note | None:
    return (
        Note.objects.filter(attempt__task=task, kind=NoteKind.CHECKPOINT)
        .select_related("attempt__agent")
        .order_by("-id")
        .first()
    )


def attempt_by_id(attempt_id: int, *, agent: Agent | None) -> Attempt:
    """An attempt the caller may see, with its task and agent, or NOT_FOUND (reading only: acting needs the
    holder's proof)."""
    attempt = attempts_visible_to(agent).select_related("task", "agent").filter(pk=attempt_id).first()
    if attempt is None:
        raise NotFound(f"No attempt {attempt_id}.", details={"attempt": attempt_id})
    return attempt


def attempt_notes(attempt: Attempt) -> tuple[list[dict[str, Any]], int]:
    """The attempt's latest ATTEMPT_NOTES_SHOWN notes, oldest first, each with an excerpt; and how many there are."""
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


def lease_sizing_window(*, project: Project, task_class: str) -> QuerySet[LeaseSample, tuple[datetime, datetime]]:
    """(claimed_at, finished_at) of the latest LEASE_SIZING_SAMPLE_LIMIT completed attempts of the class."""
    return (
        LeaseSample.objects.filter(project_id=project.pk, task_class=task_class)
        .order_by("-finished_at")
        .values_list("claimed_at", "finished_at")[:LEASE_SIZING_SAMPLE_LIMIT]
    )


def suggested_lease_seconds(*, project: Project, task_class: str) -> int | None:
    """3 x the p95 duration of the class's completed attempts, once there are at least 20.

    Uses the latest 1,000 completed attempts of the class in the project;
    p95 by nearest rank. Read from their `LeaseSample`s over the index
    `lease_sample_recent`: one range of at most 1,000 entries, whatever the
    size of the history (`leases.models.lease_samples`).
    """
    if not task_class:
        return None
    finished = list(lease_sizing_window(project=project, task_class=task_class))
    if len(finished) < LEASE_SIZING_MIN_SAMPLES:
        return None
    durations = sorted((end - start).total_seconds() for start, end in finished)
    p95 = durations[math.ceil(0.95 * len(durations)) - 1]
    return math.ceil(3 * p95)


def clamp_lease_seconds(seconds: int) -> int:
    return max(settings.LEASEHOLD_MIN_LEASE_SECONDS, min(settings.LEASEHOLD_MAX_LEASE_SECONDS, seconds))


def lease_seconds_for(*, task: Task, requested: int | None) -> int:
    """Request → the task class's suggestion → the project's default; clamped (SPEC §3)."""
    if requested is not None:
        return clamp_lease_seconds(requested)
    suggestion = suggested_lease_seconds(project=task.project, task_class=task.task_class)
    return clamp_lease_seconds(suggestion if suggestion is not None else task.project.default_lease_seconds)


def releasable(allocation: Allocation) -> bool:
    """May be released by hand: stale, or still active although its attempt has ended (leaked).

    Never a live attempt's: its holder is working in that environment. The one
    rule behind `leases.services.allocation_release` and the admin's release
    actions; it reads `allocation.attempt`, so select it with the allocation.
    """
    return allocation.status == AllocationStatus.STALE or (
        allocation.status == AllocationStatus.ACTIVE and allocation.attempt.status != AttemptStatus.ACTIVE
    )
