"""Notes: checkpoints, progress and findings an attempt writes for the next one."""

from __future__ import annotations

from django.db import models
from django.db.models import Q

from leases.models.attempts import Attempt
from ledger.models import NoDeleteModel


class NoteKind(models.TextChoices):
    PROGRESS = "progress", "Progress"
    FINDING = "finding", "Finding"
    WARNING = "warning", "Warning"
    CHECKPOINT = "checkpoint", "Checkpoint"
    # SPEC §21.2: why a landing sent the task back (conflicting paths, a red check's output tail);
    # written by the landing, never by an agent; the next work context shows it first.
    LANDING = "landing", "Landing"


# The kinds a holder may write (every kind but `landing`).
AGENT_NOTE_KINDS: tuple[str, ...] = tuple(kind for kind in NoteKind.values if kind != NoteKind.LANDING)

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
