"""What work exists: projects, tasks, dependencies, agents and the event log.

Nothing here is ever hard-deleted (SPEC §1.6): `delete()` on these models and
their querysets raises, and the event table refuses UPDATE and DELETE at the
database level (triggers created by migration 0002).
"""

from __future__ import annotations

from typing import NoReturn, TypeVar

from django.conf import settings
from django.core.validators import RegexValidator
from django.db import models
from django.db.models import Q

_M = TypeVar("_M", bound=models.Model)


class DeletionRefused(Exception):
    """Raised by every attempt to hard-delete a ledger row."""


class NoDeleteQuerySet(models.QuerySet[_M]):
    def delete(self) -> NoReturn:
        raise DeletionRefused(f"{self.model.__name__} rows are never deleted; move them to a terminal state.")


class NoDeleteModel(models.Model):
    objects = NoDeleteQuerySet.as_manager()

    class Meta:
        abstract = True

    def delete(self, *args: object, **kwargs: object) -> NoReturn:
        raise DeletionRefused(f"{type(self).__name__} rows are never deleted; move them to a terminal state.")


class Isolation(models.TextChoices):
    """Environment isolation, ordered weakest first (SPEC §6).

    Declared here because `Project.required_isolation` needs it and `ledger`
    imports no other app; `environments` uses the same choices.
    """

    NONE = "none", "None"
    DIRECTORY = "directory", "Directory"
    CONTAINER = "container", "Container"
    MICROVM = "microvm", "MicroVM"
    DEDICATED_HOST = "dedicated_host", "Dedicated host"

    @classmethod
    def rank(cls, value: str) -> int:
        return list(cls.values).index(value)


# SPEC §19: budgets count tokens (input + output) and US dollars with 6 decimals.
BUDGET_COST_DIGITS = 18
BUDGET_TOKENS_HELP = "Tokens (input + output) per UTC day; empty: no limit."
BUDGET_COST_HELP = "US dollars per UTC day; empty: no limit."


class PathsMode(models.TextChoices):
    """How a claim holds its paths (SPEC §19): alone, or alongside other shared holders."""

    EXCLUSIVE = "exclusive", "Exclusive"
    SHARED = "shared", "Shared"


class Project(NoDeleteModel):
    slug = models.SlugField(max_length=50, unique=True)
    name = models.CharField(max_length=200)
    key_prefix = models.CharField(
        max_length=10,
        unique=True,
        validators=[RegexValidator(r"^[A-Z][A-Z0-9]{0,9}$", "Uppercase letters and digits, starting with a letter.")],
        help_text="Prefix of task keys, e.g. WEB in WEB-412.",
    )
    repository = models.CharField(max_length=500, blank=True, help_text="Local path or git URL.")
    remote = models.CharField(
        max_length=500, blank=True, help_text="URL agents push to; read with `git ls-remote` for pushed state."
    )
    default_branch = models.CharField(max_length=200, default="main")
    default_lease_seconds = models.PositiveIntegerField(default=900)
    queue_wait_max_seconds = models.PositiveIntegerField(default=3600)
    required_isolation = models.CharField(max_length=20, choices=Isolation.choices, default=Isolation.NONE)
    # SPEC §16.1, §16.4: who may review whose work, and when a failing task is quarantined.
    allow_self_review = models.BooleanField(default=False, help_text="The agent that did the work may also review it.")
    max_consecutive_failures = models.PositiveIntegerField(
        default=3, help_text="Failed or expired attempts in a row before a task is quarantined (0: never)."
    )
    # The last task number handed out. Incremented by a conditional UPDATE in
    # the task-creating transaction, which makes keys gap-free: a rolled-back
    # creation rolls the increment back with it.
    task_sequence = models.PositiveIntegerField(default=0, editable=False)
    created_at = models.DateTimeField()
    archived_at = models.DateTimeField(null=True, blank=True)
    # SPEC §19: what the project's agents may spend per UTC day (null: no limit).
    daily_budget_tokens = models.PositiveBigIntegerField(null=True, blank=True, help_text=BUDGET_TOKENS_HELP)
    daily_budget_cost_usd = models.DecimalField(
        max_digits=BUDGET_COST_DIGITS, decimal_places=6, null=True, blank=True, help_text=BUDGET_COST_HELP
    )

    class Meta:
        ordering = ["slug"]

    def __str__(self) -> str:
        return self.slug


class AgentKind(models.TextChoices):
    CLAUDE = "claude", "Claude"
    CODEX = "codex", "Codex"
    COPILOT = "copilot", "Copilot"
    CURSOR = "cursor", "Cursor"
    AI = "ai", "Other AI"
    HUMAN = "human", "Human"
    SCRIPT = "script", "Script"


HANDLE_PATTERN = r"^[a-z0-9][a-z0-9._-]{0,63}$"


class Agent(NoDeleteModel):
    handle = models.CharField(
        max_length=64,
        unique=True,
        validators=[RegexValidator(HANDLE_PATTERN, "Lowercase letters, digits, '.', '_' and '-'.")],
    )
    kind = models.CharField(max_length=16, choices=AgentKind.choices)
    # SHA-256 of the API token; the token itself is shown once and never stored.
    token_hash = models.CharField(max_length=64, unique=True, editable=False)
    projects = models.ManyToManyField(Project, blank=True, related_name="agents")
    is_active = models.BooleanField(default=True)
    last_seen_at = models.DateTimeField(null=True, blank=True)
    created_at = models.DateTimeField()
    deactivated_at = models.DateTimeField(null=True, blank=True)
    # SPEC §19: what this agent may spend per UTC day, over all its projects (null: no limit).
    daily_budget_tokens = models.PositiveBigIntegerField(null=True, blank=True, help_text=BUDGET_TOKENS_HELP)
    daily_budget_cost_usd = models.DecimalField(
        max_digits=BUDGET_COST_DIGITS, decimal_places=6, null=True, blank=True, help_text=BUDGET_COST_HELP
    )

    class Meta:
        ordering = ["handle"]

    def __str__(self) -> str:
        return self.handle


class TaskStatus(models.TextChoices):
    """Stored statuses. `in_progress` is never stored: it is computed from leases."""

    OPEN = "open", "Open"
    READY = "ready", "Ready"
    BLOCKED = "blocked", "Blocked"
    REVIEW = "review", "Review"
    DONE = "done", "Done"
    CANCELLED = "cancelled", "Cancelled"


# SPEC §2: the only stored-status changes there are.
ALLOWED_TRANSITIONS: dict[str, frozenset[str]] = {
    TaskStatus.OPEN: frozenset({TaskStatus.READY, TaskStatus.BLOCKED, TaskStatus.CANCELLED}),
    TaskStatus.READY: frozenset(
        {TaskStatus.OPEN, TaskStatus.BLOCKED, TaskStatus.REVIEW, TaskStatus.DONE, TaskStatus.CANCELLED}
    ),
    TaskStatus.BLOCKED: frozenset({TaskStatus.READY, TaskStatus.OPEN, TaskStatus.CANCELLED}),
    # review → blocked: a reviewer blocks the work (SPEC §16.1).
    TaskStatus.REVIEW: frozenset({TaskStatus.READY, TaskStatus.BLOCKED, TaskStatus.DONE, TaskStatus.CANCELLED}),
    TaskStatus.DONE: frozenset({TaskStatus.READY}),
    TaskStatus.CANCELLED: frozenset({TaskStatus.OPEN}),
}

# A blocker is resolved once its status is one of these.
RESOLVED_STATUSES: frozenset[str] = frozenset({TaskStatus.DONE, TaskStatus.CANCELLED})


class Task(NoDeleteModel):
    project = models.ForeignKey(Project, on_delete=models.PROTECT, related_name="tasks")
    number = models.PositiveIntegerField(editable=False)
    key = models.CharField(max_length=24, unique=True, editable=False)
    title = models.CharField(max_length=300)
    description = models.TextField(blank=True)
    acceptance_criteria = models.TextField(blank=True)
    task_class = models.SlugField(max_length=64, blank=True)
    priority = models.IntegerField(default=0, help_text="Higher is claimed first.")
    labels = models.JSONField(default=list, blank=True)
    status = models.CharField(max_length=16, choices=TaskStatus.choices, default=TaskStatus.OPEN)
    blocked_reason = models.TextField(blank=True)
    version = models.PositiveIntegerField(default=1, editable=False)
    epoch = models.PositiveIntegerField(default=0, editable=False)
    reserved_for = models.ForeignKey(
        Agent, on_delete=models.PROTECT, null=True, blank=True, related_name="reserved_tasks"
    )
    ready_since = models.DateTimeField(null=True, blank=True, editable=False)
    # Start of the current waiting period that already raised a
    # `task.queue_wait_exceeded` event; one event per waiting period.
    queue_wait_alerted_for = models.DateTimeField(null=True, blank=True, editable=False)
    created_at = models.DateTimeField(editable=False)
    updated_at = models.DateTimeField(editable=False)
    # SPEC §19: what all attempts of this task may spend together (null: no limit).
    budget_tokens = models.PositiveBigIntegerField(
        null=True, blank=True, help_text="Tokens (input + output) over all attempts; empty: no limit."
    )
    budget_cost_usd = models.DecimalField(
        max_digits=BUDGET_COST_DIGITS,
        decimal_places=6,
        null=True,
        blank=True,
        help_text="US dollars over all attempts; empty: no limit.",
    )
    # SPEC §19: the repository paths its claims reserve unless a claim names its own.
    paths = models.JSONField(default=list, blank=True, help_text="Repository-relative paths its claims reserve.")
    paths_mode = models.CharField(max_length=16, choices=PathsMode.choices, default=PathsMode.EXCLUSIVE, blank=True)

    class Meta:
        ordering = ["project_id", "number"]
        constraints = [
            models.UniqueConstraint(fields=["project", "number"], name="task_number_unique_per_project"),
            models.CheckConstraint(
                condition=~Q(status=TaskStatus.BLOCKED) | ~Q(blocked_reason=""),
                name="task_blocked_needs_reason",
            ),
            models.CheckConstraint(condition=Q(status__in=TaskStatus.values), name="task_status_valid"),
        ]
        indexes = [
            # Serves claim-next and the ready view: ready tasks of a project in
            # claim-next order (priority desc, ready_since, id).
            models.Index(
                "project",
                models.F("priority").desc(),
                "ready_since",
                "id",
                name="task_ready_queue",
                condition=Q(status=TaskStatus.READY),
            ),
            models.Index(fields=["project", "status"], name="task_project_status"),
            # Serves /metrics' oldest queue wait: a project's ready tasks, longest waiting first.
            models.Index(
                fields=["project", "ready_since"], name="task_ready_since", condition=Q(status=TaskStatus.READY)
            ),
        ]

    def __str__(self) -> str:
        return f"{self.key} {self.title}"


class TaskDependency(NoDeleteModel):
    """`task` cannot be claimed while `blocked_by` is unresolved.

    Removing a dependency sets `removed_at`; the row stays, like every row of
    the ledger.
    """

    task = models.ForeignKey(Task, on_delete=models.PROTECT, related_name="dependencies")
    blocked_by = models.ForeignKey(Task, on_delete=models.PROTECT, related_name="dependents")
    created_at = models.DateTimeField()
    removed_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        constraints = [
            models.UniqueConstraint(
                fields=["task", "blocked_by"],
                condition=Q(removed_at__isnull=True),
                name="dependency_unique_while_present",
            ),
            models.CheckConstraint(condition=~Q(task=models.F("blocked_by")), name="dependency_not_self"),
        ]

    def __str__(self) -> str:
        return f"{self.task_id} blocked by {self.blocked_by_id}"


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
    AGENT_PROJECTS_CHANGED = "agent.projects_changed"
    AGENT_REACTIVATED = "agent.reactivated"
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
    TASK_QUARANTINED = "task.quarantined"
    TASK_QUARANTINE_RELEASED = "task.quarantine_released"
    DECISION_CREATED = "decision.created"
    DECISION_SUPERSEDED = "decision.superseded"
    WEBHOOK_CREATED = "webhook.created"
    WEBHOOK_DISABLED = "webhook.disabled"
    WEBHOOK_ENABLED = "webhook.enabled"
    WEBHOOK_REDELIVERED = "webhook.redelivered"
    WEBHOOK_SECRET_ROLLED = "webhook.secret_rolled"  # noqa: S105 - an event name


class Event(NoDeleteModel):
    """The append-only audit log and the delta-feed sequence.

    `attempt_id` is a plain integer, not a foreign key: attempts live in
    `leases`, which `ledger` does not import.
    """

    id = models.BigAutoField(primary_key=True)
    project = models.ForeignKey(Project, on_delete=models.PROTECT, null=True, blank=True, related_name="+")
    task = models.ForeignKey(Task, on_delete=models.PROTECT, null=True, blank=True, related_name="events")
    attempt_id = models.BigIntegerField(null=True, blank=True, db_index=True)
    actor_agent = models.ForeignKey(Agent, on_delete=models.PROTECT, null=True, blank=True, related_name="+")
    actor_user = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.PROTECT, null=True, blank=True, related_name="+"
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


DECISION_TITLE_MAX_CHARS = 200
DECISION_BODY_MAX_CHARS = 4000
COMMENT_BODY_MAX_CHARS = 8000


class DecisionStatus(models.TextChoices):
    ACTIVE = "active", "Active"
    SUPERSEDED = "superseded", "Superseded"


def _one_author(prefix: str) -> models.CheckConstraint:
    return models.CheckConstraint(
        condition=Q(author_agent__isnull=False, author_user__isnull=True)
        | Q(author_agent__isnull=True, author_user__isnull=False),
        name=f"{prefix}_one_author",
    )


class Decision(NoDeleteModel):
    """A recorded decision of a project, optionally about one task (SPEC §16.2).

    Never deleted: a decision that no longer holds is `superseded` by another.
    """

    project = models.ForeignKey(Project, on_delete=models.PROTECT, related_name="decisions")
    task = models.ForeignKey(Task, on_delete=models.PROTECT, null=True, blank=True, related_name="decisions")
    title = models.CharField(max_length=DECISION_TITLE_MAX_CHARS)
    body = models.TextField(max_length=DECISION_BODY_MAX_CHARS, blank=True)
    status = models.CharField(max_length=16, choices=DecisionStatus.choices, default=DecisionStatus.ACTIVE)
    superseded_by = models.ForeignKey("self", on_delete=models.PROTECT, null=True, blank=True, related_name="+")
    author_agent = models.ForeignKey(Agent, on_delete=models.PROTECT, null=True, blank=True, related_name="+")
    author_user = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.PROTECT, null=True, blank=True, related_name="+"
    )
    created_at = models.DateTimeField()
    superseded_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["-id"]
        constraints = [
            _one_author("decision"),
            models.CheckConstraint(condition=Q(status__in=DecisionStatus.values), name="decision_status_valid"),
            models.CheckConstraint(
                condition=Q(status=DecisionStatus.SUPERSEDED, superseded_by__isnull=False)
                | Q(status=DecisionStatus.ACTIVE, superseded_by__isnull=True),
                name="decision_superseded_by_iff_superseded",
            ),
        ]
        indexes = [
            # Serves the work context: active decisions of a project (and of a task).
            models.Index(fields=["project", "status", "-id"], name="decision_project_status"),
        ]

    def __str__(self) -> str:
        return f"decision {self.pk}: {self.title}"

    @property
    def author_label(self) -> str:
        if self.author_agent is not None:
            return self.author_agent.handle
        return f"user:{self.author_user.get_username()}" if self.author_user is not None else "system"


class TaskComment(NoDeleteModel):
    """A comment on a task by an agent or a person (SPEC §16.2); never edited, never deleted."""

    task = models.ForeignKey(Task, on_delete=models.PROTECT, related_name="comments")
    body = models.TextField(max_length=COMMENT_BODY_MAX_CHARS)
    author_agent = models.ForeignKey(Agent, on_delete=models.PROTECT, null=True, blank=True, related_name="+")
    author_user = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.PROTECT, null=True, blank=True, related_name="+"
    )
    created_at = models.DateTimeField()

    class Meta:
        ordering = ["id"]
        constraints = [_one_author("comment")]
        indexes = [models.Index(fields=["task", "-id"], name="comment_task_recent")]

    def __str__(self) -> str:
        return f"comment {self.pk} on {self.task_id}"

    @property
    def author_label(self) -> str:
        if self.author_agent is not None:
            return self.author_agent.handle
        return f"user:{self.author_user.get_username()}" if self.author_user is not None else "system"


# Webhooks live in their own module (SPEC §18); importing them here registers them with the app.
# Task counts for /metrics, kept by triggers (ledger/task_count_models.py).
from ledger.task_count_models import TaskCount, TaskCountChange  # noqa: E402, F401
from ledger.webhook_models import (  # noqa: E402, F401
    DeliveryStatus,
    EventTally,
    WebhookDelivery,
    WebhookEndpoint,
    WebhookFormat,
)
