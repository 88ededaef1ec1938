"""Check results from any CI, pinned to a commit (SPEC §22).

One row per (project, commit, name), updated in place: the latest report wins, and the database
holds it (a unique constraint, written by one INSERT … ON CONFLICT DO UPDATE). The history of
reports is the event log (`check.reported`, one per report). The model lives in `leases`, below
`landing`, because the work context and the review context (both in `leases`) show the checks at a
task's head; `landing` reads it for its gates and writes it through `landing.services.check_report`,
which also sends a delivered task back when a required check fails at its head.
"""

from __future__ import annotations

from django.db import models
from django.db.models import Q

from ledger.models import Agent, NoDeleteModel, Project

CHECK_SUMMARY_MAX_CHARS = 2000
CHECK_URL_MAX_CHARS = 2000
CHECK_NAME_PATTERN = r"^[a-z0-9][a-z0-9_.-]{0,99}$"
COMMIT_PATTERN = r"^[0-9a-f]{40}$"


class CheckState(models.TextChoices):
    PENDING = "pending", "Pending"
    SUCCESS = "success", "Success"
    FAILURE = "failure", "Failure"
    ERROR = "error", "Error"


class CheckResult(NoDeleteModel):
    project = models.ForeignKey(Project, on_delete=models.PROTECT, related_name="check_results")
    commit = models.CharField(max_length=40)
    name = models.CharField(max_length=100)
    state = models.CharField(max_length=8, choices=CheckState.choices)
    url = models.CharField(max_length=CHECK_URL_MAX_CHARS, blank=True)
    summary = models.TextField(blank=True, max_length=CHECK_SUMMARY_MAX_CHARS)
    # Who reported the latest result, and when.
    agent = models.ForeignKey(Agent, on_delete=models.PROTECT, related_name="+")
    reported_at = models.DateTimeField()

    class Meta:
        ordering = ["name"]
        constraints = [
            # SPEC §22: the latest result per (project, commit, name) wins: one row, updated in place.
            # Its index also serves the checks at a head (project, commit) and the landing gate.
            models.UniqueConstraint(fields=["project", "commit", "name"], name="check_result_latest"),
            models.CheckConstraint(condition=Q(state__in=CheckState.values), name="check_result_state_valid"),
        ]

    def __str__(self) -> str:
        return f"{self.name} at {self.commit[:12]}: {self.state}"
