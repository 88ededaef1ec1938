"""Review pinned to what was reviewed (SPEC §16.1).

A work attempt finishing with outcome `review` opens a `ReviewRequest`
pinned to the task's version and the branch head at that moment
(`review_open`, inside the finish). A reviewer agent claims it as it claims
work — the claim machinery of `leases.services.claims`, with its lock, epoch
bump, token, label and event — getting an attempt of `kind = review`
(`leases.services.review_claims`: `review_claim`, `review_claim_next`). Finishing that attempt with
`approved`, `changes_requested` or `blocked` decides the request and moves
the task (`review_attempt_finish`, called by `attempt_finish`); a person
decides through `review_decide` (the console), by the same rules.

Approving a target that moved — the task's version, or the branch head as
the latest git facts of the task's attempts report it — answers
`STALE_REVIEW_TARGET` and supersedes the request; so does any decision on a
task that is no longer in `review`. The superseded request's task goes back
to `ready` (when it was still in review): the work must be looked at again.

A request stays `in_review` once claimed until it is decided; when its review
attempt ended undecided (released, expired, failed, handed off) it may be
claimed again. Requests are never deleted.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from typing import Any

from core.db import write_transaction
from core.errors import StaleReviewTarget, TaskTaken, ValidationFailed
from leases.models import (
    PENDING_REVIEW_STATUSES,
    REVIEW_FINDING_MAX_CHARS,
    REVIEW_FINDINGS_MAX_ITEMS,
    REVIEW_SUMMARY_MAX_CHARS,
    Attempt,
    AttemptStatus,
    ReviewRequest,
    ReviewStatus,
)
from leases.selectors import live_attempts
from leases.services.delivering import delivery_facts, task_deliver
from leases.services.ending import end_attempt, task_claimable_again
from ledger import clock
from ledger.actors import Actor
from ledger.models import EventType, Severity, Task, TaskStatus
from ledger.services import apply_task_update, event_append, lock_task


class ReviewOutcome:
    APPROVED = "approved"
    CHANGES_REQUESTED = "changes_requested"
    BLOCKED = "blocked"
    ALL = (APPROVED, CHANGES_REQUESTED, BLOCKED)


DECISION_EVENTS = {
    ReviewOutcome.APPROVED: EventType.REVIEW_APPROVED,
    ReviewOutcome.CHANGES_REQUESTED: EventType.REVIEW_CHANGES_REQUESTED,
    ReviewOutcome.BLOCKED: EventType.REVIEW_BLOCKED,
}
TASK_STATUS_AFTER = {
    ReviewOutcome.APPROVED: TaskStatus.DONE,
    ReviewOutcome.CHANGES_REQUESTED: TaskStatus.READY,
    ReviewOutcome.BLOCKED: TaskStatus.BLOCKED,
}


def validate_review_decision(outcome: str, summary: Any, findings: Any) -> tuple[str, list[str]]:
    """The decision's own bounds; longer input is VALIDATION_ERROR, never cut."""
    if outcome not in ReviewOutcome.ALL:
        raise ValidationFailed(f"A review's outcome is one of {', '.join(ReviewOutcome.ALL)}.")
    if not isinstance(summary, str):
        raise ValidationFailed("result_summary must be a string.")
    if len(summary) > REVIEW_SUMMARY_MAX_CHARS:
        raise ValidationFailed(
            f"result_summary is at most {REVIEW_SUMMARY_MAX_CHARS} characters.",
            details={"fields": {"result_summary": [f"at most {REVIEW_SUMMARY_MAX_CHARS} characters"]}},
        )
    if outcome == ReviewOutcome.BLOCKED and not summary.strip():
        raise ValidationFailed(
            "Blocking needs a result_summary: it becomes the task's blocked_reason.",
            details={"fields": {"result_summary": ["required for blocked"]}},
        )
    if not isinstance(findings, list | tuple) or not all(isinstance(item, str) for item in findings):
        raise ValidationFailed("findings must be a list of strings.", details={"fields": {"findings": ["strings"]}})
    if len(findings) > REVIEW_FINDINGS_MAX_ITEMS:
        raise ValidationFailed(
            f"findings holds at most {REVIEW_FINDINGS_MAX_ITEMS} items; got {len(findings)}.",
            details={"fields": {"findings": [f"at most {REVIEW_FINDINGS_MAX_ITEMS} items"]}},
        )
    too_long = [index for index, item in enumerate(findings) if len(item) > REVIEW_FINDING_MAX_CHARS]
    if too_long:
        raise ValidationFailed(
            f"Each finding is at most {REVIEW_FINDING_MAX_CHARS} characters; items {too_long} are longer.",
            details={"fields": {"findings": [f"at most {REVIEW_FINDING_MAX_CHARS} characters each"]}},
        )
    return summary, list(findings)


def _supersede(request: ReviewRequest, *, now: datetime, actor: Actor, why: dict[str, Any]) -> None:
    ReviewRequest.objects.filter(pk=request.pk).update(status=ReviewStatus.SUPERSEDED, decided_at=now)
    request.status, request.decided_at = ReviewStatus.SUPERSEDED, now
    event_append(
        type=EventType.REVIEW_SUPERSEDED,
        severity=Severity.WARN,
        actor=actor,
        at=now,
        task=request.task,
        attempt_id=request.work_attempt_id,
        payload={"review": request.pk, **why},
    )


def review_open(*, work_attempt: Attempt, task: Task, now: datetime, actor: Actor) -> ReviewRequest:
    """Open the review of `work_attempt`, which just finished with outcome `review` (inside its finish).

    Pinned to the task's version after that finish and the attempt's head
    commit. An older request of the task still pending is superseded: it
    reviewed work that this finish replaced.
    """
    for older in ReviewRequest.objects.select_related("task__project").filter(
        task=task, status__in=PENDING_REVIEW_STATUSES
    ):
        _supersede(older, now=now, actor=actor, why={"replaced_by_attempt": work_attempt.pk})
    request = ReviewRequest.objects.create(
        task=task,
        work_attempt=work_attempt,
        task_version=task.version,
        head_commit=work_attempt.head_commit,
        created_at=now,
    )
    event_append(
        type=EventType.REVIEW_REQUESTED,
        actor=actor,
        at=now,
        task=task,
        attempt_id=work_attempt.pk,
        payload={"review": request.pk, "task_version": task.version, "head_commit": work_attempt.head_commit},
    )
    return request


def current_head(request: ReviewRequest) -> str | None:
    """The branch head as last reported: the latest head commit of the task's attempts since the work attempt."""
    return (
        Attempt.objects.filter(task_id=request.task_id, pk__gte=request.work_attempt_id, head_commit__isnull=False)
        .order_by("-id")
        .values_list("head_commit", flat=True)
        .first()
    )


def target_moved(request: ReviewRequest, task: Task) -> dict[str, Any]:
    """What moved since the request was opened (empty: nothing did)."""
    moved: dict[str, Any] = {}
    if task.version != request.task_version:
        moved["task_version"] = {"requested": request.task_version, "current": task.version}
    head = current_head(request)
    if head is not None and head != request.head_commit:
        moved["head_commit"] = {"requested": request.head_commit, "current": head}
    if task.status != TaskStatus.REVIEW:
        moved["status"] = task.status
    return moved


def _decide(
    request: ReviewRequest,
    *,
    task: Task,
    outcome: str,
    summary: str,
    findings: Sequence[str],
    actor: Actor,
    now: datetime,
) -> Task | StaleReviewTarget:
    """Decide the (locked task's) pending request; a stale target supersedes it and is returned as the refusal."""
    moved = target_moved(request, task)
    if moved and (outcome == ReviewOutcome.APPROVED or "status" in moved):
        _supersede(request, now=now, actor=actor, why={"moved": sorted(moved)})
        if task.status == TaskStatus.REVIEW:
            task, _ = apply_task_update(locked=task, actor=actor, changes={"status": TaskStatus.READY}, now=now)
        return StaleReviewTarget(
            f"{task.key} moved since review {request.pk} was requested ({', '.join(sorted(moved))}); "
            "the request is superseded.",
            details={"review": request.pk, "task": task.key, "moved": moved},
        )
    if outcome == ReviewOutcome.APPROVED and task.project.landing_on:
        # SPEC §21.1: an approval delivers the reviewed head to the landing queue.
        branch, head, pushed = delivery_facts(task, since_attempt_id=request.work_attempt_id)
        task = task_deliver(
            locked=task, attempt=request.work_attempt, branch=branch, head=head, pushed=pushed, actor=actor, now=now
        )
    else:
        changes: dict[str, Any] = {"status": TASK_STATUS_AFTER[outcome]}
        if outcome == ReviewOutcome.BLOCKED:
            changes["blocked_reason"] = summary
        task, _ = apply_task_update(locked=task, actor=actor, changes=changes, now=now)
    ReviewRequest.objects.filter(pk=request.pk).update(
        status=outcome,
        summary=summary,
        findings=list(findings),
        decided_at=now,
        reviewer_agent=actor.agent,
        reviewer_user=actor.user,
    )
    event_append(
        type=DECISION_EVENTS[outcome],
        actor=actor,
        at=now,
        task=task,
        attempt_id=request.review_attempt_id if actor.agent is not None else None,
        payload={"review": request.pk, "reviewer": actor.label, "findings": len(findings)},
    )
    return task


def review_attempt_finish(
    held: Attempt, *, task: Task, outcome: str, summary: str, findings: Sequence[str], now: datetime
) -> Task | StaleReviewTarget:
    """Finish a held review attempt with a decision, inside `attempt_finish`'s transaction.

    A decision ends the attempt `completed`; a refused one (the target moved)
    ends it `released`: nothing was decided, and the request is superseded.
    """
    actor = Actor(agent=held.agent)
    request = (
        ReviewRequest.objects.select_related("task__project")
        .filter(review_attempt=held, status=ReviewStatus.IN_REVIEW)
        .first()
    )
    if request is None:
        raise ValidationFailed(f"Attempt {held.pk} has no review in progress to decide.")
    decided = _decide(request, task=task, outcome=outcome, summary=summary, findings=findings, actor=actor, now=now)
    if isinstance(decided, StaleReviewTarget):
        end_attempt(held, now=now, status=AttemptStatus.RELEASED)
        # The review's lease ended without a decision: a task reopened to ready meanwhile was held
        # by it until now, and waits from now (as after any release; a task just moved out of
        # review is ready from now already).
        task = task_claimable_again(task, now=now)
        event_append(
            type=EventType.ATTEMPT_RELEASED,
            actor=actor,
            at=now,
            task=task,
            attempt_id=held.pk,
            payload={"reason": "review target moved", "review": request.pk},
        )
        return decided
    end_attempt(held, now=now, status=AttemptStatus.COMPLETED, result_summary=summary)
    event_append(
        type=EventType.ATTEMPT_FINISHED,
        actor=actor,
        at=now,
        task=decided,
        attempt_id=held.pk,
        payload={
            "outcome": outcome,
            "status": AttemptStatus.COMPLETED,
            "failure_reason_code": None,
            "interruption_reason_code": None,
        },
    )
    return decided


@write_transaction
def _review_decide(
    *, request_id: int, outcome: str, summary: str, findings: list[str], actor: Actor
) -> ReviewRequest | StaleReviewTarget:
    now = clock.now()
    task_id = ReviewRequest.objects.values_list("task_id", flat=True).get(pk=request_id)
    task = lock_task(task_id)
    request = ReviewRequest.objects.select_related("task__project").get(pk=request_id)
    if request.status not in PENDING_REVIEW_STATUSES:
        raise ValidationFailed(f"Review {request.pk} is already {request.status}.", details={"status": request.status})
    live = live_attempts(now).filter(task=task).select_related("agent").first()
    if live is not None:
        raise TaskTaken(
            f"{task.key} is held by {live.agent.handle} until {live.lease_expires_at.isoformat()}; "
            "force-release it before deciding here.",
            details={"task": task.key, "holder": live.agent.handle},
        )
    decided = _decide(request, task=task, outcome=outcome, summary=summary, findings=findings, actor=actor, now=now)
    if isinstance(decided, StaleReviewTarget):
        return decided
    request.refresh_from_db()
    return request


def review_decide(
    *, request: ReviewRequest, outcome: str, actor: Actor, summary: str = "", findings: Sequence[str] = ()
) -> ReviewRequest:
    """A person's decision on a pending review (the console): the rules of a review attempt's finish.

    Refused while a reviewer holds a live lease on the task (TASK_TAKEN).
    """
    summary, cleaned = validate_review_decision(outcome, summary, findings)
    decided = _review_decide(request_id=request.pk, outcome=outcome, summary=summary, findings=cleaned, actor=actor)
    if isinstance(decided, StaleReviewTarget):
        raise decided
    return decided


__all__ = [
    "ReviewOutcome",
    "review_attempt_finish",
    "review_decide",
    "review_open",
    "target_moved",
    "validate_review_decision",
]
