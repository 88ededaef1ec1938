"""Tasks, their stored statuses and the transitions between them, and dependencies between tasks."""

from __future__ import annotations

from django.db import models
from django.db.models import Q

from ledger.models.agents import Agent
from ledger.models.base import NoDeleteModel
from ledger.models.projects import BUDGET_COST_DIGITS, PathsMode, Project


class TaskStatus(models.TextChoices):
    """Stored statuses. `in_progress` is never stored: it is computed from leases."""

    OPEN = "open", "Open"
    READY = "ready", "Ready"
    BLOCKED = "blocked", "Blocked"
    REVIEW = "review", "Review"
    # SPEC §21.1: finished (or approved) in a project with landing on, waiting in the landing queue.
    DELIVERED = "delivered", "Delivered"
    DONE = "done", "Done"
    CANCELLED = "cancelled", "Cancelled"


# A task not yet alerted for its present waiting period (`leases.services.expiry.check_queue_wait`): the
# condition of the partial index `task_queue_wait_unalerted`, and the check's filter, in the same words (a
# planner uses a partial index only for a query that implies its condition).
QUEUE_WAIT_UNALERTED = Q(queue_wait_alerted_for__isnull=True) | ~Q(queue_wait_alerted_for=models.F("ready_since"))


# SPEC §2: the only stored-status changes there are.
ALLOWED_TRANSITIONS: dict[str, frozenset[str]] = {
    TaskStatus.OPEN: frozenset({TaskStatus.READY, TaskStatus.BLOCKED, TaskStatus.CANCELLED}),
    TaskStatus.READY: frozenset(
        {
            TaskStatus.OPEN,
            TaskStatus.BLOCKED,
            TaskStatus.REVIEW,
            TaskStatus.DELIVERED,
            TaskStatus.DONE,
            TaskStatus.CANCELLED,
        }
    ),
    TaskStatus.BLOCKED: frozenset({TaskStatus.READY, TaskStatus.OPEN, TaskStatus.CANCELLED}),
    # review → blocked: a reviewer blocks the work (SPEC §16.1).
    TaskStatus.REVIEW: frozenset(
        {TaskStatus.READY, TaskStatus.BLOCKED, TaskStatus.DELIVERED, TaskStatus.DONE, TaskStatus.CANCELLED}
    ),
    # SPEC §21: landed (done), sent back by a failed landing (ready), quarantined (blocked), or cancelled.
    TaskStatus.DELIVERED: frozenset({TaskStatus.READY, TaskStatus.BLOCKED, TaskStatus.DONE, TaskStatus.CANCELLED}),
    TaskStatus.DONE: frozenset({TaskStatus.READY}),
    TaskStatus.CANCELLED: frozenset({TaskStatus.OPEN}),
}

# Finished work: a blocker is resolved once its status is one of these, and every other task is live work
# (the console's task list by default, `ledger.selectors.live_task_classes`).
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
    # SPEC §23.1: labels a claimer must carry (`Agent.labels`, a runner slot's are its runner's); empty: anyone.
    requires = models.JSONField(default=list, blank=True)
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
    # SPEC §21.1: what was delivered (the branch and head a lander fetches), and where and by whom it landed.
    delivered_at = models.DateTimeField(null=True, blank=True, editable=False)
    delivered_branch = models.CharField(max_length=100, blank=True, editable=False)
    delivered_commit = models.CharField(max_length=40, blank=True, editable=False)
    landed_commit = models.CharField(max_length=40, blank=True, editable=False)
    landed_at = models.DateTimeField(null=True, blank=True, editable=False)
    landed_by = models.CharField(max_length=200, blank=True, editable=False, help_text="A landing, or reconciliation.")
    # Landings that failed in a row since the last delivery landed (SPEC §21.2: quarantine at the project's limit).
    failed_landings = models.PositiveIntegerField(default=0, editable=False)
    # SPEC §25: the task has an active attempt (its lease may have lapsed unswept). Kept by triggers on the
    # attempt table (`leases/migrations/0021_task_held.py`), so that claim-next's queue index can leave held
    # tasks out by construction. The one Python write: a claim's epoch UPDATE sets it with the epoch, right
    # before it inserts the attempt (one write of the row, not two; the trigger then finds it set).
    held = models.BooleanField(default=False, editable=False)

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
            # Serves claim-next (SPEC §25): the ready tasks nobody holds, in claim-next order. Held tasks are
            # not in it, so claim-next never walks past them, however many there are.
            models.Index(
                "project",
                models.F("priority").desc(),
                "ready_since",
                "id",
                name="task_claim_queue",
                condition=Q(status=TaskStatus.READY, held=False),
            ),
            # The console's task list in its order (project, priority desc, number, id desc): a page of any of
            # its filters walks it and stops (issue 33).
            models.Index(
                "project", models.F("priority").desc(), "number", models.F("id").desc(), name="task_list_order"
            ),
            # A project's tasks by stored status, in the board's order (priority desc, number): the board's
            # columns read their first cards along it, however many tasks a status holds (issue 33: the done
            # column sorted 175k tasks at 1M).
            models.Index("project", "status", models.F("priority").desc(), "number", name="task_project_status"),
            # Serves the landing queue (SPEC §21.1): a project's delivered tasks by priority, then delivery.
            models.Index(
                "project",
                models.F("priority").desc(),
                "delivered_at",
                "id",
                name="task_landing_queue",
                condition=Q(status=TaskStatus.DELIVERED),
            ),
            # Serves reconciliation's branch lookup (SPEC §25): the delivered and landed tasks of the branches
            # git reported, by index whatever the project's history (tasks never delivered are not in it).
            models.Index(
                fields=["project", "delivered_branch"],
                name="task_delivered_branch",
                condition=~Q(delivered_branch=""),
            ),
            # Serves /metrics' oldest queue wait: a project's ready tasks, longest waiting first.
            models.Index(
                fields=["project", "ready_since"], name="task_ready_since", condition=Q(status=TaskStatus.READY)
            ),
            # Serves the queue-wait check (SPEC §25): a project's ready tasks not yet alerted for their
            # present waiting period, longest waiting first. An alerted task leaves it until it waits again
            # (a new `ready_since`), so the check reads the alerts it may write, not the alerted backlog.
            models.Index(
                fields=["project", "ready_since", "id"],
                name="task_queue_wait_unalerted",
                condition=Q(status=TaskStatus.READY) & QUEUE_WAIT_UNALERTED,
            ),  # Serves agent health's quarantined work (stop 40): the blocked tasks (live work), read before their
            # attempts, instead of the week's failed and expired attempts joined to every task they name.
            models.Index(fields=["id"], name="task_blocked", condition=Q(status=TaskStatus.BLOCKED)),
            # Serves the task list's class filter (issue 33): the classes of live work by a loose scan, one
            # probe per class (`ledger.selectors.live_task_classes`), whatever the number of live tasks. Its
            # `task_class >= ''` (true of every row) is there so that only a statement that says it too can
            # use it: small beside the others, it was chosen for the incident check's ready tasks (and read
            # every live task's row) until it was.
            models.Index(
                fields=["task_class"],
                name="task_live_class",
                condition=~Q(status__in=sorted(RESOLVED_STATUSES)) & Q(task_class__gte=""),
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
