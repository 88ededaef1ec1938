"""Decisions and comments on tasks (SPEC §16)."""

from __future__ import annotations

from django.conf import settings
from django.db import models
from django.db.models import Q

from ledger.models.agents import Agent
from ledger.models.base import NoDeleteModel
from ledger.models.projects import Project
from ledger.models.tasks import Task

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
