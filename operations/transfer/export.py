"""Write one project as JSON Lines (SPEC §17), streaming: memory does not grow with the rows written.

Each section is read with `.values(...).iterator(chunk_size=...)` in id order
and written line by line; what is held is the handle of every agent and the
username of every user the project names (one string each). Read in one
read transaction, so the file is one consistent snapshot of a serving
database: REPEATABLE READ on PostgreSQL; on SQLite a deferred transaction
(WAL gives it a snapshot at its first read and it never takes the write lock,
where Django's own transactions here are IMMEDIATE and would hold writers off).
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any, TextIO

from django.contrib.auth import get_user_model

from core.db import read_snapshot
from leases.models import Attempt, ReviewRequest
from ledger.models import Agent, Decision, Event, Project, Task, TaskComment
from operations.transfer.rows import (
    AGENT,
    END,
    EXTERNAL_DEPENDENCY,
    FORMAT_VERSION,
    HEADER,
    SECTIONS,
    USER,
    Column,
    Section,
    columns,
    encode,
    external_dependencies_of,
    has_own_id,
)

CHUNK_ROWS = 2000


def _line(row: dict[str, Any]) -> str:
    return json.dumps(row, ensure_ascii=False, sort_keys=True, separators=(",", ":")) + "\n"


def _agent_ids(project: Project) -> set[int]:
    """Every agent a row of the project names (a handful of queries, one id each)."""
    ids: set[int] = set(project.agents.values_list("id", flat=True))
    sources: list[tuple[Any, str]] = [
        (Task.objects.filter(project=project), "reserved_for_id"),
        (Attempt.objects.filter(task__project=project), "agent_id"),
        (ReviewRequest.objects.filter(task__project=project), "reviewer_agent_id"),
        (Decision.objects.filter(project=project), "author_agent_id"),
        (TaskComment.objects.filter(task__project=project), "author_agent_id"),
        (Event.objects.filter(project=project), "actor_agent_id"),
    ]
    for queryset, column in sources:
        ids.update(queryset.exclude(**{column: None}).values_list(column, flat=True).distinct())
    return ids


def _user_ids(project: Project) -> set[int]:
    ids: set[int] = set()
    sources: list[tuple[Any, str]] = [
        (ReviewRequest.objects.filter(task__project=project), "reviewer_user_id"),
        (Decision.objects.filter(project=project), "author_user_id"),
        (TaskComment.objects.filter(task__project=project), "author_user_id"),
        (Event.objects.filter(project=project), "actor_user_id"),
    ]
    for queryset, column in sources:
        ids.update(queryset.exclude(**{column: None}).values_list(column, flat=True).distinct())
    return ids


def _section_rows(
    project: Project, section: Section, handles: dict[int, str], usernames: dict[int, str]
) -> Iterator[dict[str, Any]]:
    cols: list[Column] = columns(section)
    own_id = has_own_id(section)
    names = (["id"] if own_id else []) + [column.attname for column in cols]
    order = "pk" if section.type != "project" else "id"
    for values in section.rows_of(project).order_by(order).values(*names).iterator(chunk_size=CHUNK_ROWS):
        row: dict[str, Any] = {"type": section.type}
        if own_id:
            row["id"] = values["id"]
        for column in cols:
            value = values[column.attname]
            if column.references == AGENT and value is not None:
                value = handles[value]
            elif column.references == USER and value is not None:
                value = usernames[value]
            row[column.name] = encode(value)
        yield row


def _external_dependency_rows(project: Project) -> Iterator[dict[str, Any]]:
    """The project's tasks' blockers of other projects, as references by key (`rows.EXTERNAL_DEPENDENCY`)."""
    rows = (
        external_dependencies_of(project)
        .order_by("pk")
        .values("task_id", "blocked_by__key", "created_at", "removed_at")
        .iterator(chunk_size=CHUNK_ROWS)
    )
    for values in rows:
        yield {
            "type": EXTERNAL_DEPENDENCY,
            "task": values["task_id"],
            "blocked_by_key": values["blocked_by__key"],
            "created_at": encode(values["created_at"]),
            "removed_at": encode(values["removed_at"]),
        }


def project_export(*, project: Project, out: TextIO) -> dict[str, int]:
    """Write `project` to `out`, header first and counts last; returns the counts written."""
    counts: dict[str, int] = {}
    with read_snapshot():
        agent_ids = _agent_ids(project)
        members = set(project.agents.values_list("id", flat=True))
        agents = list(
            Agent.objects.filter(pk__in=agent_ids).order_by("handle").values("id", "handle", "kind", "created_at")
        )
        handles = {agent["id"]: agent["handle"] for agent in agents}
        user_model = get_user_model()
        users = dict(
            user_model.objects.filter(pk__in=_user_ids(project))
            .order_by(user_model.USERNAME_FIELD)
            .values_list("id", user_model.USERNAME_FIELD)
        )
        out.write(_line({"type": HEADER, "format": FORMAT_VERSION}))
        for section in SECTIONS:
            for row in _section_rows(project, section, handles, users):
                out.write(_line(row))
                counts[section.type] = counts.get(section.type, 0) + 1
            if section.type == "dependency":
                for row in _external_dependency_rows(project):
                    out.write(_line(row))
                    counts[EXTERNAL_DEPENDENCY] = counts.get(EXTERNAL_DEPENDENCY, 0) + 1
            if section.type == "project":
                for username in sorted(users.values()):
                    out.write(_line({"type": USER, "username": username}))
                for agent in agents:
                    out.write(
                        _line(
                            {
                                "type": AGENT,
                                "handle": agent["handle"],
                                "kind": agent["kind"],
                                "created_at": encode(agent["created_at"]),
                                "member": agent["id"] in members,
                            }
                        )
                    )
                counts[USER] = len(users)
                counts[AGENT] = len(handles)
        out.write(_line({"type": END, "counts": counts}))
    return counts
