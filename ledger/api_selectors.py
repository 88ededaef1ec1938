"""Reads the ledger's API doors need beyond `ledger.selectors`: visible projects and the changes feed.

Every read is scoped: an agent sees the events of its projects only; a staff
user (agent=None) sees everything.
"""

from __future__ import annotations

from typing import Any

from django.db import connection
from django.db.models import QuerySet

from ledger.models import Agent, Event, Project
from ledger.selectors import projects_visible_to


def projects_for(agent: Agent | None) -> QuerySet[Project]:
    return Project.objects.all() if agent is None else projects_visible_to(agent)


def events_visible_to(agent: Agent | None) -> QuerySet[Event]:
    events = Event.objects.all()
    if agent is not None:
        events = events.filter(project_id__in=projects_visible_to(agent).values("pk"))
    return events


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


def changes_since(
    *, agent: Agent | None, since: int, limit: int, project: Project | None = None
) -> tuple[list[dict[str, Any]], bool]:
    """Events with id > since, ascending, at most `limit`; and whether more follow.

    A reader that moves `since` to the last id it saw never skips an event.
    On PostgreSQL an event with a lower id can commit after one with a higher
    id, so the feed serves only ids up to the horizon below which every event
    has committed (or never will): migration ledger.0005 explains the proof.
    The horizon is read in a statement of its own *before* the events.
    SQLite serializes its writers and needs no horizon.
    """
    events = events_visible_to(agent).filter(id__gt=since)
    horizon = event_horizon()
    if horizon is not None:
        events = events.filter(id__lte=horizon)
    if project is not None:
        events = events.filter(project=project)
    rows = list(events.order_by("id").values(*CHANGE_FIELDS)[: limit + 1])
    return rows[:limit], len(rows) > limit
