"""One row per scheduled job: when it last started, succeeded and failed, and what it said.

A heartbeat is the job's own status board, updated in place on every run
(like django-q2's `Schedule`), not ledger history: a sweep runs every minute,
and an event per run would bury the audit log. Rows are never deleted.
"""

from __future__ import annotations

from django.db import models
from django.db.models import Q

from ledger.models import NoDeleteModel


class JobName(models.TextChoices):
    """The jobs of `operations.schedules.SCHEDULES`, by the name their wrapper (each room's `jobs.py`) records."""

    SWEEP = "sweep_expired", "Lease sweep"
    QUEUE_WAIT = "check_queue_wait", "Queue-wait check"
    RECONCILE = "reconcile", "Reconciliation"
    PURGE = "purge_idempotency", "Idempotency purge"
    INCIDENTS = "check_incidents", "Incident check"


class JobOutcome(models.TextChoices):
    RUNNING = "running", "Running"
    SUCCEEDED = "succeeded", "Succeeded"
    # Finished, but reported errors (reconciliation could not read a repository).
    PARTIAL = "partial", "Finished with errors"
    FAILED = "failed", "Failed"


ERROR_MAX_CHARS = 2000


class JobHeartbeat(NoDeleteModel):
    name = models.CharField(max_length=40, choices=JobName.choices, unique=True)
    last_started_at = models.DateTimeField(null=True, blank=True)
    last_finished_at = models.DateTimeField(null=True, blank=True)
    last_succeeded_at = models.DateTimeField(null=True, blank=True)
    last_failed_at = models.DateTimeField(null=True, blank=True)
    last_outcome = models.CharField(max_length=16, choices=JobOutcome.choices, blank=True)
    # The last failed or partial run's error (cut to 2,000 characters); kept after a later success.
    last_error = models.TextField(blank=True)
    # The last finished run's counts, as the job returned them.
    last_result = models.JSONField(default=dict, blank=True)
    last_duration_ms = models.PositiveIntegerField(null=True, blank=True)
    # Which process ran it last: "host:pid", so two clusters can be told apart.
    last_runner = models.CharField(max_length=200, blank=True)
    runs = models.PositiveIntegerField(default=0)
    failures = models.PositiveIntegerField(default=0)

    class Meta:
        db_table = "leases_jobheartbeat"  # kept from before the move to this room
        ordering = ["name"]
        constraints = [
            models.CheckConstraint(condition=Q(name__in=JobName.values), name="job_heartbeat_name_valid"),
        ]

    def __str__(self) -> str:
        return f"{self.name} ({self.last_outcome or 'never run'})"
