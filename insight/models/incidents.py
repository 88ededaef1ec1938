"""Alerts as incidents (issue 32), the way healthchecks and Sentry do it: one row per rule and subject.

An incident is opened by `insight.services.incidents.incidents_check` when a
rule starts to hold for a subject (an agent, a project, a webhook endpoint, a
job), kept open while it holds, and resolved when it stops. The database
holds the invariant: at most one open incident per (rule, subject), so two
checks at once cannot open it twice. Opening and resolving each append one
event (`incident.opened`, `incident.resolved`): that is the one webhook
notification per incident, not one per underlying event.

People acknowledge, snooze and assign incidents in the admin. A snooze hides
the incident from the dashboard until it ends and, when the same rule and
subject opens again before then (a flapping agent), that incident opens
without a notification.
"""

from __future__ import annotations

from django.conf import settings
from django.db import models
from django.db.models import Q

from ledger.models import NoDeleteModel, Project


class IncidentRule(models.TextChoices):
    AGENT_SILENT = "agent_silent", "Agent silent"
    QUEUE_WAIT = "queue_wait", "Queue wait exceeded"
    BUDGET_SPENT = "budget_spent", "Budget spent"
    RECONCILIATION_PARTIAL = "reconciliation_partial", "Reconciliation failing"
    WEBHOOK_FAILING = "webhook_failing", "Webhook endpoint failing"
    LANDING_STUCK = "landing_stuck", "Landing queue stuck"
    JOB_FAILING = "job_failing", "Job failing"


class IncidentStatus(models.TextChoices):
    OPEN = "open", "Open"
    RESOLVED = "resolved", "Resolved"


class Incident(NoDeleteModel):
    rule = models.CharField(max_length=32, choices=IncidentRule.choices)
    # `kind:name`: `agent:<handle>`, `project:<slug>`, `webhook:<id>`, `job:<name>`. The timeline of one
    # agent or job is its incidents, newest first (the admin's `?subject=`).
    subject = models.CharField(max_length=300)
    project = models.ForeignKey(Project, on_delete=models.PROTECT, null=True, blank=True, related_name="+")
    title = models.CharField(max_length=300)
    # What the rule saw the last time it held (counts, ages), as the check wrote it.
    detail = models.JSONField(default=dict, blank=True)
    status = models.CharField(max_length=16, choices=IncidentStatus.choices, default=IncidentStatus.OPEN)
    opened_at = models.DateTimeField()
    last_seen_at = models.DateTimeField()
    resolved_at = models.DateTimeField(null=True, blank=True)
    # Whether `incident.opened` was appended (false: opened during a snooze of the same rule and subject).
    notified = models.BooleanField(default=True)
    acknowledged_at = models.DateTimeField(null=True, blank=True)
    acknowledged_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.PROTECT, null=True, blank=True, related_name="+"
    )
    snoozed_until = models.DateTimeField(null=True, blank=True)
    assignee = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.PROTECT, null=True, blank=True, related_name="+"
    )

    class Meta:
        ordering = ["-opened_at", "-id"]
        constraints = [
            models.UniqueConstraint(
                fields=["rule", "subject"],
                condition=Q(status=IncidentStatus.OPEN),
                name="incident_one_open_per_rule_subject",
            ),
            models.CheckConstraint(condition=Q(rule__in=IncidentRule.values), name="incident_rule_valid"),
            models.CheckConstraint(
                condition=Q(status=IncidentStatus.RESOLVED, resolved_at__isnull=False)
                | Q(status=IncidentStatus.OPEN, resolved_at__isnull=True),
                name="incident_resolved_at_iff_resolved",
            ),
        ]
        indexes = [
            # Serves each check's load of open incidents and the dashboard's panel.
            models.Index(fields=["rule"], condition=Q(status=IncidentStatus.OPEN), name="incident_open"),
            # Serves the timeline of one subject (an agent, a job).
            models.Index(fields=["subject", "opened_at"], name="incident_subject_timeline"),
            # The list, newest first (`ordering`): one page of the index for "All" and "Resolved", not a sort of
            # every incident ever opened (they are kept for ever).
            models.Index(fields=["-opened_at", "-id"], name="incident_recent"),
        ]

    def __str__(self) -> str:
        return f"{self.rule} {self.subject} ({self.status})"
