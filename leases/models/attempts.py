"""Attempts: one claim of a task, its lease, its epoch and how it ended."""

from __future__ import annotations

from django.db import models
from django.db.models import Q

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
    # SPEC §23.1: the slot's runner registered again (it restarted): its attempts are handed off at once.
    RUNNER_RESTART = "runner_restart"
    # SPEC §23.3: the environment provider failed; the claim is handed off cleanly.
    ENVIRONMENT_UNAVAILABLE = "environment_unavailable"
    OTHER = "other"


class AttemptKind(models.TextChoices):
    """What an attempt does (SPEC §16.1, §21.2): the work itself, a review of it, or landing it."""

    WORK = "work", "Work"
    REVIEW = "review", "Review"
    LAND = "land", "Land"


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
    # SHA-256 of the command's credential (SPEC §23.2, `leases.tokens.new_attempt_token`): empty until the
    # holder mints one for the command it starts; a new one replaces it. Good only while the attempt is active.
    command_token_hash = models.CharField(max_length=64, blank=True, default="", editable=False)

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
        # No index names `lease_expires_at`, `last_renewed_at`, `renew_count` or `last_worked_at`: a renewal (and
        # any holder write) then updates the row in place on PostgreSQL, a heap-only update (SPEC §25). The
        # sweep finds live leases by expiry through `LeaseClock` (leases/models/lease_clock.py).
        indexes = [
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
            # Serves reconciliation's reads by branch: the history of the branches git reports and the
            # ended attempts of a branch whose tip moved (docs/performance.md, reconcile incremental).
            # Not partial: a query's `branch IN (...)` of hundreds of names proves no `branch <> ''`.
            models.Index(fields=["branch"], name="attempt_branch"),
        ]

    def __str__(self) -> str:
        return f"attempt {self.pk} of task {self.task_id} (epoch {self.epoch}, {self.status})"
