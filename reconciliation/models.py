"""What reconciliation records: findings, runs, and the admin's word that an attempt's work is discarded.

The database holds the finding invariant (SPEC §7): at most one unresolved
(open or acknowledged) finding per condition and subject, by a partial unique
index, so two runs at once cannot duplicate one. Like every ledger row,
findings, runs and discards are never hard-deleted.
"""

from __future__ import annotations

from django.db import models
from django.db.models import Q

from ledger.models import NoDeleteModel, Project


class Condition(models.TextChoices):
    """Every mismatch reconciliation looks for; `reconciliation.conditions` says how."""

    LIVE_LEASE_DEAD_AGENT = "live_lease_dead_agent", "Live lease, silent agent"
    EXPIRED_LEASE_STILL_ACTIVE = "expired_lease_still_active", "Expired lease still active"
    BRANCH_MISSING = "branch_missing", "Branch missing"
    ORPHAN_BRANCH = "orphan_branch", "Orphan branch"
    DUPLICATE_BRANCH_LABEL = "duplicate_branch_label", "Branch named by two live attempts"
    LEAKED_ENVIRONMENT = "leaked_environment", "Leaked environment"
    ENVIRONMENT_COLLISION = "environment_collision", "Environment collision"
    INSUFFICIENT_ISOLATION = "insufficient_isolation", "Insufficient isolation"
    ORPHAN_WORKTREE = "orphan_worktree", "Orphan worktree"
    COMPLETED_BRANCH_MISSING = "completed_branch_missing", "Completed work without a branch"
    STALLED_ATTEMPT = "stalled_attempt", "Renewed, but not working"
    UNRESERVED_CHANGE = "unreserved_change", "Changed paths another attempt reserved"


# Conditions that need the project's repository. When it cannot be read they
# are not evaluated for that project, so their findings are neither opened
# nor resolved on the strength of a failed read.
GIT_CONDITIONS: frozenset[str] = frozenset(
    {
        Condition.BRANCH_MISSING,
        Condition.ORPHAN_BRANCH,
        Condition.ORPHAN_WORKTREE,
        Condition.COMPLETED_BRANCH_MISSING,
        Condition.UNRESERVED_CHANGE,
    }
)
# Conditions judged on the ledger, with the project's branch commits as
# evidence when it has a repository: when that repository cannot be read they
# are not evaluated for the project either (a failed read proves nothing).
GIT_INFORMED_CONDITIONS: frozenset[str] = frozenset({Condition.LIVE_LEASE_DEAD_AGENT, Condition.STALLED_ATTEMPT})
# Git conditions of ended attempts: history, read in chunks and only where something changed
# (`reconciliation.incremental`); their findings are settled per chunk of subjects.
ENDED_ATTEMPT_CONDITIONS: frozenset[str] = frozenset({Condition.COMPLETED_BRANCH_MISSING, Condition.UNRESERVED_CHANGE})


class SubjectType(models.TextChoices):
    TASK = "task", "Task"
    ATTEMPT = "attempt", "Attempt"
    BRANCH = "branch", "Branch"
    ENVIRONMENT = "environment", "Environment"
    WORKTREE = "worktree", "Worktree"


class FindingStatus(models.TextChoices):
    OPEN = "open", "Open"
    ACKNOWLEDGED = "acknowledged", "Acknowledged"
    RESOLVED = "resolved", "Resolved"


UNRESOLVED_FINDING_STATUSES: tuple[str, ...] = (FindingStatus.OPEN, FindingStatus.ACKNOWLEDGED)


class Finding(NoDeleteModel):
    """One mismatch between the ledger and the world, from first seen until it no longer holds.

    The subject is `(subject_type, subject_key)` within `project`: an attempt
    id, a task key, a branch name, an environment name or a worktree's
    absolute path. `task`, `attempt` and `environment` repeat it as links for
    the admin when the subject is one of those rows.
    """

    condition = models.CharField(max_length=40, choices=Condition.choices)
    project = models.ForeignKey(Project, on_delete=models.PROTECT, related_name="+")
    subject_type = models.CharField(max_length=16, choices=SubjectType.choices)
    subject_key = models.CharField(max_length=500)
    task = models.ForeignKey("ledger.Task", on_delete=models.PROTECT, null=True, blank=True, related_name="+")
    attempt = models.ForeignKey("leases.Attempt", on_delete=models.PROTECT, null=True, blank=True, related_name="+")
    environment = models.ForeignKey(
        "environments.Environment", on_delete=models.PROTECT, null=True, blank=True, related_name="+"
    )
    detail = models.JSONField(default=dict, blank=True)
    status = models.CharField(max_length=16, choices=FindingStatus.choices, default=FindingStatus.OPEN)
    first_seen_at = models.DateTimeField()
    last_seen_at = models.DateTimeField()
    acknowledged_at = models.DateTimeField(null=True, blank=True)
    acknowledged_by = models.CharField(max_length=200, blank=True, help_text="Actor label.")
    # Who is on it, named when acknowledging (defaults to whoever acknowledged).
    owner = models.CharField(max_length=200, blank=True)
    resolved_at = models.DateTimeField(null=True, blank=True)
    resolved_by = models.CharField(
        max_length=200, blank=True, help_text="Actor label; 'reconciliation' when the condition stopped holding."
    )
    resolution_note = models.TextField(blank=True)

    class Meta:
        db_table = "leases_finding"  # kept from before the move to this room
        ordering = ["-last_seen_at", "-id"]
        constraints = [
            # SPEC §7: one open (or acknowledged) finding per condition and subject.
            models.UniqueConstraint(
                fields=["project", "condition", "subject_type", "subject_key"],
                condition=~Q(status=FindingStatus.RESOLVED),
                name="finding_one_unresolved_per_subject",
            ),
            models.CheckConstraint(condition=Q(condition__in=Condition.values), name="finding_condition_valid"),
            models.CheckConstraint(condition=Q(status__in=FindingStatus.values), name="finding_status_valid"),
            models.CheckConstraint(
                condition=Q(status=FindingStatus.RESOLVED, resolved_at__isnull=False)
                | (~Q(status=FindingStatus.RESOLVED) & Q(resolved_at__isnull=True)),
                name="finding_resolved_at_iff_resolved",
            ),
        ]
        indexes = [
            # Serves each run's load of unresolved findings and the dashboard's
            # open findings by condition.
            models.Index(
                fields=["condition", "project"],
                condition=~Q(status=FindingStatus.RESOLVED),
                name="finding_unresolved",
            ),
            # Serves the orphan-rate metric: orphan branches first seen per day.
            models.Index(fields=["condition", "first_seen_at"], name="finding_condition_first_seen"),
            # Serves an incremental run's re-check of findings resolved since its watermark (one resolved
            # by hand while its condition holds is opened again).
            models.Index(
                fields=["condition", "resolved_at"],
                condition=Q(status=FindingStatus.RESOLVED),
                name="finding_resolved_recently",
            ),
        ]

    def __str__(self) -> str:
        return f"{self.condition} {self.subject_type}:{self.subject_key} ({self.status})"


class RunStatus(models.TextChoices):
    RUNNING = "running", "Running"
    SUCCEEDED = "succeeded", "Succeeded"
    # Finished, but at least one repository could not be read.
    PARTIAL = "partial", "Finished with errors"
    # A newer run committed its findings first; this one wrote none.
    SUPERSEDED = "superseded", "Superseded"
    FAILED = "failed", "Failed"


class ReconciliationRun(NoDeleteModel):
    """One pass of reconciliation: when, what it saw per condition, and what it could not read.

    `started_at` is the run's single reading of the clock; `finished_at` adds
    the pass's measured duration to it, so the two stay on one timeline even
    under a frozen test clock.
    """

    started_at = models.DateTimeField()
    finished_at = models.DateTimeField(null=True, blank=True)
    status = models.CharField(max_length=16, choices=RunStatus.choices, default=RunStatus.RUNNING)
    # Findings holding at this run, per condition (every condition present, 0 included).
    counts = models.JSONField(default=dict, blank=True)
    opened = models.PositiveIntegerField(default=0)
    resolved = models.PositiveIntegerField(default=0)
    # [{"project": slug, "repository": ..., "message": ...}]: what could not be read.
    errors = models.JSONField(default=list, blank=True)
    prune_worktrees = models.BooleanField(default=False)
    # Asked to re-read every ended attempt of the lookback window, not only what changed (`reconcile --full`).
    full = models.BooleanField(default=False)
    # Worktree paths removed by this run (only with prune_worktrees).
    pruned = models.JSONField(default=list, blank=True)

    class Meta:
        db_table = "leases_reconciliationrun"  # kept from before the move to this room
        ordering = ["-id"]
        constraints = [
            models.CheckConstraint(condition=Q(status__in=RunStatus.values), name="reconciliation_run_status_valid"),
        ]

    def __str__(self) -> str:
        return f"reconciliation run {self.pk} ({self.status})"


class AttemptDiscard(NoDeleteModel):
    """An admin's statement that a terminal attempt's work is not wanted.

    It lets reconciliation report that attempt's clean worktree as removable
    even though its branch is not merged. It deletes nothing by itself.
    """

    attempt = models.OneToOneField("leases.Attempt", on_delete=models.PROTECT, related_name="discard")
    discarded_by = models.CharField(max_length=200, help_text="Actor label.")
    reason = models.TextField()
    discarded_at = models.DateTimeField()

    class Meta:
        db_table = "leases_attemptdiscard"  # kept from before the move to this room
        constraints = [
            models.CheckConstraint(condition=~Q(reason=""), name="attempt_discard_needs_reason"),
        ]

    def __str__(self) -> str:
        return f"attempt {self.attempt_id} discarded by {self.discarded_by}"


class ReconcileCursor(models.Model):
    """How far reconciliation has read one project's ended attempts (SPEC §25): its watermark.

    An incremental run re-reads only the ended attempts that changed since
    `watermark_at` — ended since then, on a branch whose tip moved or went
    away since `heads` was taken, or the subject of a finding — and the full
    scan of the lookback window walks attempt ids, committing `scan_after_id`
    with each chunk's findings, so an interrupted scan resumes where it
    stopped. Rewritten by every run; not part of the ledger's history.
    """

    project = models.OneToOneField(Project, on_delete=models.CASCADE, primary_key=True, related_name="+")
    # The clock reading of the run that last finished this project's pass (or began its full scan):
    # every attempt that ended before it has been read against the heads below.
    watermark_at = models.DateTimeField()
    # {branch: "local tip|remote tip"} as that run saw them: the next run re-reads the ended attempts
    # of every branch whose entry differs.
    heads = models.JSONField(default=dict, blank=True)
    # The full scan's progress: the last attempt id whose chunk was committed; null when no scan is pending.
    scan_after_id = models.BigIntegerField(null=True, blank=True)
    updated_at = models.DateTimeField()

    class Meta:
        db_table = "reconciliation_cursor"

    def __str__(self) -> str:
        return f"reconciliation cursor of project {self.project_id} at {self.watermark_at:%Y-%m-%d %H:%M:%S}"


class TargetCursor(models.Model):
    """What reconciliation last read of one project's landing target (SPEC §21.2, §25).

    The check for delivered heads already in the target reads, with a cursor, only what can have
    changed since `checked_at`: tasks delivered since then (less `landed.DELIVERY_SLACK`), the
    tasks whose head is among the commits the target gained since `tip`, and `pending` (tasks
    found in the target that the landing room left alone, a live landing holding them). Without
    one, after the target branch changed, or when the tip was rewritten, every delivered task is
    read. Rewritten by every run; not part of the ledger's history.
    """

    project = models.OneToOneField(Project, on_delete=models.CASCADE, primary_key=True, related_name="+")
    target_branch = models.CharField(max_length=200)
    tip = models.CharField(max_length=40)
    # The clock reading of the run that read `tip`: every task delivered before it was checked against it.
    checked_at = models.DateTimeField()
    # Ids of tasks whose head was in the target but that stayed delivered: checked again next run.
    pending = models.JSONField(default=list, blank=True)

    class Meta:
        db_table = "reconciliation_target_cursor"

    def __str__(self) -> str:
        return f"landing target cursor of project {self.project_id} at {self.tip[:12]}"
