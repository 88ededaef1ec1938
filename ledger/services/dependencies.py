"""Dependencies between tasks, across projects too (SPEC §22): added and removed (the row stays), never a cycle.

The cycle check walks the blocker edges from the new blocker, level by level (one statement per
level), over every project. Additions are serialized on project rows: the task's project, the
blocker's, and the projects of every task the walk reached, locked in id order and walked again
under the locks; two concurrent additions that would close a cycle between them both reach the
project of the other's task, so one waits for the other and then sees its edge.
"""

from __future__ import annotations

from django.db import IntegrityError

from core.db import write_transaction
from core.errors import DependencyCycle, ValidationFailed
from ledger import clock
from ledger.actors import Actor
from ledger.models import EventType, Project, Task, TaskDependency
from ledger.services.events import event_append


def _reachable(start: int) -> dict[int, int | None]:
    """Every task `start` waits for, directly or not, with the task it was reached from (a BFS tree)."""
    previous: dict[int, int | None] = {start: None}
    frontier = {start}
    while frontier:
        edges = TaskDependency.objects.filter(task_id__in=frontier, removed_at__isnull=True).values_list(
            "task_id", "blocked_by_id"
        )
        reached: set[int] = set()
        for task_id, blocked_by_id in edges:
            if blocked_by_id not in previous:
                previous[blocked_by_id] = task_id
                reached.add(blocked_by_id)
        frontier = reached
    return previous


def _lock_projects(project_ids: set[int]) -> None:
    list(Project.objects.filter(pk__in=project_ids).order_by("pk").select_for_update(no_key=True).values_list("pk"))


@write_transaction
def dependency_add(*, task: Task, blocked_by: Task, actor: Actor) -> TaskDependency:
    """Make `task` wait for `blocked_by`. Refuses cycles (`DEPENDENCY_CYCLE`).

    `blocked_by` may be a task of another project (SPEC §22). The walk is taken again under the
    locks of every project it reached (see the module's docstring), so two concurrent additions
    cannot close a cycle between them.
    """
    if task.pk == blocked_by.pk:
        raise DependencyCycle(f"{task.key} cannot block itself.", details={"path": [task.key, task.key]})
    locked: set[int] = set()
    while True:
        tree = _reachable(blocked_by.pk)
        wanted = {task.project_id, blocked_by.project_id} | set(
            Task.objects.filter(pk__in=list(tree)).values_list("project_id", flat=True).distinct()
        )
        if wanted <= locked:
            break
        _lock_projects(wanted - locked)
        locked |= wanted
    existing = TaskDependency.objects.filter(task=task, blocked_by=blocked_by, removed_at__isnull=True).first()
    if existing is not None:
        return existing
    if task.pk in tree:
        path = [task.pk]
        while (parent := tree[path[-1]]) is not None:
            path.append(parent)
        path.reverse()  # blocked_by → … → task
        keys = dict(Task.objects.filter(pk__in=path).values_list("pk", "key"))
        raise DependencyCycle(
            f"{task.key} blocked by {blocked_by.key} would close a cycle.",
            details={"path": [task.key, *(keys[pk] for pk in path)]},
        )
    now = clock.now()
    try:
        dependency = TaskDependency.objects.create(task=task, blocked_by=blocked_by, created_at=now)
    except IntegrityError:
        raise ValidationFailed("That dependency exists.") from None
    event_append(
        type=EventType.TASK_DEPENDENCY_ADDED,
        actor=actor,
        at=now,
        task=task,
        payload={"blocked_by": blocked_by.key},
    )
    return dependency


@write_transaction
def dependency_remove(*, task: Task, blocked_by: Task, actor: Actor) -> bool:
    """End a dependency (the row stays, with `removed_at`). Returns whether one was present."""
    now = clock.now()
    ended = TaskDependency.objects.filter(task=task, blocked_by=blocked_by, removed_at__isnull=True).update(
        removed_at=now
    )
    if ended:
        event_append(
            type=EventType.TASK_DEPENDENCY_REMOVED,
            actor=actor,
            at=now,
            task=task,
            payload={"blocked_by": blocked_by.key},
        )
    return bool(ended)
