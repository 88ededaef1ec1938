"""Findings of reconciliation: listed with their subject, acknowledged or resolved by hand.

Triage goes through `leases.reconciliation.triage` (`finding_acknowledge`,
`finding_resolve`). A finding resolved while its condition still holds is
opened again, as a new finding, by the next run.
"""

from __future__ import annotations

import json

from django.contrib import admin
from django.db.models import QuerySet
from django.http import HttpRequest
from django.urls import reverse
from django.utils.html import format_html
from django.utils.safestring import SafeString

from config.errors import LedgerError
from console.base import LeaseholdModelAdmin, actor_of, badge, plural, task_link
from console.timeline import payload_summary
from leases.reconciliation.models import Finding, FindingStatus, SubjectType
from leases.reconciliation.triage import finding_acknowledge, finding_resolve


class FindingAdmin(LeaseholdModelAdmin):
    list_display = ["id", "condition_label", "status_badge", "project", "subject", "last_seen_at", "first_seen_at"]
    list_display_links = ["id", "condition_label"]
    list_filter = ["status", "condition", "project", "subject_type"]
    search_fields = ["subject_key"]
    list_select_related = ["project", "task", "attempt", "environment"]
    ordering = ["-last_seen_at", "-id"]
    actions = ["acknowledge", "resolve"]
    readonly_fields = (
        "condition_label",
        "status_badge",
        "project",
        "subject",
        "detail_json",
        "first_seen_at",
        "last_seen_at",
        "acknowledged_at",
        "acknowledged_by",
        "resolved_at",
        "resolved_by",
        "resolution_note",
    )
    fields = readonly_fields

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False

    @admin.display(description="condition", ordering="condition")
    def condition_label(self, finding: Finding) -> SafeString:
        return format_html(
            '{} <span class="lh-muted lh-mono">{}</span>', finding.get_condition_display(), finding.condition
        )

    @admin.display(description="status", ordering="status")
    def status_badge(self, finding: Finding) -> SafeString:
        return badge("error" if finding.status == FindingStatus.OPEN else finding.status, finding.status)

    @admin.display(description="subject")
    def subject(self, finding: Finding) -> SafeString:
        if finding.subject_type == SubjectType.TASK and finding.task_id and finding.task:
            return task_link(finding.task_id, finding.task.key)
        if finding.subject_type == SubjectType.ATTEMPT and finding.attempt_id:
            url = reverse("admin:leases_attempt_change", args=[finding.attempt_id])
            return format_html('attempt <a href="{}">#{}</a>', url, finding.attempt_id)
        if finding.subject_type == SubjectType.ENVIRONMENT and finding.environment_id:
            url = reverse("admin:environments_environment_change", args=[finding.environment_id])
            return format_html('environment <a href="{}">{}</a>', url, finding.subject_key)
        return format_html('{} <span class="lh-mono">{}</span>', finding.subject_type, finding.subject_key)

    @admin.display(description="detail")
    def detail_json(self, finding: Finding) -> SafeString:
        return format_html(
            '{}<pre class="lh-mono">{}</pre>',
            payload_summary(finding.detail),
            json.dumps(finding.detail, indent=2, sort_keys=True, ensure_ascii=False),
        )

    def _triage(self, request: HttpRequest, queryset: QuerySet[Finding], *, resolve: bool) -> None:
        actor = actor_of(request)
        done, skipped, refused = 0, 0, []
        for finding in queryset:
            wanted = (FindingStatus.OPEN, FindingStatus.ACKNOWLEDGED) if resolve else (FindingStatus.OPEN,)
            if finding.status not in wanted:
                skipped += 1
                continue
            try:
                if resolve:
                    finding_resolve(finding=finding, actor=actor)
                else:
                    finding_acknowledge(finding=finding, actor=actor)
            except LedgerError as exc:
                refused.append(f"Finding {finding.pk}: {exc.message}")
                continue
            done += 1
            self.log_change(request, finding, "Resolved by hand." if resolve else "Acknowledged.")
        verb = "resolved" if resolve else "acknowledged"
        self.report(
            request,
            done=f"{plural(done, 'finding')} {verb}." if done else None,
            skipped=[f"{plural(skipped, 'finding')} already {verb if not resolve else 'resolved'}."] if skipped else [],
            refused=refused,
        )
        if done and resolve:
            self.message_user(request, "A condition that still holds opens a new finding at the next run.")

    @admin.action(description="Acknowledge (someone is on it)", permissions=["operate"])
    def acknowledge(self, request: HttpRequest, queryset: QuerySet[Finding]) -> None:
        self._triage(request, queryset, resolve=False)

    @admin.action(description="Resolve by hand", permissions=["operate"])
    def resolve(self, request: HttpRequest, queryset: QuerySet[Finding]) -> None:
        self._triage(request, queryset, resolve=True)
