"""Review requests: a review pinned to the version and head commit it reviews (SPEC §16)."""

from __future__ import annotations

from django.conf import settings
from django.db import models
from django.db.models import Q

from leases.models.attempts import Attempt
from ledger.models import Agent, NoDeleteModel, Task


class ReviewStatus(models.TextChoices):
    OPEN = "open", "Open"
    IN_REVIEW = "in_review", "In review"
    APPROVED = "approved", "Approved"
    CHANGES_REQUESTED = "changes_requested", "Changes requested"
    BLOCKED = "blocked", "Blocked"
    SUPERSEDED = "superseded", "Superseded"
    CANCELLED = "cancelled", "Cancelled"


# A request in one of these may still be claimed by a reviewer (`in_review` whose review attempt ended undecided too).
PENDING_REVIEW_STATUSES = (ReviewStatus.OPEN, ReviewStatus.IN_REVIEW)
DECIDED_REVIEW_STATUSES = (ReviewStatus.APPROVED, ReviewStatus.CHANGES_REQUESTED, ReviewStatus.BLOCKED)
REVIEW_SUMMARY_MAX_CHARS = 8000
REVIEW_FINDINGS_MAX_ITEMS = 20
REVIEW_FINDING_MAX_CHARS = 500


class ReviewRequest(NoDeleteModel):
    """A request to review the work of one attempt, pinned to what was reviewed (SPEC §16.1).

    Opened when a work attempt finishes with outcome `review`: `task_version`
    and `head_commit` are the task's version and the branch head at that
    moment. Approving a target that moved since is refused (`STALE_REVIEW_TARGET`)
    and supersedes the request. Never deleted.
    """

    task = models.ForeignKey(Task, on_delete=models.PROTECT, related_name="review_requests")
    work_attempt = models.ForeignKey(Attempt, on_delete=models.PROTECT, related_name="review_requests")
    task_version = models.PositiveIntegerField()
    head_commit = models.CharField(max_length=40, null=True, blank=True)
    status = models.CharField(max_length=20, choices=ReviewStatus.choices, default=ReviewStatus.OPEN)
    # The latest review attempt that claimed it (an agent reviewer), or the person who decided it.
    review_attempt = models.ForeignKey(
        Attempt, on_delete=models.PROTECT, null=True, blank=True, related_name="reviews_claimed"
    )
    reviewer_agent = models.ForeignKey(Agent, on_delete=models.PROTECT, null=True, blank=True, related_name="+")
    reviewer_user = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.PROTECT, null=True, blank=True, related_name="+"
    )
    summary = models.TextField(blank=True, max_length=REVIEW_SUMMARY_MAX_CHARS)
    findings = models.JSONField(default=list, blank=True)
    created_at = models.DateTimeField()
    decided_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["-id"]
        constraints = [
            models.CheckConstraint(condition=Q(status__in=ReviewStatus.values), name="review_status_valid"),
            # One undecided request per task: a task is in review for one piece of work at a time.
            models.UniqueConstraint(
                fields=["task"],
                condition=Q(status__in=PENDING_REVIEW_STATUSES),
                name="review_one_pending_per_task",
            ),
            models.CheckConstraint(
                condition=Q(status__in=PENDING_REVIEW_STATUSES, decided_at__isnull=True)
                | (~Q(status__in=PENDING_REVIEW_STATUSES) & Q(decided_at__isnull=False)),
                name="review_decided_at_iff_decided",
            ),
        ]
        indexes = [
            # Serves reviews/next: pending requests in age order.
            models.Index(fields=["status", "id"], name="review_status_queue"),
            models.Index(fields=["task", "-id"], name="review_task_recent"),
        ]

    def __str__(self) -> str:
        return f"review {self.pk} of task {self.task_id} ({self.status})"

    @property
    def reviewer_label(self) -> str | None:
        if self.reviewer_agent is not None:
            return self.reviewer_agent.handle
        if self.reviewer_user is not None:
            return f"user:{self.reviewer_user.get_username()}"
        return None
