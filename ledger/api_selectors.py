"""Reads the ledger's API doors need beyond `ledger.selectors`: visible projects and the changes feed.

Every read is scoped: an agent sees the events of its projects only; a staff
user (agent=None) sees everything.
"""

from __future__ import annotations

from typing import Any

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


def changes_since(
    *, agent: Agent | None, since: int, limit: int, project: Project | None = None
) -> tuple[list[dict[str, Any]], bool]:
    """Events with id > since, ascending, at most `limit`; and whether more follow.

    Event ids are visible in commit order (migration ledger.0004 on
    PostgreSQL; SQLite serializes writers), so a reader that moves `since`
    to the last id it saw never skips one.
    """
    events = events_visible_to(agent).filter(id__gt=since)
    if project is not None:
        events = events.filter(project=project)
    rows = list(events.order_by("id").values(*CHANGE_FIELDS)[: limit + 1])
    return rows[:limit], len(rows) > limit
