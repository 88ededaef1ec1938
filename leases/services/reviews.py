"""Review pinned to what was reviewed (SPEC §16.1).

A work attempt finishing with outcome `review` opens a `ReviewRequest`
pinned to the task's version and the branch head at that moment
(`review_open`, inside the finish). A reviewer agent claims it as it claims
work — the claim machinery of `leases.services.claims`, with its lock, epoch
bump, token, label and event — getting an attempt of `kind = review`
(`review_claim`, `review_claim_next`). Finishing that attempt with
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
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from django.db.models import Exists, OuterRef, QuerySet

from core.db import write_transaction
from core.errors import LedgerError, PermissionDenied, StaleReviewTarget, TaskTaken, ValidationFailed
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
from leases.services.claim_state import ClaimRequest, claim_state, validate_claim_request
from leases.services.claims import ClaimCollided, LeaseGrant, ReviewClaim, claim_locked
from leases.services.ending import end_attempt, task_claimable_again
from leases.services.tallies import tally_claim_refusal
from ledger import clock
from ledger.actors import Actor
from ledger.models import Agent, EventType, Project, Severity, Task, TaskStatus
from ledger.services import apply_task_update, event_append, lock_task

CLAIM_NEXT_MAX_CANDIDATES = 64


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


def _refuse_self_review(request: ReviewRequest, agent: Agent, project: Project) -> None:
    if not project.allow_self_review and request.work_attempt.agent_id == agent.pk:
        raise PermissionDenied(
            "self-review: the agent that did the work cannot review it in this project.",
            details={"review": request.pk, "reason": "self-review"},
        )


def _mark_claimed(request: ReviewRequest, grant: LeaseGrant, *, agent: Agent, now: datetime) -> None:
    ReviewRequest.objects.filter(pk=request.pk).update(
        status=ReviewStatus.IN_REVIEW, review_attempt=grant.attempt, reviewer_agent=agent
    )
    request.status, request.review_attempt, request.reviewer_agent = ReviewStatus.IN_REVIEW, grant.attempt, agent
    event_append(
        type=EventType.REVIEW_CLAIMED,
        actor=Actor(agent=agent),
        at=now,
        task=grant.task,
        attempt_id=grant.attempt.pk,
        payload={"review": request.pk, "reviewer": agent.handle, "epoch": grant.attempt.epoch},
    )


@dataclass(frozen=True)
class ReviewGrant:
    grant: LeaseGrant
    request: ReviewRequest


def _claim_request_locked(request: ReviewRequest, *, task: Task, agent: Agent, claim: ClaimRequest) -> ReviewGrant:
    now = clock.now()
    if request.status not in PENDING_REVIEW_STATUSES:
        raise ValidationFailed(
            f"Review {request.pk} is {request.status}: there is nothing to review.",
            details={"review": request.pk, "status": request.status},
        )
    _refuse_self_review(request, agent, task.project)
    work = request.work_attempt
    grant = claim_locked(
        claim_state(task),
        agent=agent,
        now=now,
        request=claim,
        review=ReviewClaim(branch=work.branch, base_commit=work.base_commit),
    )
    _mark_claimed(request, grant, agent=agent, now=now)
    return ReviewGrant(grant=grant, request=request)


@write_transaction
def _review_claim(*, request_id: int, agent: Agent, claim: ClaimRequest) -> ReviewGrant:
    task_id = ReviewRequest.objects.values_list("task_id", flat=True).get(pk=request_id)
    task = lock_task(task_id)  # the task's lock serializes claims, as for work
    request = ReviewRequest.objects.select_related("work_attempt").get(pk=request_id)
    return _claim_request_locked(request, task=task, agent=agent, claim=claim)


def review_claim(*, request: ReviewRequest, agent: Agent, lease_seconds: int | None = None) -> ReviewGrant:
    """Claim this review: a review attempt under its own lease, token and epoch."""
    claim = ClaimRequest(lease_seconds=lease_seconds)
    validate_claim_request(claim)
    if not agent.is_active:
        raise PermissionDenied(f"Agent {agent.handle} is deactivated.")
    try:
        return _review_claim(request_id=request.pk, agent=agent, claim=claim)
    except TaskTaken:
        tally_claim_refusal(project_id=request.task.project_id, agent=agent)
        raise


def claimable_reviews(*, project: Project, agent: Agent | None, now: datetime) -> QuerySet[ReviewRequest]:
    """Pending requests of the project's tasks in review with no live lease, oldest first; without the
    caller's own work unless the project allows self-review."""
    requests = ReviewRequest.objects.filter(
        task__project=project,
        task__project__archived_at__isnull=True,
        task__status=TaskStatus.REVIEW,
        status__in=PENDING_REVIEW_STATUSES,
    ).exclude(Exists(live_attempts(now).filter(task=OuterRef("task"))))
    if agent is not None and not project.allow_self_review:
        requests = requests.exclude(work_attempt__agent=agent)
    return requests.order_by("id")


@write_transaction
def _review_claim_next(*, project: Project, agent: Agent, claim: ClaimRequest) -> ReviewGrant | TaskTaken | None:
    now = clock.now()
    candidates = (
        claimable_reviews(project=project, agent=agent, now=now)
        .select_related("task__project", "work_attempt")
        .select_for_update(skip_locked=True, no_key=True, of=("self", "task"))
    )
    passed_over: list[int] = []
    for _ in range(CLAIM_NEXT_MAX_CANDIDATES):
        candidate = (candidates.exclude(pk__in=passed_over) if passed_over else candidates).first()
        if candidate is None:
            break
        try:
            # Re-verified after the lock, as claim-next does for work (SPEC §3's trap).
            return _claim_request_locked(candidate, task=candidate.task, agent=agent, claim=claim)
        except ClaimCollided:
            raise
        except LedgerError as refusal:
            if refusal.code not in ("TASK_TAKEN", "TASK_NOT_CLAIMABLE", "VALIDATION_ERROR"):
                raise
            passed_over.append(candidate.pk)
    if passed_over:
        return TaskTaken(
            "Every open review was taken by another reviewer meanwhile; ask again.",
            details={"project": project.slug, "passed_over": len(passed_over)},
        )
    return None


def review_claim_next(*, project: Project, agent: Agent, lease_seconds: int | None = None) -> ReviewGrant | None:
    """Claim the project's oldest open review (not your own work); None when there is none."""
    claim = ClaimRequest(lease_seconds=lease_seconds)
    validate_claim_request(claim)
    if not agent.is_active:
        raise PermissionDenied(f"Agent {agent.handle} is deactivated.")
    try:
        granted = _review_claim_next(project=project, agent=agent, claim=claim)
        if isinstance(granted, TaskTaken):
            raise granted
    except TaskTaken:
        tally_claim_refusal(project_id=project.pk, agent=agent)
        raise
    return granted


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
    "ReviewGrant",
    "ReviewOutcome",
    "claimable_reviews",
    "review_attempt_finish",
    "review_claim",
    "review_claim_next",
    "review_decide",
    "review_open",
    "target_moved",
    "validate_review_decision",
]
