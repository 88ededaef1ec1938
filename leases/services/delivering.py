"""Delivering finished work to the landing queue (SPEC §21.1).

In a project with landing on (`Project.target_branch` set), a work attempt that finishes `done`
and an approved review do not make the task `done`: they make it `delivered`, recording the branch
and head commit a lander will fetch. `done` then means landed (`landing.services`). A project with
landing off keeps part two's behaviour: the callers only deliver when `project.landing_on`.

A delivery names a commit the lander can fetch: the head reported for the branch, pushed to the
project's remote when it has one, else in the project's repository (the lander fetches from there).
Otherwise the finish is refused with `VALIDATION_ERROR` naming what is missing, and nothing of it
is kept (the refusal is raised inside the finish's transaction).
"""

from __future__ import annotations

from datetime import datetime

from core.errors import ValidationFailed
from leases.models import Attempt
from ledger.actors import Actor
from ledger.models import EventType, Task, TaskStatus
from ledger.services import apply_task_update, event_append


def _refuse_unfetchable(task: Task, *, branch: str, head: str | None, pushed: bool | None) -> None:
    project = task.project
    missing: list[str] = []
    if not branch:
        missing.append("branch: the attempt has no branch")
    if not head:
        missing.append("head_commit: report the branch's head (git facts, or `head_commit` in the finish)")
    if project.remote and pushed is not True:
        missing.append(f"pushed: push {branch or 'the branch'} to the project's remote first, then report pushed")
    if not project.remote and not project.repository:
        missing.append("project: neither a remote nor a repository to land from (set one on the project)")
    if missing:
        raise ValidationFailed(
            f"{task.key} cannot be delivered for landing on {project.target_branch}: " + "; ".join(missing) + ".",
            details={"task": task.key, "missing": [item.split(":", 1)[0] for item in missing], "reasons": missing},
        )


def delivery_facts(task: Task, *, since_attempt_id: int) -> tuple[str, str | None, bool | None]:
    """The branch, head and pushed fact as last reported by the task's attempts since `since_attempt_id`."""
    latest = (
        Attempt.objects.filter(task_id=task.pk, pk__gte=since_attempt_id, head_commit__isnull=False)
        .order_by("-id")
        .values_list("branch", "head_commit", "pushed")
        .first()
    )
    if latest is None:
        branch = Attempt.objects.filter(pk=since_attempt_id).values_list("branch", flat=True).first() or ""
        return branch, None, None
    return latest[0], latest[1], latest[2]


def task_deliver(
    *, locked: Task, attempt: Attempt, branch: str, head: str | None, pushed: bool | None, actor: Actor, now: datetime
) -> Task:
    """Move the (locked) task to `delivered` with its branch and head, and append `task.delivered`.

    Called inside the finishing (or review-deciding) transaction; raises `ValidationFailed` when
    the head cannot be fetched by a lander, which rolls that transaction back.
    """
    _refuse_unfetchable(locked, branch=branch, head=head, pushed=pushed)
    assert head is not None
    task, _ = apply_task_update(locked=locked, actor=actor, changes={"status": TaskStatus.DELIVERED}, now=now)
    Task.objects.filter(pk=task.pk).update(delivered_at=now, delivered_branch=branch, delivered_commit=head)
    task.delivered_at, task.delivered_branch, task.delivered_commit = now, branch, head
    event_append(
        type=EventType.TASK_DELIVERED,
        actor=actor,
        at=now,
        task=task,
        attempt_id=attempt.pk,
        payload={"branch": branch, "head_commit": head, "target_branch": task.project.target_branch},
    )
    return task
