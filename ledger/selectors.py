"""Reads of the ledger's own models that are more than a `get()`, and who may see what.

Visibility is one family with one meaning (`*_visible_to(agent)`): an agent
sees what belongs to the projects it is a member of; `agent=None` — a staff
user — sees everything. Every door, search and the filters read through it.
A lookup outside what the caller may see is NOT_FOUND, never
PERMISSION_DENIED, so an agent cannot learn that another project's task exists.
"""

from __future__ import annotations

import functools
import hmac
from dataclasses import dataclass
from typing import Any

from django.db import connection
from django.db.models import Count, Max, OuterRef, Q, QuerySet, Subquery
from django.db.models.functions import Length, Substr

from core.errors import NotFound, ValidationFailed
from core.prepared import SAMPLE_INT, Prepared
from ledger.models import (
    RESOLVED_STATUSES,
    Agent,
    Decision,
    DecisionStatus,
    Event,
    Project,
    Task,
    TaskComment,
    TaskStatus,
)
from ledger.tokens import AGENT_TOKEN_PREFIX, hash_token


def agent_for_token(token: str) -> Agent | None:
    """The active agent whose API token this is, or None.

    Looked up by the token's SHA-256 (unique index), then compared in constant
    time as a second guard. Every API request runs it, so its statement is
    compiled once (`core.prepared`; issue 20: ~20 µs a call instead of ~200).
    The row itself is never cached: a rotation or deactivation, in any server
    process, refuses the old token on the very next request.
    """
    if not token.startswith(AGENT_TOKEN_PREFIX) or len(token) > 200:
        return None
    digest = hash_token(token)
    agent = _ACTIVE_AGENT_BY_TOKEN_HASH.first(digest=digest)
    if agent is None or not hmac.compare_digest(agent.token_hash, digest):
        return None
    return agent


# Every API request runs the first; claim-next and every task endpoint the others: compiled once.
_ACTIVE_AGENT_BY_TOKEN_HASH: Prepared[Agent] = Prepared(
    lambda digest: Agent.objects.filter(token_hash=digest, is_active=True)[:1],
    samples=({"digest": "sample:token-hash-0"}, {"digest": "sample:token-hash-1"}),
)
_PROJECT_VISIBLE_TO_AGENT: Prepared[Project] = Prepared(
    lambda slug, agent_id: projects_visible_to(Agent(pk=agent_id)).filter(slug=slug).order_by("pk")[:1],
    samples=(
        {"slug": "sample:slug-0", "agent_id": SAMPLE_INT[0]},
        {"slug": "sample:slug-1", "agent_id": SAMPLE_INT[1]},
    ),
)


_TASK_VISIBLE_TO_AGENT: Prepared[Task] = Prepared(
    lambda key, agent_id: (
        tasks_visible_to(Agent(pk=agent_id)).select_related("project").filter(key=key).order_by("pk")[:1]
    ),
    samples=(
        {"key": "SAMPLE-0", "agent_id": SAMPLE_INT[0]},
        {"key": "SAMPLE-1", "agent_id": SAMPLE_INT[1]},
    ),
)


def projects_visible_to(agent: Agent | None) -> QuerySet[Project]:
    """The agent's projects; every project for staff (`agent=None`)."""
    projects = Project.objects.all()
    return projects if agent is None else projects.filter(agents=agent)


def tasks_visible_to(agent: Agent | None) -> QuerySet[Task]:
    """The tasks of the agent's projects; every task for staff (`agent=None`)."""
    tasks = Task.objects.all()
    return tasks if agent is None else tasks.filter(project__agents=agent)


def events_visible_to(agent: Agent | None) -> QuerySet[Event]:
    """The events of the agent's projects; every event for staff (`agent=None`)."""
    events = Event.objects.all()
    return events if agent is None else events.filter(project_id__in=projects_visible_to(agent).values("pk"))


def project_by_slug(slug: str, *, agent: Agent | None = None) -> Project:
    """The project, or NOT_FOUND — also when the agent may not see it."""
    if agent is None:
        project = projects_visible_to(agent).filter(slug=slug).first()
    else:
        project = _PROJECT_VISIBLE_TO_AGENT.first(slug=slug, agent_id=agent.pk)
    if project is None:
        raise no_such_project(slug)
    return project


def no_such_project(slug: str) -> NotFound:
    """What `project_by_slug` raises for a project the agent may not see (or that does not exist)."""
    return NotFound(f"No project {slug!r}.", details={"project": slug})


# `--until-empty` (SPEC §25): the stored statuses of work that is not finished. `ready` covers the claimable
# tasks, the held ones (in_progress is computed from leases) and those waiting on an unfinished blocker;
# `open` is work not released yet; `review` and `delivered` can come back as `ready` (changes requested, a
# landing that conflicts). `blocked` (by hand, with a reason) waits on a person, not on work: it does not
# keep a fleet waiting. `done` and `cancelled` are finished.
UNFINISHED_STATUSES = (TaskStatus.OPEN, TaskStatus.READY, TaskStatus.REVIEW, TaskStatus.DELIVERED)


def unfinished_tasks(project: Project, *, task_class: str | None = None) -> QuerySet[Task]:
    """The project's tasks (of `task_class`, when given) whose work is not finished (`UNFINISHED_STATUSES`)."""
    tasks = Task.objects.filter(project=project, status__in=UNFINISHED_STATUSES)
    return tasks if task_class is None else tasks.filter(task_class=task_class)


def project_progress(project: Project, *, task_class: str | None = None) -> dict[str, Any]:
    """How many tasks each stored status holds (blocked and the unfinished ones), and whether the work is
    finished: no task in `UNFINISHED_STATUSES`. One grouped count over the (project, status) index."""
    tasks = Task.objects.filter(project=project, status__in=(*UNFINISHED_STATUSES, TaskStatus.BLOCKED))
    if task_class is not None:
        tasks = tasks.filter(task_class=task_class)
    counts = {str(status): 0 for status in (*UNFINISHED_STATUSES, TaskStatus.BLOCKED)}
    for row in tasks.values("status").annotate(n=Count("pk")).order_by():
        counts[row["status"]] = row["n"]
    return {"tasks": counts, "finished": not any(counts[str(status)] for status in UNFINISHED_STATUSES)}


def task_by_key(key: str, *, agent: Agent | None = None) -> Task:
    """The task, or NOT_FOUND — also when it belongs to a project the agent may not see."""
    if agent is None:
        task = tasks_visible_to(agent).select_related("project").filter(key=key).first()
    else:
        task = _TASK_VISIBLE_TO_AGENT.first(key=key, agent_id=agent.pk)
    if task is None:
        raise NotFound(f"No task {key!r}.", details={"task": key})
    return task


# The long texts of a task an agent may read in ranges (the work context cuts them first).
TASK_TEXT_FIELDS = ("description", "acceptance_criteria")


@dataclass(frozen=True)
class TaskText:
    """A range of one of a task's long texts; offsets and lengths count characters."""

    key: str
    field: str
    offset: int
    length: int
    text: str

    @property
    def more(self) -> bool:
        return self.offset + len(self.text) < self.length


def task_text(key: str, *, field: str, offset: int, limit: int, agent: Agent | None = None) -> TaskText:
    """`limit` characters of the task's `field` from `offset` (empty beyond the end), or NOT_FOUND.

    The database cuts the range, so a megabyte description is never read whole.
    """
    if field not in TASK_TEXT_FIELDS:
        raise ValidationFailed(
            f"field must be one of {', '.join(TASK_TEXT_FIELDS)}.", details={"fields": {"field": ["invalid"]}}
        )
    if offset < 0 or limit < 1:
        raise ValidationFailed("offset must be >= 0 and limit >= 1.")
    row = (
        tasks_visible_to(agent)
        .filter(key=key)
        .annotate(text_length=Length(field), text_range=Substr(field, offset + 1, limit))
        .values_list("text_length", "text_range")
        .first()
    )
    if row is None:
        raise NotFound(f"No task {key!r}.", details={"task": key})
    length, text = row
    return TaskText(key=key, field=field, offset=offset, length=length or 0, text=text or "")


CHANGE_FIELDS = (
    "id",
    "type",
    "severity",
    "task__key",
    "attempt_id",
    "actor_agent__handle",
    "actor_user__username",
    "payload",
    "created_at",
)


def event_horizon() -> int | None:
    """The largest event id below which no event can still commit (PostgreSQL); None on SQLite."""
    if connection.vendor != "postgresql":
        return None
    with connection.cursor() as cursor:
        cursor.execute("SELECT ledger_event_horizon()")
        (horizon,) = cursor.fetchone()
    return int(horizon)


def feed_position() -> int:
    """An event id through which the feed already holds every event it ever will (read *before* the events).

    A waiter that read the feed after this call and found nothing new for
    itself waits for an event beyond it: the horizon on PostgreSQL, the
    highest id on SQLite (its writers are serialized).
    """
    horizon = event_horizon()
    if horizon is not None:
        return horizon
    return Event.objects.aggregate(latest=Max("id"))["latest"] or 0


def newest_event_id() -> int:
    """The id of the newest event there is (0: none): no cursor the feed ever handed out lies past it."""
    return Event.objects.aggregate(latest=Max("id"))["latest"] or 0


def latest_visible_event_id(*, agent: Agent | None, project: Project | None = None) -> int:
    """The newest event the caller may see among those the feed already serves (0: none): where a tail starts."""
    events = events_visible_to(agent).filter(id__lte=feed_position())
    if project is not None:
        events = events.filter(project=project)
    return events.aggregate(latest=Max("id"))["latest"] or 0


def visible_project_ids(agent: Agent | None) -> frozenset[int] | None:
    """The ids of the projects the agent may see; None for staff (every project, and events of none)."""
    if agent is None:
        return None
    return frozenset(projects_visible_to(agent).values_list("id", flat=True))


def changes_since(
    *, agent: Agent | None, since: int, limit: int, project: Project | None = None
) -> tuple[list[dict[str, Any]], bool]:
    """Events with id > since, ascending, at most `limit` (rows of CHANGE_FIELDS); and whether more follow.

    A reader that moves `since` to the last id it saw never skips an event.
    On PostgreSQL an event with a lower id can commit after one with a higher
    id, so the feed serves only ids up to the horizon below which every event
    has committed (or never will): migration ledger.0005 explains the proof.
    The horizon is read in a statement of its own *before* the events.
    SQLite serializes its writers and needs no horizon.
    """
    rows, more, _ = _changes(agent=agent, since=since, limit=limit, project=project, horizon=event_horizon())
    return rows, more


def changes_and_position(
    *, agent: Agent | None, since: int, limit: int, project: Project | None = None
) -> tuple[list[dict[str, Any]], bool, int]:
    """`changes_since`, and a `feed_position` read before the events: what a waiter that found nothing waits beyond.

    On PostgreSQL the position is the very horizon the events were read
    under, so a waiter's read costs one horizon statement, not two (a woken
    waiter is a full request, times every waiter: SPEC §18's waiter budget).
    """
    horizon = event_horizon()
    position = horizon if horizon is not None else feed_position()
    return _changes(agent=agent, since=since, limit=limit, project=project, horizon=horizon, position=position)


def _changes(
    *, agent: Agent | None, since: int, limit: int, project: Project | None, horizon: int | None, position: int = 0
) -> tuple[list[dict[str, Any]], bool, int]:
    if project is not None:
        events = events_visible_to(agent).filter(project=project, id__gt=since)
    elif agent is None:
        events = Event.objects.filter(id__gt=since)
    else:
        feed = _agent_feed(agent, since)
        if feed is None:
            return [], False, position
        events = feed
    if horizon is not None:
        events = events.filter(id__lte=horizon)
    rows = list(events.order_by("id").values(*CHANGE_FIELDS)[: limit + 1])
    return rows[:limit], len(rows) > limit, position


def _agent_feed(agent: Agent, since: int) -> QuerySet[Event] | None:
    """The events after `since` of the agent's projects, read along `event_project_feed` (project, id); None
    when there are none (SPEC §25: the feed follows the events it answers, not history).

    Walking the primary key from `since` and keeping the agent's projects' events reads every other
    project's event on the way (the feed from 0 read 25,000 rows at 100,000 tasks for 101 answered). One
    project is read along its own index range; several, from the first event of any of them after `since`
    (each project's first, one index probe apiece), so the walk skips the stretch before it.
    """
    projects = sorted(projects_visible_to(agent).values_list("id", flat=True))
    if len(projects) == 1:
        return Event.objects.filter(project_id=projects[0], id__gt=since)
    first_of_project = Event.objects.filter(project_id=OuterRef("pk"), id__gt=since).order_by("id").values("id")[:1]
    firsts = [
        first
        for first in Project.objects.filter(pk__in=projects)
        .annotate(first=Subquery(first_of_project))
        .values_list("first", flat=True)
        if first is not None
    ]
    if not firsts:
        return None
    return Event.objects.filter(project_id__in=projects, id__gte=min(firsts))


def decisions_visible_to(agent: Agent | None) -> QuerySet[Decision]:
    """The decisions of the agent's projects; every decision for staff (`agent=None`)."""
    decisions = Decision.objects.all()
    return decisions if agent is None else decisions.filter(project__agents=agent)


def decision_by_id(decision_id: int, *, agent: Agent | None) -> Decision:
    decision = decisions_visible_to(agent).select_related("project", "task").filter(pk=decision_id).first()
    if decision is None:
        raise NotFound(f"No decision {decision_id}.", details={"decision": decision_id})
    return decision


def _active_decisions(project_id: int, task_id: int, limit: int) -> QuerySet[Decision]:
    return (
        Decision.objects.filter(project_id=project_id, status=DecisionStatus.ACTIVE)
        .filter(Q(task__isnull=True) | Q(task_id=task_id))
        .select_related("author_agent", "author_user")
        .order_by("-id")[:limit]
    )


def active_decisions_of_outer_task() -> QuerySet[Decision]:
    """`_active_decisions`' rows for the outer query's task (an `Exists` in a claim's state read)."""
    return Decision.objects.filter(project_id=OuterRef("project_id"), status=DecisionStatus.ACTIVE).filter(
        Q(task__isnull=True) | Q(task_id=OuterRef("pk"))
    )


def _latest_comments(task_id: int, limit: int) -> QuerySet[TaskComment]:
    return (
        TaskComment.objects.filter(task_id=task_id)
        .select_related("author_agent", "author_user")
        .order_by("-id")[:limit]
    )


_TWO_IDS = (
    {"project_id": SAMPLE_INT[0], "task_id": SAMPLE_INT[1]},
    {"project_id": SAMPLE_INT[1], "task_id": SAMPLE_INT[0]},
)


@functools.cache
def _prepared_decisions(limit: int) -> Prepared[Decision]:
    """Every work context reads these (SPEC §20: compiled once per limit)."""
    return Prepared(lambda project_id, task_id: _active_decisions(project_id, task_id, limit), samples=_TWO_IDS)


@functools.cache
def _prepared_comments(limit: int) -> Prepared[TaskComment]:
    return Prepared(
        lambda task_id: _latest_comments(task_id, limit),
        samples=({"task_id": SAMPLE_INT[0]}, {"task_id": SAMPLE_INT[1]}),
    )


def active_decisions_for(task: Task, *, limit: int) -> list[Decision]:
    """The active decisions of the task and of its project as a whole, newest first (SPEC §16.2)."""
    return list(_prepared_decisions(limit).objects(project_id=task.project_id, task_id=task.pk))


def recent_comments(task: Task, *, limit: int) -> list[TaskComment]:
    """The task's latest comments, oldest of them first."""
    return list(reversed(list(_prepared_comments(limit).objects(task_id=task.pk))))


# Word for word the condition of the index `task_live_class`, its values written in (SQLite uses a partial
# index only for a condition it can see is the index's, and a bound parameter is not).
_LIVE = "NOT (status IN ({})) AND task_class >= ''".format(
    ", ".join(f"'{status}'" for status in sorted(RESOLVED_STATUSES))
)
_LIVE_CLASSES = f"""
    WITH RECURSIVE classes(name, n) AS (
        SELECT min(task_class), 1 FROM ledger_task WHERE {_LIVE}
        UNION ALL
        SELECT (SELECT min(task_class) FROM ledger_task WHERE {_LIVE} AND task_class > classes.name), n + 1
        FROM classes WHERE classes.name IS NOT NULL AND n < %s
    )
    SELECT name FROM classes WHERE name IS NOT NULL
"""  # noqa: S608 (constants of this module only)


def live_task_classes(limit: int) -> list[str]:
    """The first `limit` task classes of live work (tasks neither done nor cancelled), in order.

    A loose scan of the index `task_live_class`: one index probe per class (the next class after the
    last), on both databases, not a DISTINCT over every live task (issue 33: 117 to 255 ms at 1M tasks,
    276k of them ready, on every task list page)."""
    with connection.cursor() as cursor:
        cursor.execute(_LIVE_CLASSES, [limit])
        return [name for (name,) in cursor.fetchall()]
