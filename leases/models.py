"""Who holds what: attempts (leased executions of a task), their notes, idempotency records.

The database holds the lease invariants (SPEC §2): one active attempt per
task (partial unique index), the "exactly when" rules of the outcome fields
(CHECK constraints), and a partial index on the expiry of active leases for
the sweep.
"""

from __future__ import annotations

from django.conf import settings
from django.db import models
from django.db.models import Q

from environments.models import Environment
from ledger.models import Agent, NoDeleteModel, Task


class AttemptStatus(models.TextChoices):
    ACTIVE = "active", "Active"
    COMPLETED = "completed", "Completed"
    FAILED = "failed", "Failed"
    INTERRUPTED = "interrupted", "Interrupted"
    RELEASED = "released", "Released"
    EXPIRED = "expired", "Expired"
    REVOKED = "revoked", "Revoked"


TERMINAL_STATUSES = frozenset(AttemptStatus.values) - {AttemptStatus.ACTIVE}


class FailureReason(models.TextChoices):
    IMPLEMENTATION_ERROR = "implementation_error"
    ENVIRONMENT_ERROR = "environment_error"
    MISSING_DEPENDENCY = "missing_dependency"
    INVALID_REQUIREMENTS = "invalid_requirements"
    TESTS_FAILED = "tests_failed"
    CONTEXT_LOST = "context_lost"
    TIMEOUT = "timeout"
    OTHER = "other"


class InterruptionReason(models.TextChoices):
    HANDOFF = "handoff"
    CONTEXT_LIMIT = "context_limit"
    USER_REQUEST = "user_request"
    CLIENT_SHUTDOWN = "client_shutdown"
    ENVIRONMENT_CHANGE = "environment_change"
    OTHER = "other"


class AttemptKind(models.TextChoices):
    """What an attempt does (SPEC §16.1): the work itself, or a review of it."""

    WORK = "work", "Work"
    REVIEW = "review", "Review"


WORKTREE_PATH_MAX_CHARS = 500
HOST_MAX_CHARS = 200


class Attempt(NoDeleteModel):
    """One leased execution of a task, valid until `lease_expires_at`."""

    task = models.ForeignKey(Task, on_delete=models.PROTECT, related_name="attempts")
    agent = models.ForeignKey(Agent, on_delete=models.PROTECT, related_name="attempts")
    epoch = models.PositiveIntegerField(help_text="The task's epoch after this claim.")
    status = models.CharField(max_length=16, choices=AttemptStatus.choices, default=AttemptStatus.ACTIVE)
    # The one-active-attempt index covers both kinds: a task is worked on or reviewed, never both at once.
    kind = models.CharField(max_length=8, choices=AttemptKind.choices, default=AttemptKind.WORK)

    # SHA-256 of the lease token. The token is an HMAC of (task, epoch, salt)
    # under the server's secret key, so an idempotent replay of the claim can
    # return it again without it ever being stored.
    token_hash = models.CharField(max_length=64, editable=False)
    token_salt = models.CharField(max_length=32, editable=False)

    lease_seconds = models.PositiveIntegerField()
    lease_expires_at = models.DateTimeField()
    claimed_at = models.DateTimeField()
    last_renewed_at = models.DateTimeField(null=True, blank=True)
    renew_count = models.PositiveIntegerField(default=0)
    finished_at = models.DateTimeField(null=True, blank=True)

    branch = models.CharField(max_length=100, blank=True)
    base_commit = models.CharField(max_length=40, blank=True)
    label = models.CharField(max_length=400)

    # Git facts the holder reports (SPEC §15.4): null until reported, each
    # overwritten by the next report. `leases.services.git_facts` validates them.
    head_commit = models.CharField(max_length=40, null=True, blank=True)
    commits_ahead = models.PositiveIntegerField(null=True, blank=True, help_text="Commits beyond the base commit.")
    dirty = models.BooleanField(null=True, blank=True, help_text="The worktree had uncommitted changes.")
    pushed = models.BooleanField(null=True, blank=True, help_text="The remote had the head commit.")
    worktree_path = models.CharField(max_length=WORKTREE_PATH_MAX_CHARS, null=True, blank=True)
    host = models.CharField(max_length=HOST_MAX_CHARS, null=True, blank=True)
    # The holder's last write that was more than a renewal (a note, git facts,
    # a task update): what `stalled_attempt` compares renewals with.
    last_worked_at = models.DateTimeField(null=True, blank=True)
    # Commits beyond its base that reconciliation last saw on the branch of
    # this ended attempt: evidence of work when the holder reported none.
    seen_commits_ahead = models.PositiveIntegerField(null=True, blank=True)

    task_version_at_claim = models.PositiveIntegerField()
    event_id_at_claim = models.BigIntegerField(null=True, blank=True)

    result_summary = models.TextField(blank=True)
    next_steps = models.JSONField(default=list, blank=True)
    failure_reason_code = models.CharField(max_length=32, choices=FailureReason.choices, blank=True)
    interruption_reason_code = models.CharField(max_length=32, choices=InterruptionReason.choices, blank=True)
    revoked_by = models.CharField(max_length=200, blank=True, help_text="Who revoked it (actor label).")
    revoke_reason = models.TextField(blank=True)

    class Meta:
        ordering = ["-id"]
        constraints = [
            # SPEC §1.4: one active attempt per task, enforced by the database.
            models.UniqueConstraint(
                fields=["task"], condition=Q(status=AttemptStatus.ACTIVE), name="attempt_one_active_per_task"
            ),
            # An epoch names one attempt of its task: the fence of SPEC §1 cannot be shared.
            models.UniqueConstraint(fields=["task", "epoch"], name="attempt_one_per_task_epoch"),
            models.CheckConstraint(condition=Q(status__in=AttemptStatus.values), name="attempt_status_valid"),
            models.CheckConstraint(condition=Q(kind__in=AttemptKind.values), name="attempt_kind_valid"),
            models.CheckConstraint(
                condition=Q(status=AttemptStatus.ACTIVE, finished_at__isnull=True)
                | (~Q(status=AttemptStatus.ACTIVE) & Q(finished_at__isnull=False)),
                name="attempt_finished_at_iff_terminal",
            ),
            models.CheckConstraint(
                condition=Q(status=AttemptStatus.FAILED, failure_reason_code__gt="")
                | (~Q(status=AttemptStatus.FAILED) & Q(failure_reason_code="")),
                name="attempt_failure_reason_iff_failed",
            ),
            models.CheckConstraint(
                condition=Q(status=AttemptStatus.INTERRUPTED, interruption_reason_code__gt="")
                | (~Q(status=AttemptStatus.INTERRUPTED) & Q(interruption_reason_code="")),
                name="attempt_interruption_reason_iff_interrupted",
            ),
            models.CheckConstraint(
                condition=Q(status=AttemptStatus.REVOKED, revoke_reason__gt="", revoked_by__gt="")
                | (~Q(status=AttemptStatus.REVOKED) & Q(revoke_reason="", revoked_by="")),
                name="attempt_revoke_fields_iff_revoked",
            ),
        ]
        indexes = [
            # Serves the sweep: active leases by expiry (SPEC §3).
            models.Index(
                fields=["lease_expires_at"],
                condition=Q(status=AttemptStatus.ACTIVE),
                name="attempt_active_expiry",
            ),
            # Serves "previous attempt" and a task's attempt history.
            models.Index(fields=["task", "-id"], name="attempt_task_recent"),
            models.Index(fields=["agent", "status"], name="attempt_agent_status"),
            # Serves lease sizing (completed attempts per task class) and the report's lead times
            # (completed attempts of a range), covering: agent and task are read from the index.
            models.Index(fields=["status", "finished_at", "agent", "task"], name="attempt_status_finished_cover"),
            # Serve agent health's 7 days and the report's counts: attempts finished within a window,
            # whatever their status, read from the index alone (docs/performance.md, pages).
            models.Index(
                fields=["finished_at", "status", "agent", "task", "failure_reason_code"], name="attempt_finished_cover"
            ),
            models.Index(fields=["claimed_at"], name="attempt_claimed_at"),
        ]

    def __str__(self) -> str:
        return f"attempt {self.pk} of task {self.task_id} (epoch {self.epoch}, {self.status})"


class AllocationStatus(models.TextChoices):
    ACTIVE = "active", "Active"
    STALE = "stale", "Stale"
    RELEASED = "released", "Released"


class Allocation(NoDeleteModel):
    """A lease on an environment, bound to an attempt (SPEC §6).

    Finishing or releasing the attempt releases it; expiry and revocation
    mark it stale: the environment may hold the dead attempt's work, so only
    an admin (or a re-claim of the same task) decides what happens to it.
    """

    environment = models.ForeignKey(Environment, on_delete=models.PROTECT, related_name="allocations")
    attempt = models.ForeignKey(Attempt, on_delete=models.PROTECT, related_name="allocations")
    status = models.CharField(max_length=16, choices=AllocationStatus.choices, default=AllocationStatus.ACTIVE)
    allocated_at = models.DateTimeField()
    released_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["-id"]
        constraints = [
            # One non-released allocation per environment, enforced by the database.
            models.UniqueConstraint(
                fields=["environment"],
                condition=~Q(status=AllocationStatus.RELEASED),
                name="allocation_one_live_per_environment",
            ),
            models.CheckConstraint(condition=Q(status__in=AllocationStatus.values), name="allocation_status_valid"),
            models.CheckConstraint(
                condition=Q(status=AllocationStatus.RELEASED, released_at__isnull=False)
                | (~Q(status=AllocationStatus.RELEASED) & Q(released_at__isnull=True)),
                name="allocation_released_at_iff_released",
            ),
        ]
        indexes = [
            models.Index(fields=["attempt", "status"], name="allocation_attempt_status"),
        ]

    def __str__(self) -> str:
        return f"{self.environment_id} → attempt {self.attempt_id} ({self.status})"


class NoteKind(models.TextChoices):
    PROGRESS = "progress", "Progress"
    FINDING = "finding", "Finding"
    WARNING = "warning", "Warning"
    CHECKPOINT = "checkpoint", "Checkpoint"


NOTE_MAX_CHARS = 8000
NEXT_STEPS_MAX_ITEMS = 20
NEXT_STEP_MAX_CHARS = 500


class Note(NoDeleteModel):
    attempt = models.ForeignKey(Attempt, on_delete=models.PROTECT, related_name="notes")
    kind = models.CharField(max_length=16, choices=NoteKind.choices)
    content = models.TextField(max_length=NOTE_MAX_CHARS)
    next_steps = models.JSONField(default=list, blank=True)
    important = models.BooleanField(default=False)
    created_at = models.DateTimeField()

    class Meta:
        ordering = ["id"]
        constraints = [
            models.CheckConstraint(condition=Q(kind__in=NoteKind.values), name="note_kind_valid"),
        ]
        indexes = [
            # Serves "latest checkpoint" of a task's attempts.
            models.Index(fields=["kind", "attempt", "-id"], name="note_kind_attempt_recent"),
            # Serves agent health: the checkpoints of the last 7 days.
            models.Index(fields=["kind", "created_at"], name="note_kind_created"),
        ]

    def __str__(self) -> str:
        return f"{self.kind} note {self.pk}"


class IdempotencyRecord(models.Model):
    """A stored response to replay for the same (agent, key) and request.

    Never contains a lease token: a replayed claim re-derives it (see
    `leases.tokens`). Kept 24 h, then purged — the one table whose rows are
    deleted, because they are a cache of responses, not ledger history.
    """

    agent = models.ForeignKey(Agent, on_delete=models.PROTECT, related_name="+")
    key = models.CharField(max_length=128)
    fingerprint = models.CharField(max_length=64)
    status_code = models.PositiveSmallIntegerField()
    response = models.JSONField(null=True, blank=True)
    attempt_id = models.BigIntegerField(null=True, blank=True)
    created_at = models.DateTimeField(db_index=True)

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["agent", "key"], name="idempotency_unique_per_agent"),
        ]

    def __str__(self) -> str:
        return f"{self.agent_id}:{self.key}"


class ClaimRefusalTally(models.Model):
    """Claims refused as `TASK_TAKEN`, counted per day, project and agent (a fleet metric, SPEC §7).

    A refusal changes no state, so it is not an event; one row per agent per
    day keeps concurrent losers from queueing on a single counter.
    """

    day = models.DateField()
    project = models.ForeignKey("ledger.Project", on_delete=models.PROTECT, related_name="+")
    agent = models.ForeignKey(Agent, on_delete=models.PROTECT, related_name="+")
    count = models.PositiveIntegerField(default=0)

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["day", "project", "agent"], name="claim_refusal_tally_unique"),
        ]

    def __str__(self) -> str:
        return f"{self.day} {self.agent_id}: {self.count}"


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


from leases.budget_models import (  # noqa: E402,F401
    AgentDailyUsage,
    AttemptUsage,
    PathReservation,
    ProjectDailyUsage,
    ReservationLock,
    TaskUsage,
)
from leases.jobhealth.models import JobHeartbeat  # noqa: E402,F401
from leases.reconciliation.models import AttemptDiscard, Finding, ReconciliationRun  # noqa: E402,F401
from leases.rollup_models import FleetDayTally, FleetDayTallyChange, TaskFirstReady  # noqa: E402,F401
