"""Tasks: creation with gap-free keys, the plain update, the transition table, and when a task waits.

`ready_since` — when a task started waiting in the queue — has its one owner
here: `waiting_since` for a task created or moved into a status, and
`tasks_wait_again` for tasks whose lease ended without finishing them. The
sweep's set-based SQL (`leases.services.expiry.SWEEP_BATCH_SQL`) writes the
same value as `tasks_wait_again`; a test runs both paths.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import datetime
from typing import Any

from django.db.models import Case, F, Value, When

from core.combined import update_row_or_queue
from core.db import write_transaction
from core.errors import InvalidStatusTransition, ValidationFailed, VersionConflict
from core.prepared import SAMPLE_INT, Prepared
from core.text import normalise_newlines
from ledger import clock
from ledger.actors import Actor
from ledger.label_sets import validate_label_set
from ledger.models import (
    ALLOWED_TRANSITIONS,
    Agent,
    EventType,
    PathsMode,
    Project,
    Task,
    TaskDependency,
    TaskStatus,
)
from ledger.paths import normalise_paths, validate_budget_cost, validate_budget_tokens, validate_paths_mode
from ledger.services.events import event_append
from ledger.services.validation import validate_model

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
        "requires",  # SPEC §23.1
        "status",
        "blocked_reason",
        "reserved_for",
        # SPEC §19
        "budget_tokens",
        "budget_cost_usd",
        "paths",
        "paths_mode",
    }
)


def task_spending_and_paths(changes: Mapping[str, Any]) -> dict[str, Any]:
    """The budget, path (SPEC §19) and `requires` (SPEC §23.1) fields among `changes`, validated and normalised."""
    checked: dict[str, Any] = {}
    if "budget_tokens" in changes:
        checked["budget_tokens"] = validate_budget_tokens(changes["budget_tokens"], field="budget_tokens")
    if "budget_cost_usd" in changes:
        checked["budget_cost_usd"] = validate_budget_cost(changes["budget_cost_usd"], field="budget_cost_usd")
    if "paths" in changes:
        checked["paths"] = normalise_paths(changes["paths"])
    if "paths_mode" in changes:
        checked["paths_mode"] = validate_paths_mode(changes["paths_mode"])
    if "requires" in changes:
        checked["requires"] = validate_label_set(changes["requires"], field="requires")
    return checked


# Long texts that come from textareas: stored with `\n` line endings only, and a text equal to the
# stored one once both are normalised is no change (no version, no event, no acknowledgement asked).
NORMALISED_TEXT_FIELDS = frozenset({"description", "acceptance_criteria", "blocked_reason"})


# Fields whose change since a claim makes finishing need an acknowledgement.
ACKNOWLEDGED_FIELDS = frozenset({"description", "acceptance_criteria", "status"})


def waiting_since(
    *, old_status: str | None, new_status: str, current: datetime | None, at: datetime
) -> datetime | None:
    """`ready_since` after a task is created (`old_status=None`) or moves from `old_status` to `new_status` at `at`.

    Entering `ready` starts a waiting period; leaving it ends the period;
    anything else keeps the current one.
    """
    if old_status is None:
        return at if new_status == TaskStatus.READY else None
    if new_status == old_status:
        return current
    if new_status == TaskStatus.READY:
        return at
    return None if old_status == TaskStatus.READY else current


def tasks_wait_again(ended_at: Mapping[int, datetime]) -> None:
    """Tasks whose lease ended at the given moments without finishing them wait again from then (stored `ready` only).

    Runs inside the caller's transaction, which holds the tasks' attempts.
    """
    if not ended_at:
        return
    moments = [When(pk=task_id, then=Value(moment)) for task_id, moment in ended_at.items()]
    Task.objects.filter(pk__in=ended_at, status=TaskStatus.READY).update(ready_since=Case(*moments))


def task_prepare(
    *,
    project: Project,
    title: str,
    now: datetime,
    description: str = "",
    acceptance_criteria: str = "",
    status: str = TaskStatus.OPEN,
    priority: int = 0,
    task_class: str = "",
    labels: Sequence[str] = (),
    requires: Sequence[str] = (),
    blocked_reason: str = "",
    budget_tokens: int | None = None,
    budget_cost_usd: Any = None,
    paths: Sequence[str] = (),
    paths_mode: str = PathsMode.EXCLUSIVE,
) -> Task:
    """A new task of `project`, checked by every creation rule but without its key and unsaved.

    The one place the creation rules live: `task_create` saves what this
    answers, and a plan (`ledger.services.plans`) checks each of its tasks here
    before it writes any of them. Reads nothing from the database.
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
    spending = task_spending_and_paths(
        {
            "budget_tokens": budget_tokens,
            "budget_cost_usd": budget_cost_usd,
            "paths": paths,
            "paths_mode": paths_mode,
            "requires": requires,
        }
    )
    task = Task(
        project=project,
        title=title,
        description=normalise_newlines(description),
        acceptance_criteria=normalise_newlines(acceptance_criteria),
        status=status,
        priority=priority,
        task_class=task_class,
        labels=list(labels),
        blocked_reason=normalise_newlines(blocked_reason) if status == TaskStatus.BLOCKED else "",
        ready_since=waiting_since(old_status=None, new_status=status, current=None, at=now),
        created_at=now,
        updated_at=now,
        number=0,
        key="-",
        **spending,
    )
    validate_model(task, exclude=["number", "key"])
    return task


def task_numbers_take(project: Project, count: int) -> range:
    """The next `count` gap-free task numbers of `project`, taken in the caller's transaction.

    The project's sequence is bumped by a conditional UPDATE: concurrent
    creators queue on the project row (PostgreSQL) or on the write lock
    (SQLite), and a rollback returns the numbers.
    """
    Project.objects.filter(pk=project.pk).update(task_sequence=F("task_sequence") + count)
    last = Project.objects.filter(pk=project.pk).values_list("task_sequence", flat=True).get()
    return range(last - count + 1, last + 1)


def task_created_payload(task: Task, blocker_keys: Sequence[str]) -> dict[str, Any]:
    """The payload of `task.created`, the same from every path that creates a task."""
    return {
        "key": task.key,
        "status": task.status,
        "priority": task.priority,
        "task_class": task.task_class,
        "blocked_by": list(blocker_keys),
    }


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
    requires: Sequence[str] = (),
    blocked_by: Sequence[Task] = (),
    blocked_reason: str = "",
    budget_tokens: int | None = None,
    budget_cost_usd: Any = None,
    paths: Sequence[str] = (),
    paths_mode: str = PathsMode.EXCLUSIVE,
) -> Task:
    """Create a task with the next gap-free key of its project (`task_numbers_take`), by the rules of `task_prepare`."""
    now = clock.now()
    task = task_prepare(
        project=project,
        title=title,
        now=now,
        description=description,
        acceptance_criteria=acceptance_criteria,
        status=status,
        priority=priority,
        task_class=task_class,
        labels=labels,
        requires=requires,
        blocked_reason=blocked_reason,
        budget_tokens=budget_tokens,
        budget_cost_usd=budget_cost_usd,
        paths=paths,
        paths_mode=paths_mode,
    )
    # SPEC §22: a blocker may be a task of another project on this server (a new task closes no cycle).
    (task.number,) = task_numbers_take(project, 1)
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
        payload=task_created_payload(task, [blocker.key for blocker in blocked_by]),
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


_LOCK_TASK: Prepared[Task] = Prepared(
    lambda task_id: (
        Task.objects.select_for_update(no_key=True, of=("self",)).select_related("project").filter(pk=task_id)
    ),
    samples=({"task_id": SAMPLE_INT[0]}, {"task_id": SAMPLE_INT[1]}),
)


def lock_task(task_id: int) -> Task:
    """The task row, locked for the rest of the transaction (FOR NO KEY UPDATE: inserts that
    reference the task still proceed); compiled once (SPEC §20). `Task.DoesNotExist` as `get()`."""
    task = _LOCK_TASK.first(task_id=task_id)
    if task is None:
        raise Task.DoesNotExist(f"No task {task_id}.")
    return task


def apply_task_update(
    *,
    locked: Task,
    actor: Actor,
    changes: Mapping[str, Any],
    expected_version: int | None = None,
    now: datetime | None = None,
) -> tuple[Task, frozenset[str]]:
    """Change a task's own fields and/or stored status; returns it and the changed field names.

    The caller holds the task's row lock (`lock_task`) in its own transaction:
    the one caller in production is `leases.services.task_update`, which
    decides holder or contested first, so no door can skip that rule. It
    passes the `now` it read, so one operation sees one instant.

    Keeps: optimistic concurrency (`expected_version`), the transition table,
    `blocked` only with a reason, `version` +1 per effective change, and one
    `task.status_changed` and/or `task.updated` event. A change that changes
    nothing bumps nothing and records nothing.
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
    changes = {**changes, **task_spending_and_paths(changes)}
    changes.update({name: normalise_newlines(changes[name]) for name in NORMALISED_TEXT_FIELDS & set(changes)})
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
    locked.ready_since = waiting_since(old_status=old_status, new_status=new_status, current=locked.ready_since, at=now)
    locked.version += 1
    locked.updated_at = now
    # Only what changes is validated: the stored fields were when they were written.
    validate_model(locked, exclude=[field.name for field in locked._meta.fields if field.name not in changed])
    update_row_or_queue(locked, [*changed, "version", "updated_at", "ready_since"])

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
    if name in NORMALISED_TEXT_FIELDS:
        return normalise_newlines(getattr(task, name))  # a text stored before normalisation compares as it reads
    return getattr(task, name)


def _comparable(value: Any) -> Any:
    return value.pk if isinstance(value, Agent) else value
