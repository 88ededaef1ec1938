"""Every write to the ledger's own models.

Each service runs in one transaction (`write_transaction`) and appends its
event inside it. Lease-aware rules (holder writes, contested writes) wrap
these in `leases.services`; doors call the outermost service.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from django.core.exceptions import ValidationError as DjangoValidationError
from django.db import IntegrityError
from django.db.models import F, Model, Q

from config.db import write_transaction
from config.errors import DependencyCycle, InvalidStatusTransition, ValidationFailed, VersionConflict
from ledger import clock
from ledger.actors import Actor
from ledger.models import (
    ALLOWED_TRANSITIONS,
    Agent,
    Event,
    EventType,
    Isolation,
    Project,
    Severity,
    Task,
    TaskDependency,
    TaskStatus,
)
from ledger.tokens import hash_token, new_agent_token

# A task is born open, ready or blocked; review, done and cancelled are reached.
INITIAL_STATUSES = frozenset({TaskStatus.OPEN, TaskStatus.READY, TaskStatus.BLOCKED})

# Fields a task update may change; everything else is the server's.
UPDATABLE_TASK_FIELDS = frozenset(
    {
        "title",
        "description",
        "acceptance_criteria",
        "task_class",
        "priority",
        "labels",
        "status",
        "blocked_reason",
        "reserved_for",
    }
)

# Fields whose change since a claim makes finishing need an acknowledgement.
ACKNOWLEDGED_FIELDS = frozenset({"description", "acceptance_criteria", "status"})

LAST_SEEN_THROTTLE = timedelta(seconds=30)


def event_append(
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
    """Append one event. Call it inside the transaction of the change it records."""
    return Event.objects.create(
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


def validate_model(instance: Model, *, exclude: Iterable[str] = ()) -> None:
    """Field validation without the per-foreign-key existence queries."""
    foreign_keys = [f.name for f in instance._meta.concrete_fields if f.is_relation]
    try:
        instance.full_clean(exclude=[*exclude, *foreign_keys], validate_unique=False, validate_constraints=False)
    except DjangoValidationError as exc:
        raise ValidationFailed(
            "; ".join(f"{field}: {' '.join(messages)}" for field, messages in exc.message_dict.items()),
            details={"fields": exc.message_dict},
        ) from None


def key_prefix_from_slug(slug: str) -> str:
    prefix = re.sub(r"[^A-Za-z0-9]", "", slug).upper()[:10]
    if not prefix or not prefix[0].isalpha():
        raise ValidationFailed(
            f"Cannot derive a task key prefix from slug {slug!r}; give one explicitly.",
            details={"fields": {"key_prefix": ["required"]}},
        )
    return prefix


# --- projects -----------------------------------------------------------------


@write_transaction
def project_create(
    *,
    slug: str,
    name: str,
    actor: Actor,
    key_prefix: str = "",
    repository: str = "",
    default_branch: str = "main",
    default_lease_seconds: int = 900,
    queue_wait_max_seconds: int = 3600,
    required_isolation: str = Isolation.NONE,
) -> Project:
    now = clock.now()
    project = Project(
        slug=slug,
        name=name,
        key_prefix=key_prefix or key_prefix_from_slug(slug),
        repository=repository,
        default_branch=default_branch,
        default_lease_seconds=default_lease_seconds,
        queue_wait_max_seconds=queue_wait_max_seconds,
        required_isolation=required_isolation,
        created_at=now,
    )
    validate_model(project)
    if Project.objects.filter(Q(slug=slug) | Q(key_prefix=project.key_prefix)).exists():
        raise ValidationFailed(
            f"A project with slug {slug!r} or key prefix {project.key_prefix!r} exists.",
            details={"fields": {"slug": ["taken"]}},
        )
    project.save()
    event_append(
        type=EventType.PROJECT_CREATED,
        actor=actor,
        at=now,
        project=project,
        payload={"slug": slug, "key_prefix": project.key_prefix},
    )
    return project


# --- tasks --------------------------------------------------------------------


@write_transaction
def task_create(
    *,
    project: Project,
    title: str,
    actor: Actor,
    description: str = "",
    acceptance_criteria: str = "",
    status: str = TaskStatus.OPEN,
    priority: int = 0,
    task_class: str = "",
    labels: Sequence[str] = (),
    blocked_by: Sequence[Task] = (),
    blocked_reason: str = "",
) -> Task:
    """Create a task with the next gap-free key of its project.

    The project's sequence is bumped by a conditional UPDATE in this
    transaction: concurrent creators queue on the project row (PostgreSQL) or
    on the write lock (SQLite), and a rollback returns the number.
    """
    if project.archived_at is not None:
        raise ValidationFailed(f"Project {project.slug} is archived.")
    if status not in INITIAL_STATUSES:
        raise ValidationFailed(
            f"A new task starts as open, ready or blocked, not {status!r}.",
            details={"fields": {"status": [f"must be one of {sorted(INITIAL_STATUSES)}"]}},
        )
    if status == TaskStatus.BLOCKED and not blocked_reason.strip():
        raise ValidationFailed(
            "A blocked task needs a blocked_reason.", details={"fields": {"blocked_reason": ["required"]}}
        )
    if not isinstance(labels, list | tuple) or not all(isinstance(label, str) for label in labels):
        raise ValidationFailed("labels must be a list of strings.", details={"fields": {"labels": ["list of strings"]}})
    foreign = [blocker.key for blocker in blocked_by if blocker.project_id != project.pk]
    if foreign:
        raise ValidationFailed(f"Blockers must be in project {project.slug}: {', '.join(foreign)}.")

    now = clock.now()
    task = Task(
        project=project,
        title=title,
        description=description,
        acceptance_criteria=acceptance_criteria,
        status=status,
        priority=priority,
        task_class=task_class,
        labels=list(labels),
        blocked_reason=blocked_reason if status == TaskStatus.BLOCKED else "",
        ready_since=now if status == TaskStatus.READY else None,
        created_at=now,
        updated_at=now,
        number=0,
        key="-",
    )
    validate_model(task, exclude=["number", "key"])

    Project.objects.filter(pk=project.pk).update(task_sequence=F("task_sequence") + 1)
    task.number = Project.objects.filter(pk=project.pk).values_list("task_sequence", flat=True).get()
    task.key = f"{project.key_prefix}-{task.number}"
    task.save()
    TaskDependency.objects.bulk_create(
        TaskDependency(task=task, blocked_by=blocker, created_at=now)
        for blocker in {b.pk: b for b in blocked_by}.values()
    )
    event_append(
        type=EventType.TASK_CREATED,
        actor=actor,
        at=now,
        task=task,
        payload={
            "key": task.key,
            "status": status,
            "priority": priority,
            "task_class": task_class,
            "blocked_by": [blocker.key for blocker in blocked_by],
        },
    )
    return task


def check_status_transition(old: str, new: str) -> None:
    if new not in TaskStatus.values:
        raise ValidationFailed(f"Unknown status {new!r}.", details={"fields": {"status": ["unknown"]}})
    if new not in ALLOWED_TRANSITIONS[old]:
        raise InvalidStatusTransition(
            f"A task cannot go from {old} to {new}.",
            details={"from": old, "to": new, "allowed": sorted(ALLOWED_TRANSITIONS[old])},
        )


def lock_task(task_id: int) -> Task:
    """The task row, locked for the rest of the transaction (FOR NO KEY UPDATE: inserts that
    reference the task still proceed)."""
    return Task.objects.select_for_update(no_key=True, of=("self",)).select_related("project").get(pk=task_id)


@write_transaction
def task_update(
    *,
    task: Task,
    actor: Actor,
    changes: Mapping[str, Any],
    expected_version: int | None = None,
) -> tuple[Task, frozenset[str]]:
    """Change a task's own fields and/or stored status; returns it and the changed field names.

    Keeps: optimistic concurrency (`expected_version`), the transition table,
    `blocked` only with a reason, `version` +1 per effective change, and one
    `task.status_changed` and/or `task.updated` event. A change that changes
    nothing bumps nothing and records nothing.
    """
    return apply_task_update(locked=lock_task(task.pk), actor=actor, changes=changes, expected_version=expected_version)


def apply_task_update(
    *,
    locked: Task,
    actor: Actor,
    changes: Mapping[str, Any],
    expected_version: int | None = None,
    now: datetime | None = None,
) -> tuple[Task, frozenset[str]]:
    """The body of `task_update`, for a service that holds the task's row lock in its own transaction.

    A calling service passes the `now` it read, so one operation sees one instant.
    """
    unknown = set(changes) - UPDATABLE_TASK_FIELDS
    if unknown:
        raise ValidationFailed(
            f"These fields cannot be updated: {', '.join(sorted(unknown))}.",
            details={"fields": {name: ["read-only or unknown"] for name in sorted(unknown)}},
        )
    if expected_version is not None and locked.version != expected_version:
        raise VersionConflict(
            f"{locked.key} is at version {locked.version}, not {expected_version}.",
            details={"current_version": locked.version, "expected_version": expected_version},
        )
    changed = {name: value for name, value in changes.items() if _field_value(locked, name) != _comparable(value)}
    old_status = locked.status
    new_status = changed.get("status", old_status)
    if "status" in changed:
        check_status_transition(old_status, new_status)
    if new_status == TaskStatus.BLOCKED:
        reason = changed.get("blocked_reason", locked.blocked_reason)
        if not str(reason or "").strip():
            raise ValidationFailed(
                "A blocked task needs a blocked_reason.", details={"fields": {"blocked_reason": ["required"]}}
            )
    else:
        # Only a blocked task carries a reason; leaving `blocked` clears it.
        changed.pop("blocked_reason", None)
        if locked.blocked_reason:
            changed["blocked_reason"] = ""
    if "labels" in changed and (
        not isinstance(changed["labels"], list) or not all(isinstance(label, str) for label in changed["labels"])
    ):
        raise ValidationFailed("labels must be a list of strings.", details={"fields": {"labels": ["list of strings"]}})
    if not changed:
        return locked, frozenset()

    now = now or clock.now()
    for name, value in changed.items():
        setattr(locked, name, value)
    if new_status != old_status and new_status == TaskStatus.READY:
        locked.ready_since = now
    elif new_status != old_status and old_status == TaskStatus.READY:
        locked.ready_since = None
    locked.version += 1
    locked.updated_at = now
    validate_model(locked)
    locked.save(update_fields=[*changed, "version", "updated_at", "ready_since"])

    if new_status != old_status:
        event_append(
            type=EventType.TASK_STATUS_CHANGED,
            actor=actor,
            at=now,
            task=locked,
            payload={"from": old_status, "to": new_status, "version": locked.version},
        )
    other_fields = sorted(set(changed) - {"status"})
    if other_fields:
        event_append(
            type=EventType.TASK_UPDATED,
            actor=actor,
            at=now,
            task=locked,
            payload={"fields": other_fields, "version": locked.version},
        )
    return locked, frozenset(changed)


def _field_value(task: Task, name: str) -> Any:
    if name == "reserved_for":
        return task.reserved_for_id
    return getattr(task, name)


def _comparable(value: Any) -> Any:
    return value.pk if isinstance(value, Agent) else value


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


# --- agents -------------------------------------------------------------------


@write_transaction
def agent_create(*, handle: str, kind: str, actor: Actor, projects: Iterable[Project] = ()) -> tuple[Agent, str]:
    """Create an agent; returns it and its API token, which is never stored or shown again."""
    now = clock.now()
    token = new_agent_token()
    agent = Agent(handle=handle, kind=kind, token_hash=hash_token(token), created_at=now)
    validate_model(agent)
    if Agent.objects.filter(handle=handle).exists():
        raise ValidationFailed(f"An agent {handle!r} exists.", details={"fields": {"handle": ["taken"]}})
    agent.save()
    project_list = list(projects)
    agent.projects.set(project_list)
    event_append(
        type=EventType.AGENT_CREATED,
        actor=actor,
        at=now,
        payload={"handle": handle, "kind": kind, "projects": sorted(p.slug for p in project_list)},
    )
    return agent, token


@write_transaction
def agent_rotate_token(*, agent: Agent, actor: Actor) -> tuple[Agent, str]:
    """Replace the agent's token; the old one stops working in the same commit."""
    now = clock.now()
    token = new_agent_token()
    Agent.objects.filter(pk=agent.pk).update(token_hash=hash_token(token))
    agent.refresh_from_db()
    event_append(type=EventType.AGENT_TOKEN_ROTATED, actor=actor, at=now, payload={"handle": agent.handle})
    return agent, token


@dataclass(frozen=True)
class ProjectsChanged:
    agent: Agent
    added: list[str]  # slugs
    removed: list[str]


@write_transaction
def agent_set_projects(*, agent: Agent, projects: Iterable[Project], actor: Actor) -> ProjectsChanged:
    """Make `projects` exactly the projects the agent may see; one `agent.projects_changed` event if any changed.

    Leases the agent holds in a project it loses are not ended: it may still
    renew, checkpoint and finish them (holder calls go by attempt), but it no
    longer sees the project or claims in it. Force-release them to end them.
    """
    now = clock.now()
    agent = Agent.objects.select_for_update(no_key=True).get(pk=agent.pk)
    wanted = {project.pk: project for project in projects}
    current = {project.pk: project for project in agent.projects.all()}
    added = sorted(wanted[pk].slug for pk in wanted.keys() - current.keys())
    removed = sorted(current[pk].slug for pk in current.keys() - wanted.keys())
    if added or removed:
        agent.projects.set(wanted.values())
        event_append(
            type=EventType.AGENT_PROJECTS_CHANGED,
            actor=actor,
            at=now,
            payload={"handle": agent.handle, "added": added, "removed": removed},
        )
    return ProjectsChanged(agent=agent, added=added, removed=removed)


@write_transaction
def agent_deactivate(*, agent: Agent, actor: Actor) -> Agent:
    """Refuse the agent's token from now on. Its attempts run out on their own leases."""
    now = clock.now()
    changed = Agent.objects.filter(pk=agent.pk, is_active=True).update(is_active=False, deactivated_at=now)
    agent.refresh_from_db()
    if changed:
        event_append(type=EventType.AGENT_DEACTIVATED, actor=actor, at=now, payload={"handle": agent.handle})
    return agent


def agent_heartbeat(*, agent: Agent) -> datetime:
    """The run heartbeat (SPEC §8): touches `last_seen_at`, at most one write per 30 s. No event."""
    now = clock.now()
    Agent.objects.filter(
        Q(last_seen_at__isnull=True) | Q(last_seen_at__lte=now - LAST_SEEN_THROTTLE), pk=agent.pk
    ).update(last_seen_at=now)
    return now
