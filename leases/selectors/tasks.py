"""Reads of tasks that know about leases: effective status, unresolved blockers, claimability.

The effective status (`in_progress`, `in_review`) is computed from live attempts, never stored
(SPEC §1.3, §16.1); claimability is one rule, `claimable_condition` (SPEC §2). `now` is always a
parameter: an operation reads the clock once and every query of that operation sees the same instant.
"""

from __future__ import annotations

from datetime import datetime, timedelta
from decimal import Decimal
from typing import Any

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
from django.db.models.functions import Coalesce
from django.db.models.lookups import IsNull

from core.json_sets import JsonArrayEmpty, JsonArrayWithin
from core.prepared import SAMPLE_INT, SAMPLE_TIME, Prepared
from leases.models import AttemptKind, TaskUsage
from leases.selectors.attempts import lapsed_leases, live_attempts
from ledger.models import QUEUE_WAIT_UNALERTED, RESOLVED_STATUSES, Agent, Project, Task, TaskDependency, TaskStatus

IN_PROGRESS = "in_progress"


# SPEC §16.1: while a live review attempt exists.
IN_REVIEW = "in_review"


# SPEC §21.2: a delivered task while a live landing attempt lands it.
LANDING = "landing"


EFFECTIVE_STATUSES = (*TaskStatus.values, IN_PROGRESS, IN_REVIEW, LANDING)


def effective_status_of_kind(kind: str) -> str:
    """The effective status a live attempt of `kind` gives its task."""
    shown: dict[str, str] = {AttemptKind.REVIEW: IN_REVIEW, AttemptKind.LAND: LANDING}
    return shown.get(kind, IN_PROGRESS)


BLOCKERS_SHOWN = 100


UNRESOLVED_TASK_STATUSES = sorted(set(TaskStatus.values) - RESOLVED_STATUSES)


def unresolved_blockers() -> QuerySet[TaskDependency]:
    """Present dependencies, of the outer task, on a task that is neither done nor cancelled."""
    return TaskDependency.objects.filter(
        task=OuterRef("pk"), removed_at__isnull=True, blocked_by__status__in=UNRESOLVED_TASK_STATUSES
    )


def unresolved_blockers_of(task: Task) -> QuerySet[TaskDependency]:
    return TaskDependency.objects.filter(
        task=task, removed_at__isnull=True, blocked_by__status__in=UNRESOLVED_TASK_STATUSES
    ).order_by("blocked_by__number")


def blockers_of_attempts_task() -> Coalesce:
    """The number of unresolved blockers of the outer attempt's task, as a column (a finish's answer
    reads it in its lock statement: issue 34)."""
    count = (
        TaskDependency.objects.filter(
            task=OuterRef("task"), removed_at__isnull=True, blocked_by__status__in=UNRESOLVED_TASK_STATUSES
        )
        .order_by()
        .values("task")
        .annotate(n=Count("pk"))
        .values("n")
    )
    return Coalesce(Subquery(count, output_field=IntegerField()), 0)


# A work context with many blockers, and a release's answer (SPEC §20: compiled once).
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
    exists, `in_review` while a live review attempt exists (SPEC §16.1), `landing` while a live
    landing attempt exists (SPEC §21.2), else
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
            When(holder_attempt_kind=AttemptKind.LAND, then=Value(LANDING)),
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


def full_task_read(task: Task, *, now: datetime) -> Task:
    """The task annotated by `with_compact_state`, with `dependencies_shown` attached (as a prefetch's
    `to_attr` would be): its present dependencies as (`blocked_by__key`, `blocked_by__status`,
    `blocker_effective_status`) rows, at most BLOCKERS_SHOWN, by the blocker's number."""
    annotated = with_compact_state(
        Task.objects.select_related("project", "reserved_for", "usage"),
        now=now,  # usage: joined, no statement
    ).get(pk=task.pk)
    annotated.spent_totals = task_spent(annotated)  # type: ignore[attr-defined]
    # SPEC §22: a blocker's effective status, read like the task's own (a stub of another project shows no more).
    blocker_state: Any = with_lease_state(Task.objects.filter(pk=OuterRef("blocked_by_id")), now=now)
    annotated.dependencies_shown = list(  # type: ignore[attr-defined]
        TaskDependency.objects.filter(task=task, removed_at__isnull=True)
        .annotate(blocker_effective_status=Subquery(blocker_state.values("effective_status")[:1]))
        .order_by("blocked_by__number")
        .values("blocked_by__key", "blocked_by__status", "blocker_effective_status")[:BLOCKERS_SHOWN]
    )
    return annotated


# How claimability asks that nobody holds the task (SPEC §25). `Task.held` is true exactly while the task has
# an active attempt (kept by triggers on the attempt table), whose lease may have lapsed unexpired.
# ANY: no live attempt (the exact rule, asked per task). FREE: not held at all, the ready tasks of the index
# `task_claim_queue`, read in order without walking past held ones. LAPSED: held by one of the
# LAPSED_CANDIDATES oldest lapsed leases, read from the lease clock's expiry index (claim-next's other source).
# SET: no live attempt, as `id NOT IN (the live attempts' tasks)`, for reads over every ready task (the
# dashboard's count, the task list's column): PostgreSQL reads the live attempts once into a hashed set.
# As NOT EXISTS it estimates the live attempts at one row (`status = active` and an unexpired lease are
# counted as independent) and plans a nested-loop anti join comparing every ready task with every live
# attempt: 2.4 million comparisons, 90-260 ms, at 12,000 ready tasks and 200 live leases (issue 32).
HOLDS_ANY, HOLDS_FREE, HOLDS_LAPSED, HOLDS_SET = "any", "free", "lapsed", "set"


# The lapsed leases claim-next looks among: the oldest, read first from `lease_clock_expiry`; more than
# this many unexpired at once (the sweep expires them in batches of 500) wait for the sweep.
LAPSED_CANDIDATES = 500


def claimable_tasks(
    *,
    project: Project | None,
    now: datetime,
    agent: Agent | None = None,
    task_class: str | None = None,
    include_reserved: bool = False,
    by_anyone: bool = False,
    holds: str = HOLDS_ANY,
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
    claim. The rule itself is `claimable_condition` (`holds`: see HOLDS_ANY).
    """
    tasks = Task.objects.filter(project=project) if project is not None else Task.objects.all()
    if task_class:
        tasks = tasks.filter(task_class=task_class)
    return (
        tasks.filter(
            claimable_condition(
                now=now, agent=agent, include_reserved=include_reserved, by_anyone=by_anyone, holds=holds
            )
        )
        # Exactly the order of the partial indexes `task_ready_queue` and `task_claim_queue` (a
        # ready task always has `ready_since`), so PostgreSQL reads it in order instead of sorting
        # every ready task.
        .order_by(F("priority").desc(), F("ready_since").asc(), "id")
    )


# How far `claimable_count_by_anyone` counts: that many means "at least that many".
CLAIMABLE_COUNTED = 8
# The tasks anyone could claim in the project now (`claimable_count_by_anyone`), compiled once.
_CLAIMABLE_BY_ANYONE: Prepared[Task] = Prepared(
    lambda project, now: claimable_tasks(project=project, now=now, by_anyone=True).values_list("pk")[
        :CLAIMABLE_COUNTED
    ],
    samples=(
        {"project": Project(pk=SAMPLE_INT[0]), "now": SAMPLE_TIME[0]},
        {"project": Project(pk=SAMPLE_INT[1]), "now": SAMPLE_TIME[1]},
    ),
)


def claimable_count_by_anyone(project: Project, *, now: datetime) -> int:
    """How many tasks of the project some agent could claim now (`claimable_tasks(by_anyone=True)`), counted
    up to CLAIMABLE_COUNTED, as one compiled statement: the claim wait asks it after every wake it answered,
    to pass the wake on only when more are claimable than the other woken waiters can take."""
    return len(_CLAIMABLE_BY_ANYONE.rows(project=project, now=now))


def _unalerted(project: Project, now: datetime, threshold: datetime) -> QuerySet[Task, tuple[int, datetime | None]]:
    return (
        claimable_tasks(project=project, now=now, include_reserved=True)
        .filter(QUEUE_WAIT_UNALERTED, ready_since__lte=threshold)
        .order_by("ready_since", "pk")
        .values_list("pk", "ready_since")
    )


def queue_wait_unalerted(project: Project, *, now: datetime, limit: int) -> QuerySet[Task, tuple[int, datetime | None]]:
    """(id, ready_since) of the project's claimable tasks past its queue-wait threshold and not yet alerted for
    their waiting period, longest waiting first, at most `limit`: read along `task_queue_wait_unalerted`."""
    return _unalerted(project, now, now - timedelta(seconds=project.queue_wait_max_seconds))[:limit]


# The most rows one read of `queue_wait_unalerted_rows` returns, and so the queue-wait check's alerts a run
# (`leases.services.expiry.QUEUE_WAIT_ALERTS_PER_RUN`).
QUEUE_WAIT_READ = 1_000
YEAR = timedelta(days=365)
# `queue_wait_unalerted`, compiled once: the check reads every project every minute, and building the
# claimable rule's queryset was ~3.5 ms of a project's read (docs/performance.md, "At 1M, measured (stop 44)").
_UNALERTED: Prepared[Task] = Prepared(
    lambda project, now, threshold: _unalerted(project, now, threshold)[:QUEUE_WAIT_READ],
    samples=tuple(
        {"project": Project(pk=SAMPLE_INT[i]), "now": SAMPLE_TIME[i], "threshold": SAMPLE_TIME[1 - i] - YEAR}
        for i in (0, 1)
    ),  # type: ignore[arg-type]
)


def queue_wait_unalerted_rows(project: Project, *, now: datetime, limit: int) -> list[tuple[int, datetime | None]]:
    """`queue_wait_unalerted`'s rows (at most QUEUE_WAIT_READ), from its statement compiled once."""
    if limit > QUEUE_WAIT_READ:
        raise ValueError(f"at most {QUEUE_WAIT_READ} rows a read")
    threshold = now - timedelta(seconds=project.queue_wait_max_seconds)
    return [(row[0], row[1]) for row in _UNALERTED.rows(project=project, now=now, threshold=threshold)[:limit]]


def reservation_holdable() -> QuerySet[Agent]:
    """The outer task's reserved agent, if it is active and may see the task's project (so may claim it)."""
    return Agent.objects.filter(pk=OuterRef("reserved_for_id"), is_active=True, projects=OuterRef("project_id"))


def with_claimability(tasks: QuerySet[Task], *, now: datetime) -> QuerySet[Task]:
    """`with_compact_state` plus `claimable`: whether somebody can claim the task now.

    The one rule, `claimable_tasks(by_anyone=True)`, asked per row by primary key: a scalar subquery
    (`(SELECT id … LIMIT 1) IS NOT NULL`), which PostgreSQL runs for the rows asked for. An EXISTS it may
    hash instead, reading every claimable task once per statement (issue 33: 276k of them at 1M tasks,
    0.5 s under a task list page of 50 rows).
    """
    claimable = (
        claimable_tasks(project=None, now=now, by_anyone=True, holds=HOLDS_SET).filter(pk=OuterRef("pk")).order_by()
    )
    return with_compact_state(tasks, now=now).annotate(claimable=IsNull(Subquery(claimable.values("pk")[:1]), False))


def claimable_condition(
    *,
    now: datetime,
    agent: Agent | None,
    include_reserved: bool = False,
    by_anyone: bool = False,
    holds: str = HOLDS_ANY,
) -> Q:
    """Claimability (SPEC §2) as a condition on tasks: the one rule behind `claimable_tasks`, the
    `claimable` column of compact items and `is_claimable` (the same on values already read).
    `holds` says how "no live attempt" is asked (`HOLDS_ANY`, or one of claim-next's two sources)."""
    condition = Q(status=TaskStatus.READY, project__archived_at__isnull=True)
    if by_anyone:
        condition &= Q(reserved_for__isnull=True) | Q(Exists(reservation_holdable()))
    elif not include_reserved:
        reservation = Q(reserved_for__isnull=True)
        if agent is not None:
            reservation |= Q(reserved_for=agent)
        condition &= reservation
    if by_anyone:
        condition &= requires_met_by_someone()
    elif agent is not None:
        condition &= requires_met_by(agent)
    return condition & ~Q(Exists(unresolved_blockers())) & unheld(now, holds) & ~Q(Exists(task_budget_spent()))


def unheld(now: datetime, holds: str) -> Q:
    """No live attempt holds the task at `now`, asked as `holds` says (see HOLDS_ANY)."""
    if holds == HOLDS_FREE:
        return Q(held=False)
    if holds == HOLDS_LAPSED:
        # The subquery has a LIMIT, so the planner cannot fold it into a walk of the tasks: it reads
        # the lapsed leases from their index and then looks their tasks up by key.
        lapsed = lapsed_leases(now).values("task_id")[:LAPSED_CANDIDATES]
        return Q(held=True, pk__in=lapsed)
    if holds == HOLDS_SET:
        return ~Q(pk__in=live_attempts(now).values("task_id"))
    return ~Q(Exists(live_attempts(now).filter(task=OuterRef("pk"))))


def requires_met_by(agent: Agent) -> Q:
    """The task's `requires` are all among `agent`'s labels (SPEC §23.1), read from the agent's row.

    Nothing required (nearly every task) is decided first, on the task's own column; the agent's row is
    read only for a task that requires something (on PostgreSQL an InitPlan run once per statement).
    The agent is a parameter of the statement (its primary key), so claim-next compiles it once.
    """
    labels = Subquery(Agent.objects.filter(pk=agent.pk).order_by().values("labels")[:1])
    return Q(JsonArrayEmpty(F("requires"))) | Q(JsonArrayWithin(F("requires"), labels))


def requires_met_by_someone() -> Q:
    """Some active agent that may see the task's project carries every label the task requires
    (`by_anyone`: "can somebody claim this?"); nothing required is decided on the task's own column."""
    carriers = Agent.objects.filter(is_active=True, projects=OuterRef("project_id")).filter(
        JsonArrayWithin(OuterRef("requires"), F("labels"))
    )
    return Q(JsonArrayEmpty(F("requires"))) | Q(Exists(carriers))


def missing_labels(*, requires: list[str], labels: list[str]) -> list[str]:
    """The labels of `requires` that `labels` lacks, in `requires`' order (empty: the agent may claim)."""
    have = set(labels or ())
    return [label for label in requires or () if label not in have]


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
        and (agent is None or not missing_labels(requires=task.requires, labels=agent.labels))
        and not task_budget_is_spent(task)
    )


def task_budget_is_spent(task: Task) -> bool:
    """Whether `task` has a budget and its usage reached it (`task_budget_spent`, for one task)."""
    if task.budget_tokens is None and task.budget_cost_usd is None:
        return False
    return Task.objects.filter(pk=task.pk).filter(Exists(task_budget_spent())).exists()


def task_budget_spent() -> QuerySet[TaskUsage]:
    """The outer task's usage row once it reached the task's budget (tokens or dollars; a null budget never does)."""
    return TaskUsage.objects.filter(task=OuterRef("pk")).filter(
        Q(input_tokens__gte=OuterRef("budget_tokens") - F("output_tokens"))
        | Q(cost_usd__gte=OuterRef("budget_cost_usd"))
    )
