"""Task reservations (`Task.reserved_for`): clearing one, by hand or because its agent can no longer claim.

A reservation (`Task.reserved_for`, set by an admin's reassign) means only
that agent may claim the task. An agent that is deactivated, or loses the
task's project, can never claim it, so the task would wait for nobody: the
services that do that (`agent_deactivate`, `agent_set_projects`) clear the
agent's reservations in their own transaction. Each cleared reservation is a
versioned change of the task (`task.updated`, field `reserved_for`) and one
`task.reservation_cleared` event naming the agent and why.
"""

from __future__ import annotations

from collections.abc import Iterable
from datetime import datetime

from core.db import write_transaction
from core.errors import ValidationFailed
from ledger import clock
from ledger.actors import Actor
from ledger.models import Agent, EventType, Task
from ledger.services.events import event_append
from ledger.services.tasks import apply_task_update, lock_task

REASON_MAX_CHARS = 500


@write_transaction
def task_reservation_clear(*, task: Task, actor: Actor, reason: str = "") -> Task:
    """Let any agent of the project claim the task again. A task without a reservation is left as it is."""
    if not isinstance(reason, str) or len(reason) > REASON_MAX_CHARS:
        raise ValidationFailed(
            f"The reason is a text of at most {REASON_MAX_CHARS} characters.",
            details={"fields": {"reason": [f"at most {REASON_MAX_CHARS} characters"]}},
        )
    locked = lock_task(task.pk)
    if locked.reserved_for_id is None:
        return locked
    return _clear(locked, actor=actor, reason=reason.strip() or "cleared by hand", now=clock.now())


def reservations_clear_for(
    *, agent: Agent, actor: Actor, reason: str, now: datetime, project_slugs: Iterable[str] | None = None
) -> list[str]:
    """Clear the agent's reservations (in the given projects only, if named); runs in the caller's transaction.

    Returns the keys of the tasks whose reservation was cleared.
    """
    tasks = Task.objects.filter(reserved_for=agent)
    if project_slugs is not None:
        tasks = tasks.filter(project__slug__in=list(project_slugs))
    cleared = []
    for task_id in tasks.order_by("pk").values_list("pk", flat=True):
        locked = lock_task(task_id)
        if locked.reserved_for_id == agent.pk:
            cleared.append(_clear(locked, actor=actor, reason=reason, now=now).key)
    return cleared


def _clear(locked: Task, *, actor: Actor, reason: str, now: datetime) -> Task:
    previous = locked.reserved_for.handle if locked.reserved_for else None
    updated, _ = apply_task_update(locked=locked, actor=actor, changes={"reserved_for": None}, now=now)
    event_append(
        type=EventType.TASK_RESERVATION_CLEARED,
        actor=actor,
        at=now,
        task=updated,
        payload={"agent": previous, "reason": reason[:REASON_MAX_CHARS], "version": updated.version},
    )
    return updated
