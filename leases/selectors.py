"""Reads that know about leases: who may see which attempts and notes, effective status,
claimability, previous attempts, lease sizing.

Visibility has the meaning of `ledger.selectors` (`*_visible_to(agent)`): an
agent sees the attempts and notes of its projects; `agent=None` — staff —
sees everything. `now` is always a parameter: an operation reads the clock
once and every query of that operation sees the same instant.
"""

from __future__ import annotations

import math
from datetime import datetime
from decimal import Decimal
from typing import Any

from django.conf import settings
from django.db.models import (
    BooleanField,
    Case,
    CharField,
    Count,
    Exists,
    F,
    IntegerField,
    OuterRef,
    Q,
    QuerySet,
    Subquery,
    Value,
    When,
)
from django.db.models.functions import Coalesce, Length, Substr

from core.errors import NotFound
from core.prepared import SAMPLE_INT, Prepared
from leases.models import (
    Allocation,
    AllocationStatus,
    Attempt,
    AttemptKind,
    AttemptStatus,
    AttemptUsage,
    Note,
    NoteKind,
    PathReservation,
    ReviewRequest,
    ReviewStatus,
    TaskUsage,
)
from ledger.models import RESOLVED_STATUSES, Agent, Event, EventType, Project, Task, TaskDependency, TaskStatus

IN_PROGRESS = "in_progress"
# SPEC §16.1: while a live review attempt exists.
IN_REVIEW = "in_review"
EFFECTIVE_STATUSES = (*TaskStatus.values, IN_PROGRESS, IN_REVIEW)

LEASE_SIZING_MIN_SAMPLES = 20
LEASE_SIZING_SAMPLE_LIMIT = 1000
NOTE_EXCERPT_CHARS = 300
ATTEMPT_NOTES_SHOWN = 50
BLOCKERS_SHOWN = 100


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


UNRESOLVED_STATUSES = sorted(set(TaskStatus.values) - RESOLVED_STATUSES)


def unresolved_blockers() -> QuerySet[TaskDependency]:
    """Present dependencies, of the outer task, on a task that is neither done nor cancelled."""
    return TaskDependency.objects.filter(
        task=OuterRef("pk"), removed_at__isnull=True, blocked_by__status__in=UNRESOLVED_STATUSES
    )


def unresolved_blockers_of(task: Task) -> QuerySet[TaskDependency]:
    return TaskDependency.objects.filter(
        task=task, removed_at__isnull=True, blocked_by__status__in=UNRESOLVED_STATUSES
    ).order_by("blocked_by__number")


# Every finish answers it, and a work context with many blockers (SPEC §20: compiled once).
_UNRESOLVED_COUNT: Prepared[TaskDependency] = Prepared(
    lambda task: unresolved_blockers_of(task).order_by().values("task").annotate(n=Count("pk")).values_list("n"),
    samples=({"task": Task(pk=SAMPLE_INT[0])}, {"task": Task(pk=SAMPLE_INT[1])}),
)


def unresolved_blocker_count(task: Task) -> int:
    """How many unresolved blockers `task` has (`unresolved_blockers_of(task).count()`)."""
    rows = _UNRESOLVED_COUNT.rows(task=task)
    return int(rows[0][0]) if rows else 0


def with_lease_state(tasks: QuerySet[Task], *, now: datetime) -> QuerySet[Task]:
    """Annotate `effective_status`, `holder_handle`, `holder_attempt_id` and `lease_expires_at`.

    `effective_status` is `in_progress` exactly while a live work attempt
    exists, `in_review` while a live review attempt exists (SPEC §16.1), else
    the stored status (SPEC §1.3); usable in filters and ordering.
    """
    live = live_attempts(now).filter(task=OuterRef("pk"))
    return tasks.annotate(
        holder_attempt_id=Subquery(live.values("id")[:1]),
        holder_handle=Subquery(live.values("agent__handle")[:1]),
        lease_expires_at=Subquery(live.values("lease_expires_at")[:1]),
        holder_attempt_kind=Subquery(live.values("kind")[:1]),
    ).annotate(
        effective_status=Case(
            When(holder_attempt_kind=AttemptKind.REVIEW, then=Value(IN_REVIEW)),
            When(holder_attempt_id__isnull=False, then=Value(IN_PROGRESS)),
            default=F("status"),
            output_field=CharField(),
        ),
    )


def with_compact_state(tasks: QuerySet[Task], *, now: datetime, agent: Agent | None = None) -> QuerySet[Task]:
    """`with_lease_state` plus `blocked_by_count`, the number of unresolved blockers, and `claimable`
    (for `agent`: the rule of `claimable_tasks`, as a column)."""
    blocker_count = unresolved_blockers().order_by().values("task").annotate(n=Count("pk")).values("n")
    return with_lease_state(tasks, now=now).annotate(
        blocked_by_count=Coalesce(Subquery(blocker_count, output_field=IntegerField()), 0),
        claimable=Case(
            When(claimable_condition(now=now, agent=agent), then=Value(True)),
            default=Value(False),
            output_field=BooleanField(),
        ),
    )


def task_spent(task: Task) -> dict[str, Any]:
    """What all attempts of `task` reported spending (SPEC §19); select the task with its `usage` to save a query."""
    try:
        usage = task.usage
    except TaskUsage.DoesNotExist:
        return {"input_tokens": 0, "output_tokens": 0, "cost_usd": Decimal(0)}
    return {"input_tokens": usage.input_tokens, "output_tokens": usage.output_tokens, "cost_usd": usage.cost_usd}


def attempt_spent(attempt: Attempt) -> dict[str, Any]:
    """What `attempt` reported spending (SPEC §19)."""
    row = AttemptUsage.objects.filter(attempt=attempt).values_list("input_tokens", "output_tokens", "cost_usd").first()
    input_tokens, output_tokens, cost_usd = row or (0, 0, Decimal(0))
    return {"input_tokens": input_tokens, "output_tokens": output_tokens, "cost_usd": cost_usd}


def full_task_read(task: Task, *, now: datetime) -> Task:
    """The task annotated by `with_compact_state`, with `dependencies_shown` attached (as a prefetch's
    `to_attr` would be): its present dependencies as (`blocked_by__key`, `blocked_by__status`) rows,
    at most BLOCKERS_SHOWN, by the blocker's number."""
    annotated = with_compact_state(
        Task.objects.select_related("project", "reserved_for", "usage"),
        now=now,  # usage: joined, no statement
    ).get(pk=task.pk)
    annotated.spent_totals = task_spent(annotated)  # type: ignore[attr-defined]
    annotated.dependencies_shown = list(  # type: ignore[attr-defined]
        TaskDependency.objects.filter(task=task, removed_at__isnull=True)
        .order_by("blocked_by__number")
        .values("blocked_by__key", "blocked_by__status")[:BLOCKERS_SHOWN]
    )
    return annotated


def claimable_tasks(
    *,
    project: Project | None,
    now: datetime,
    agent: Agent | None = None,
    task_class: str | None = None,
    include_reserved: bool = False,
    by_anyone: bool = False,
) -> QuerySet[Task]:
    """Claimable tasks of a project (every project with `project=None`) in claim-next order (SPEC §2, §4).

    Claimable: stored status ready, no unresolved blocker, no live attempt,
    not reserved for another agent, project not archived, its own budget not
    spent (SPEC §19; an agent's or project's daily budget is the claim's check,
    `leases.services.usage.claim_budget_refusal`). With
    `include_reserved`, tasks reserved for any agent count too (queue-wait).
    With `by_anyone` (the admin's view: "can somebody claim this?"), a task
    reserved for an agent counts only while that agent is active and may see
    the task's project: a reservation for anyone else is a task nobody can
    claim. The rule itself is `claimable_condition`.
    """
    tasks = Task.objects.filter(project=project) if project is not None else Task.objects.all()
    if task_class:
        tasks = tasks.filter(task_class=task_class)
    return (
        tasks.filter(claimable_condition(now=now, agent=agent, include_reserved=include_reserved, by_anyone=by_anyone))
        # Exactly the order of the partial index `task_ready_queue` (a ready
        # task always has `ready_since`), so PostgreSQL reads it in order
        # instead of sorting every ready task.
        .order_by(F("priority").desc(), F("ready_since").asc(), "id")
    )


def reservation_holdable() -> QuerySet[Agent]:
    """The outer task's reserved agent, if it is active and may see the task's project (so may claim it)."""
    return Agent.objects.filter(pk=OuterRef("reserved_for_id"), is_active=True, projects=OuterRef("project_id"))


def with_claimability(tasks: QuerySet[Task], *, now: datetime) -> QuerySet[Task]:
    """`with_compact_state` plus `claimable`: whether somebody can claim the task now.

    The one rule, `claimable_tasks(by_anyone=True)`, asked per row by primary key.
    """
    claimable = claimable_tasks(project=None, now=now, by_anyone=True).filter(pk=OuterRef("pk")).order_by()
    return with_compact_state(tasks, now=now).annotate(claimable=Exists(claimable))


def claimable_condition(
    *, now: datetime, agent: Agent | None, include_reserved: bool = False, by_anyone: bool = False
) -> Q:
    """Claimability (SPEC §2) as a condition on tasks: the one rule behind `claimable_tasks`, the
    `claimable` column of compact items and `is_claimable` (the same on values already read)."""
    condition = Q(status=TaskStatus.READY, project__archived_at__isnull=True)
    if by_anyone:
        condition &= Q(reserved_for__isnull=True) | Q(Exists(reservation_holdable()))
    elif not include_reserved:
        reservation = Q(reserved_for__isnull=True)
        if agent is not None:
            reservation |= Q(reserved_for=agent)
        condition &= reservation
    return (
        condition
        & ~Q(Exists(unresolved_blockers()))
        & ~Q(Exists(live_attempts(now).filter(task=OuterRef("pk"))))
        & ~Q(Exists(task_budget_spent()))
    )


def is_claimable(*, task: Task, agent: Agent | None, blocked_by: int, live: bool) -> bool:
    """`claimable_condition` for a task whose blocker count and lease are known (a finish's answer).

    The spent task budget is read only for a task that has a budget (one probe of its usage row).
    """
    return (
        task.status == TaskStatus.READY
        and task.project.archived_at is None
        and task.reserved_for_id in (None, agent.pk if agent is not None else None)
        and blocked_by == 0
        and not live
        and not task_budget_is_spent(task)
    )


def task_budget_is_spent(task: Task) -> bool:
    """Whether `task` has a budget and its usage reached it (`task_budget_spent`, for one task)."""
    if task.budget_tokens is None and task.budget_cost_usd is None:
        return False
    return Task.objects.filter(pk=task.pk).filter(Exists(task_budget_spent())).exists()


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


def task_budget_spent() -> QuerySet[TaskUsage]:
    """The outer task's usage row once it reached the task's budget (tokens or dollars; a null budget never does)."""
    return TaskUsage.objects.filter(task=OuterRef("pk")).filter(
        Q(input_tokens__gte=OuterRef("budget_tokens") - F("output_tokens"))
        | Q(cost_usd__gte=OuterRef("budget_cost_usd"))
    )


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


def suggested_lease_seconds(*, project: Project, task_class: str) -> int | None:
    """3 x the p95 duration of the class's completed attempts, once there are at least 20.

    Uses the latest 1,000 completed attempts of the class in the project;
    p95 by nearest rank.
    """
    if not task_class:
        return None
    finished = list(
        Attempt.objects.filter(status=AttemptStatus.COMPLETED, task__project=project, task__task_class=task_class)
        .order_by("-finished_at")
        .values_list("claimed_at", "finished_at")[:LEASE_SIZING_SAMPLE_LIMIT]
    )
    if len(finished) < LEASE_SIZING_MIN_SAMPLES:
        return None
    durations = sorted((end - start).total_seconds() for start, end in finished if end is not None)
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


def reviews_visible_to(agent: Agent | None) -> QuerySet[ReviewRequest]:
    """Review requests on the tasks of the agent's projects; every one for staff (`agent=None`)."""
    reviews = ReviewRequest.objects.all()
    return reviews if agent is None else reviews.filter(task__project__agents=agent)


def review_by_id(review_id: int, *, agent: Agent | None) -> ReviewRequest:
    """A review request the caller may see, with its task, work attempt and reviewers, or NOT_FOUND."""
    review = (
        reviews_visible_to(agent)
        .select_related("task__project", "work_attempt__agent", "reviewer_agent", "reviewer_user")
        .filter(pk=review_id)
        .first()
    )
    if review is None:
        raise NotFound(f"No review {review_id}.", details={"review": review_id})
    return review


def latest_changes_requested(task: Task) -> ReviewRequest | None:
    """The review the task's next work answers (SPEC §16.1 `review_findings`): its latest decided
    request, when that one asked for changes."""
    latest = (
        ReviewRequest.objects.filter(task=task, decided_at__isnull=False)
        .exclude(status=ReviewStatus.SUPERSEDED)
        .select_related("reviewer_agent", "reviewer_user")
        .order_by("-id")
        .first()
    )
    return latest if latest is not None and latest.status == ReviewStatus.CHANGES_REQUESTED else None


def review_in_progress(attempt: Attempt) -> ReviewRequest | None:
    """The request a review attempt is reviewing, with the work attempt it pins."""
    return (
        ReviewRequest.objects.select_related("work_attempt__agent")
        .filter(review_attempt=attempt, status=ReviewStatus.IN_REVIEW)
        .first()
    )
