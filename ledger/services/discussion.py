"""Decisions and task comments (SPEC §16.2): bounded, evented, never deleted.

A decision is superseded by another of the same project, never edited away.
Every comment appends `task.commented` (so a holder's renewal can count the
comments made since its claim, `leases.selectors.comments_since_claim`).
Longer input than the bounds is VALIDATION_ERROR, never cut.
"""

from __future__ import annotations

from core.db import write_transaction
from core.errors import ValidationFailed
from ledger import clock
from ledger.actors import Actor
from ledger.models import (
    COMMENT_BODY_MAX_CHARS,
    DECISION_BODY_MAX_CHARS,
    DECISION_TITLE_MAX_CHARS,
    Decision,
    DecisionStatus,
    EventType,
    Project,
    Task,
    TaskComment,
)
from ledger.services.events import event_append

EXCERPT_CHARS = 300


def _author(actor: Actor) -> dict[str, object]:
    if actor.agent is None and actor.user is None:
        raise ValidationFailed("A decision or comment has an author: an agent or a person.")
    return {"author_agent": actor.agent, "author_user": actor.user}


def _bounded(value: object, *, field: str, limit: int, required: bool) -> str:
    if not isinstance(value, str):
        raise ValidationFailed(f"{field} must be a string.", details={"fields": {field: ["a string"]}})
    if required and not value.strip():
        raise ValidationFailed(f"{field} must not be blank.", details={"fields": {field: ["required"]}})
    if len(value) > limit:
        raise ValidationFailed(
            f"{field} is {len(value)} characters; at most {limit}.",
            details={"fields": {field: [f"at most {limit} characters"]}, "length": len(value)},
        )
    return value


def decision_text_check(*, title: object, body: object) -> tuple[str, str]:
    """A decision's title (required) and body within their bounds, else VALIDATION_ERROR.

    `decision_create` checks here, and so does a plan before it writes anything.
    """
    return (
        _bounded(title, field="title", limit=DECISION_TITLE_MAX_CHARS, required=True),
        _bounded(body, field="body", limit=DECISION_BODY_MAX_CHARS, required=False),
    )


@write_transaction
def decision_create(
    *, project: Project, title: str, actor: Actor, body: str = "", task: Task | None = None
) -> Decision:
    """Record a decision of the project (optionally about one of its tasks)."""
    title, body = decision_text_check(title=title, body=body)
    if task is not None and task.project_id != project.pk:
        raise ValidationFailed(
            f"{task.key} is not a task of {project.slug}.", details={"fields": {"task": ["other project"]}}
        )
    now = clock.now()
    decision = Decision.objects.create(
        project=project, task=task, title=title, body=body, created_at=now, **_author(actor)
    )
    event_append(
        type=EventType.DECISION_CREATED,
        actor=actor,
        at=now,
        project=project,
        task=task,
        payload={"decision": decision.pk, "title": title[:EXCERPT_CHARS]},
    )
    return decision


@write_transaction
def decision_supersede(*, decision: Decision, by: Decision, actor: Actor) -> Decision:
    """Mark `decision` superseded by `by` (an active decision of the same project)."""
    locked = Decision.objects.select_for_update(no_key=True).select_related("project").get(pk=decision.pk)
    if by.pk == locked.pk:
        raise ValidationFailed("A decision cannot supersede itself.", details={"fields": {"by": ["itself"]}})
    if by.project_id != locked.project_id:
        raise ValidationFailed(
            "A decision is superseded by one of its own project.", details={"fields": {"by": ["other project"]}}
        )
    if locked.status != DecisionStatus.ACTIVE:
        raise ValidationFailed(
            f"Decision {locked.pk} is already superseded.", details={"decision": locked.pk, "status": locked.status}
        )
    if Decision.objects.filter(pk=by.pk, status=DecisionStatus.ACTIVE).count() != 1:
        raise ValidationFailed(f"Decision {by.pk} is not active.", details={"fields": {"by": ["not active"]}})
    now = clock.now()
    Decision.objects.filter(pk=locked.pk).update(status=DecisionStatus.SUPERSEDED, superseded_by=by, superseded_at=now)
    locked.refresh_from_db()
    event_append(
        type=EventType.DECISION_SUPERSEDED,
        actor=actor,
        at=now,
        project=locked.project,
        task=locked.task,
        payload={"decision": locked.pk, "by": by.pk},
    )
    return locked


@write_transaction
def comment_add(*, task: Task, body: str, actor: Actor) -> TaskComment:
    """Comment on a task; appends `task.commented`."""
    body = _bounded(body, field="body", limit=COMMENT_BODY_MAX_CHARS, required=True)
    now = clock.now()
    comment = TaskComment.objects.create(task=task, body=body, created_at=now, **_author(actor))
    event_append(
        type=EventType.TASK_COMMENTED,
        actor=actor,
        at=now,
        task=task,
        payload={"comment": comment.pk, "length": len(body)},
    )
    return comment
