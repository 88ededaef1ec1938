"""The audit log's one writer (SPEC §1.7): every state change appends its event in its own transaction."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from datetime import datetime
from typing import Any, ParamSpec

from core.combined import insert_or_queue
from core.prepared import insert
from ledger.actors import Actor
from ledger.models import Event, EventType, Project, Severity, Task

_P = ParamSpec("_P")


def event_row(
    *,
    type: EventType,
    actor: Actor,
    at: datetime,
    project: Project | None = None,
    task: Task | None = None,
    attempt_id: int | None = None,
    severity: str = Severity.INFO,
    payload: dict[str, Any] | None = None,
) -> Event:
    """The unsaved event `event_append` inserts, for a caller that writes it as a part of a combined
    statement (`core.combined`, PostgreSQL) in the same transaction."""
    return Event(
        type=type,
        severity=severity,
        project=project if project is not None else (task.project if task is not None else None),
        task=task,
        attempt_id=attempt_id,
        actor_agent=actor.agent,
        actor_user=actor.user,
        payload=payload or {},
        created_at=at,
    )


def _appending(row: Callable[_P, Event]) -> Callable[_P, Event]:
    """`row`'s event, inserted: the writer takes the row's own parameters, declared once there."""

    def event_append(*args: _P.args, **kwargs: _P.kwargs) -> Event:
        """Append one event (the parameters are `event_row`'s). Call it inside the transaction of the
        change it records.

        In a `core.combined.writes_combined` block (PostgreSQL) it is queued, and has no id until sent.
        """
        event = row(*args, **kwargs)
        return event if insert_or_queue(event) else insert(event)

    return event_append


event_append = _appending(event_row)


def events_append(*, type: EventType, actor: Actor, at: datetime, rows: Sequence[tuple[Task, dict[str, Any]]]) -> None:
    """Append one event of `type` per (task, payload), in one INSERT, in the order given.

    For a write that changes many tasks at once (a plan); each row is the
    event `event_append` would have written for that task.
    """
    Event.objects.bulk_create(
        Event(
            type=type,
            severity=Severity.INFO,
            project_id=task.project_id,
            task=task,
            actor_agent=actor.agent,
            actor_user=actor.user,
            payload=payload,
            created_at=at,
        )
        for task, payload in rows
    )
