"""Reads of review requests (SPEC §16.1): who may see which, the latest one that asked for
changes, the one a review attempt is deciding."""

from __future__ import annotations

from django.db.models import QuerySet

from core.errors import NotFound
from leases.models import Attempt, ReviewRequest, ReviewStatus
from ledger.models import Agent, Task


def reviews_visible_to(agent: Agent | None) -> QuerySet[ReviewRequest]:
    """Review requests on the tasks of the agent's projects; every one for staff (`agent=None`)."""
    reviews = ReviewRequest.objects.all()
    return reviews if agent is None else reviews.filter(task__project__agents=agent)


def review_by_id(review_id: int, *, agent: Agent | None) -> ReviewRequest:
    """A review request the caller may see, with its task, work attempt and reviewers, or NOT_FOUND."""
    review = (
        reviews_visible_to(agent)
        .select_related("task__project", "work_attempt__agent", "reviewer_agent", "reviewer_user")
        .filter(pk=review_id)
        .first()
    )
    if review is None:
        raise NotFound(f"No review {review_id}.", details={"review": review_id})
    return review


def latest_changes_requested(task: Task) -> ReviewRequest | None:
    """The review the task's next work answers (SPEC §16.1 `review_findings`): its latest decided
    request, when that one asked for changes."""
    latest = (
        ReviewRequest.objects.filter(task=task, decided_at__isnull=False)
        .exclude(status=ReviewStatus.SUPERSEDED)
        .select_related("reviewer_agent", "reviewer_user")
        .order_by("-id")
        .first()
    )
    return latest if latest is not None and latest.status == ReviewStatus.CHANGES_REQUESTED else None


def review_in_progress(attempt: Attempt) -> ReviewRequest | None:
    """The request a review attempt is reviewing, with the work attempt it pins."""
    return (
        ReviewRequest.objects.select_related("work_attempt__agent")
        .filter(review_attempt=attempt, status=ReviewStatus.IN_REVIEW)
        .first()
    )
