"""The append-only event log and `EventType`, the one list of the event types there are."""

from __future__ import annotations

from django.conf import settings
from django.db import models
from django.db.models import Q

from ledger.models.agents import Agent
from ledger.models.base import NoDeleteModel
from ledger.models.projects import Project
from ledger.models.tasks import Task


class Severity(models.TextChoices):
    INFO = "info", "Info"
    WARN = "warn", "Warning"
    ERROR = "error", "Error"


class EventType(models.TextChoices):
    """Every event type the ledger emits: the one list (admin filters, webhooks and docs read it).

    `tests/ledger/test_event_types.py` fails when code emits a type that is not here.
    """

    AGENT_CREATED = "agent.created"
    AGENT_DEACTIVATED = "agent.deactivated"
    AGENT_LABELS_CHANGED = "agent.labels_changed"
    AGENT_PAUSED = "agent.paused"
    AGENT_PROJECTS_CHANGED = "agent.projects_changed"
    AGENT_REACTIVATED = "agent.reactivated"
    AGENT_RESUMED = "agent.resumed"
    AGENT_TOKEN_ROTATED = "agent.token_rotated"  # noqa: S105 - an event name
    BUDGET_EXHAUSTED = "budget.exhausted"
    BUDGET_SET = "budget.set"
    BUDGET_WARNING = "budget.warning"
    ATTEMPT_CLAIMED = "attempt.claimed"
    ATTEMPT_DISCARDED = "attempt.discarded"
    ATTEMPT_EXPIRED = "attempt.expired"
    ATTEMPT_FINISHED = "attempt.finished"
    ATTEMPT_RELEASED = "attempt.released"
    ATTEMPT_REVOKED = "attempt.revoked"
    ATTEMPT_UPDATED = "attempt.updated"
    ENVIRONMENT_ALLOCATED = "environment.allocated"
    ENVIRONMENT_CREATED = "environment.created"
    ENVIRONMENT_PROVISIONED = "environment.provisioned"
    ENVIRONMENT_QUARANTINED = "environment.quarantined"
    ENVIRONMENT_RELEASED = "environment.released"
    ENVIRONMENT_RESTORED = "environment.restored"
    ENVIRONMENT_RETIRED = "environment.retired"
    ENVIRONMENT_UPDATED = "environment.updated"
    FINDING_ACKNOWLEDGED = "finding.acknowledged"
    FINDING_OPENED = "finding.opened"
    FINDING_RESOLVED = "finding.resolved"
    NOTE_ADDED = "note.added"
    PROJECT_CREATED = "project.created"
    TASK_CONTESTED = "task.contested"
    TASK_CREATED = "task.created"
    TASK_DEPENDENCY_ADDED = "task.dependency_added"
    TASK_DEPENDENCY_REMOVED = "task.dependency_removed"
    TASK_QUEUE_WAIT_EXCEEDED = "task.queue_wait_exceeded"
    TASK_REASSIGNED = "task.reassigned"
    TASK_RESERVATION_CLEARED = "task.reservation_cleared"
    TASK_STATUS_CHANGED = "task.status_changed"
    TASK_UPDATED = "task.updated"
    # Part two, SPEC §16.
    REVIEW_REQUESTED = "review.requested"
    REVIEW_CLAIMED = "review.claimed"
    REVIEW_APPROVED = "review.approved"
    REVIEW_CHANGES_REQUESTED = "review.changes_requested"
    REVIEW_BLOCKED = "review.blocked"
    REVIEW_SUPERSEDED = "review.superseded"
    TASK_COMMENTED = "task.commented"
    TASK_DELIVERED = "task.delivered"
    TASK_LANDED = "task.landed"
    LANDING_CLAIMED = "landing.claimed"
    LANDING_CONFLICT = "landing.conflict"
    LANDING_CHECK_FAILED = "landing.check_failed"
    LANDING_TARGET_MOVED = "landing.target_moved"
    LANDING_EXPIRED = "landing.expired"
    LANDING_SETTINGS_CHANGED = "project.landing_changed"
    CHECK_REPORTED = "check.reported"
    TASK_QUARANTINED = "task.quarantined"
    TASK_QUARANTINE_RELEASED = "task.quarantine_released"
    # A claim refused with PATHS_RESERVED (SPEC §19): one per refusal, written after the claim's rollback.
    CLAIM_PATHS_REFUSED = "claim.paths_refused"
    DECISION_CREATED = "decision.created"
    DECISION_SUPERSEDED = "decision.superseded"
    WEBHOOK_CREATED = "webhook.created"
    WEBHOOK_DISABLED = "webhook.disabled"
    WEBHOOK_ENABLED = "webhook.enabled"
    WEBHOOK_REDELIVERED = "webhook.redelivered"
    # Alerts as incidents (insight.incidents): one event when an incident opens, one when it resolves.
    INCIDENT_OPENED = "incident.opened"
    INCIDENT_RESOLVED = "incident.resolved"
    WEBHOOK_SECRET_ROLLED = "webhook.secret_rolled"  # noqa: S105 - an event name
    # A disabled endpoint's open deliveries marked dead by an operator (kept as rows).
    WEBHOOK_BACKLOG_DROPPED = "webhook.backlog_dropped"
    # "Send test": delivered to the one endpoint it names only (the delivery trigger skips this type).
    WEBHOOK_TEST = "webhook.test"
    # SPEC §23.1: runners (the `runners` room). `runner.lost` (a warning) is the one to subscribe a webhook to.
    RUNNER_CREATED = "runner.created"
    RUNNER_REGISTERED = "runner.registered"
    RUNNER_LOST = "runner.lost"
    RUNNER_CORDONED = "runner.cordoned"
    RUNNER_UNCORDONED = "runner.uncordoned"
    RUNNER_DRAINING = "runner.draining"
    RUNNER_UNDRAINED = "runner.undrained"
    RUNNER_ATTEMPT_CANCELLED = "runner.attempt_cancelled"
    RUNNER_TOKEN_ROTATED = "runner.token_rotated"  # noqa: S105 - an event name
    # SPEC §25: a closed month of events exported, checked and its partition detached (operations.event_archive).
    EVENTS_ARCHIVED = "events.archived"


class Event(NoDeleteModel):
    """The append-only audit log and the delta-feed sequence.

    `attempt_id` is a plain integer, not a foreign key: attempts live in
    `leases`, which `ledger` does not import.

    On PostgreSQL the table is partitioned by month on `created_at`
    (migration 0022): its primary key there is (id, created_at), `id` stays
    unique by its one sequence, and no foreign key can point at `id` alone
    (the webhook deliveries' relation has no database constraint there).
    `project` and `task` have no index of their own: `event_project_feed`
    and `event_task_timeline` lead with them.
    """

    id = models.BigAutoField(primary_key=True)
    project = models.ForeignKey(
        Project, on_delete=models.PROTECT, null=True, blank=True, related_name="+", db_index=False
    )
    task = models.ForeignKey(
        Task, on_delete=models.PROTECT, null=True, blank=True, related_name="events", db_index=False
    )
    attempt_id = models.BigIntegerField(null=True, blank=True, db_index=True)
    actor_agent = models.ForeignKey(Agent, on_delete=models.PROTECT, null=True, blank=True, related_name="+")
    actor_user = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.PROTECT, null=True, blank=True, related_name="+", db_index=False
    )
    type = models.CharField(max_length=64)
    severity = models.CharField(max_length=8, choices=Severity.choices, default=Severity.INFO)
    payload = models.JSONField(default=dict, blank=True)
    created_at = models.DateTimeField()

    class Meta:
        ordering = ["id"]
        constraints = [
            models.CheckConstraint(
                condition=Q(actor_agent__isnull=True) | Q(actor_user__isnull=True),
                name="event_single_actor",
            ),
        ]
        indexes = [
            models.Index(fields=["project", "id"], name="event_project_feed"),
            models.Index(fields=["task", "id"], name="event_task_timeline"),
            models.Index(fields=["type", "created_at"], name="event_type_time"),
            models.Index(fields=["created_at"], name="event_created_at"),
            # Serves the dashboard's grouped warnings and errors of the last 7 days, covering what the
            # grouping reads (not partial: SQLite does not match a partial index against bound
            # parameters). docs/performance.md, console pages.
            models.Index(fields=["severity", "created_at", "type", "task"], name="event_severity_time"),
            # The admin's actor filter and a user's PROTECT check; people act on few events, so only theirs.
            models.Index(fields=["actor_user"], name="event_actor_user", condition=Q(actor_user__isnull=False)),
        ]

    def __str__(self) -> str:
        return f"#{self.id} {self.type}"

    @property
    def actor_label(self) -> str:
        if self.actor_agent is not None:
            return self.actor_agent.handle
        if self.actor_user is not None:
            return f"user:{self.actor_user.get_username()}"
        return "system"
