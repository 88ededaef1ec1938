"""Claiming a review (SPEC §16.1): a reviewer agent claims an open review request as it claims work.

The claim machinery is `leases.services.claims.claim_locked` with a `ReviewClaim`: the same lock,
epoch bump, token, label and event, on the branch of the work reviewed, giving an attempt of
`kind = review`; the request is then `in_review` and names its reviewer. An agent does not review
its own work unless the project allows self-review. Deciding is `leases.services.reviews`.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from django.db.models import Exists, OuterRef, QuerySet

from core.db import write_transaction
from core.errors import LedgerError, PermissionDenied, TaskTaken, ValidationFailed
from leases.models import PENDING_REVIEW_STATUSES, ReviewRequest, ReviewStatus
from leases.selectors import live_attempts
from leases.services.claim_state import ClaimRequest, claim_state, validate_claim_request
from leases.services.claims import ClaimCollided, LeaseGrant, ReviewClaim, claim_locked, refuse_inactive
from leases.services.tallies import tally_claim_refusal
from ledger import clock
from ledger.actors import Actor
from ledger.models import Agent, EventType, Project, Task, TaskStatus
from ledger.services import event_append, lock_task

CLAIM_NEXT_MAX_CANDIDATES = 64


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
    refuse_inactive(agent)
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
    refuse_inactive(agent)
    try:
        granted = _review_claim_next(project=project, agent=agent, claim=claim)
        if isinstance(granted, TaskTaken):
            raise granted
    except TaskTaken:
        tally_claim_refusal(project_id=project.pk, agent=agent)
        raise
    return granted
