"""Dependencies between tasks of one project: added and removed (the row stays), never a cycle."""

from __future__ import annotations

from collections.abc import Mapping

from django.db import IntegrityError

from core.db import write_transaction
from core.errors import DependencyCycle, ValidationFailed
from ledger import clock
from ledger.actors import Actor
from ledger.models import EventType, Project, Task, TaskDependency
from ledger.services.events import event_append


def _blocker_graph(project: Project) -> dict[int, set[int]]:
    graph: dict[int, set[int]] = {}
    edges = TaskDependency.objects.filter(task__project=project, removed_at__isnull=True).values_list(
        "task_id", "blocked_by_id"
    )
    for task_id, blocked_by_id in edges:
        graph.setdefault(task_id, set()).add(blocked_by_id)
    return graph


@write_transaction
def dependency_add(*, task: Task, blocked_by: Task, actor: Actor) -> TaskDependency:
    """Make `task` wait for `blocked_by`. Refuses cycles (`DEPENDENCY_CYCLE`).

    Dependency changes of one project are serialized on the project row, so two
    concurrent additions cannot close a cycle between them.
    """
    if task.project_id != blocked_by.project_id:
        raise ValidationFailed("A task can only be blocked by a task of its own project.")
    if task.pk == blocked_by.pk:
        raise DependencyCycle(f"{task.key} cannot block itself.", details={"path": [task.key, task.key]})
    project = Project.objects.select_for_update(no_key=True).get(pk=task.project_id)
    existing = TaskDependency.objects.filter(task=task, blocked_by=blocked_by, removed_at__isnull=True).first()
    if existing is not None:
        return existing
    graph = _blocker_graph(project)
    path = _path(graph, start=blocked_by.pk, goal=task.pk)
    if path is not None:
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


def _path(graph: Mapping[int, set[int]], *, start: int, goal: int) -> list[int] | None:
    """A path start → … → goal along blocker edges, if there is one."""
    previous: dict[int, int | None] = {start: None}
    frontier = [start]
    while frontier:
        node = frontier.pop()
        if node == goal:
            path = [node]
            while (parent := previous[path[-1]]) is not None:
                path.append(parent)
            return list(reversed(path))
        for neighbour in graph.get(node, ()):
            if neighbour not in previous:
                previous[neighbour] = node
                frontier.append(neighbour)
    return None


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
