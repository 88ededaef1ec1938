"""The merge queue's landings (SPEC §21.2, §21.3).

A landing is one lander's leased turn at a (project, target branch): it lands one delivered task,
or a batch of up to `batch_max`. Each task it takes gets an attempt of kind `land` (leased, fenced
by the task's epoch, with notes, like a review attempt), all sharing the landing's lease and token;
`LandingTask` pins the branch and head each task was taken at and how it came out. At most one
landing per (project, target) is live: a partial unique index, so several landers on several
machines are serialized by the database.
"""

from __future__ import annotations

from django.db import models
from django.db.models import Q

from leases.models import Attempt
from ledger.models import Agent, NoDeleteModel, Project, Task

OUTPUT_TAIL_MAX_CHARS = 16_384
CONFLICT_PATHS_MAX = 200


class LandingStatus(models.TextChoices):
    ACTIVE = "active", "Active"
    FINISHED = "finished", "Finished"
    EXPIRED = "expired", "Expired"
    # Given back by its lander before it lapsed (`POST /landings/{id}/release/`): the target is free at once.
    RELEASED = "released", "Released"


class LandingResult(models.TextChoices):
    """How a finished landing came out (SPEC §21.2); `landed` when it landed at least one task."""

    LANDED = "landed", "Landed"
    CONFLICT = "conflict", "Conflict"
    CHECK_FAILED = "check_failed", "Check failed"
    TARGET_MOVED = "target_moved", "Target moved"


class LandingOutcome(models.TextChoices):
    """What became of one task of a landing."""

    PENDING = "pending", "Pending"
    LANDED = "landed", "Landed"
    CONFLICT = "conflict", "Conflict"
    CHECK_FAILED = "check_failed", "Check failed"
    TARGET_MOVED = "target_moved", "Target moved"
    # Conflicted only with the rest of its batch: stays queued for the next batch (SPEC §21.3).
    DEFERRED = "deferred", "Deferred"
    EXPIRED = "expired", "Expired"
    # Its landing was given back: it stays delivered, in its place in the queue.
    RELEASED = "released", "Released"


# The outcomes that send a task back to `ready` with a landing note.
FAILED_OUTCOMES = frozenset({LandingOutcome.CONFLICT, LandingOutcome.CHECK_FAILED, LandingOutcome.TARGET_MOVED})


class Landing(NoDeleteModel):
    project = models.ForeignKey(Project, on_delete=models.PROTECT, related_name="landings")
    target_branch = models.CharField(max_length=200)
    # The fence: landings of one (project, target) are numbered 1, 2, …; holder calls present it.
    epoch = models.PositiveIntegerField()
    agent = models.ForeignKey(Agent, on_delete=models.PROTECT, related_name="landings")
    status = models.CharField(max_length=16, choices=LandingStatus.choices, default=LandingStatus.ACTIVE)
    result = models.CharField(max_length=16, choices=LandingResult.choices, blank=True)
    method = models.CharField(max_length=8)
    check_command = models.TextField(blank=True)
    check_timeout_seconds = models.PositiveIntegerField()
    token_hash = models.CharField(max_length=64, editable=False)
    token_salt = models.CharField(max_length=32, editable=False)
    lease_seconds = models.PositiveIntegerField()
    lease_expires_at = models.DateTimeField()
    claimed_at = models.DateTimeField()
    last_renewed_at = models.DateTimeField(null=True, blank=True)
    renew_count = models.PositiveIntegerField(default=0)
    finished_at = models.DateTimeField(null=True, blank=True)
    landed_commit = models.CharField(max_length=40, blank=True)
    check_runs = models.PositiveIntegerField(default=0)

    class Meta:
        ordering = ["-id"]
        constraints = [
            # SPEC §21.2: one live landing per (project, target), held by the database.
            models.UniqueConstraint(
                fields=["project", "target_branch"],
                condition=Q(status=LandingStatus.ACTIVE),
                name="landing_one_live_per_target",
            ),
            models.UniqueConstraint(fields=["project", "target_branch", "epoch"], name="landing_epoch_unique"),
            models.CheckConstraint(condition=Q(status__in=LandingStatus.values), name="landing_status_valid"),
            models.CheckConstraint(
                condition=Q(status=LandingStatus.ACTIVE, finished_at__isnull=True, result="")
                | (~Q(status=LandingStatus.ACTIVE) & Q(finished_at__isnull=False)),
                name="landing_finished_at_iff_ended",
            ),
        ]
        indexes = [
            # Serves the landing page's latest results of a project.
            models.Index(fields=["project", "-id"], name="landing_project_recent"),
        ]

    def __str__(self) -> str:
        return f"landing {self.pk} of {self.project_id}:{self.target_branch} ({self.status})"


class LandingTask(NoDeleteModel):
    landing = models.ForeignKey(Landing, on_delete=models.PROTECT, related_name="tasks")
    task = models.ForeignKey(Task, on_delete=models.PROTECT, related_name="landing_entries")
    attempt = models.OneToOneField(Attempt, on_delete=models.PROTECT, related_name="landing_entry")
    position = models.PositiveSmallIntegerField()
    branch = models.CharField(max_length=100)
    head_commit = models.CharField(max_length=40)
    outcome = models.CharField(max_length=16, choices=LandingOutcome.choices, default=LandingOutcome.PENDING)
    paths = models.JSONField(default=list, blank=True)
    output_tail = models.TextField(blank=True)

    class Meta:
        ordering = ["landing_id", "position"]
        constraints = [
            models.UniqueConstraint(fields=["landing", "task"], name="landing_task_once"),
            models.CheckConstraint(condition=Q(outcome__in=LandingOutcome.values), name="landing_outcome_valid"),
        ]
        indexes = [models.Index(fields=["task", "-id"], name="landing_task_recent")]

    def __str__(self) -> str:
        return f"{self.task_id} in landing {self.landing_id} ({self.outcome})"
