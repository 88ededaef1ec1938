"""Admin for leases: attempts and allocations (read-only audit), findings (acknowledge, resolve), runs.

Attempts are never changed here: an admin revokes one through the task's
force-release or reassign (`console.tasks`). Findings are triaged
through `leases.reconciliation.triage`; allocations are released through
`leases.services.allocation_release`.
"""

from __future__ import annotations

import json
from typing import Any

from django.contrib import admin
from django.contrib.admin.utils import flatten_fieldsets
from django.db.models import QuerySet
from django.http import HttpRequest, HttpResponse
from django.urls import reverse
from django.utils.html import format_html, linebreaks
from django.utils.safestring import SafeString

from config.errors import LedgerError
from console.base import (
    EMPTY,
    EstimatedCountMixin,
    LeaseholdModelAdmin,
    ReadOnlyAdmin,
    ReadOnlyInline,
    actor_of,
    badge,
    lease_remaining,
    moment,
    plural,
)
from console.environments import releasable
from console.timeline import payload_summary
from leases.models import Allocation, AllocationStatus, Attempt, AttemptStatus, Note
from leases.reconciliation.models import Finding, FindingStatus, ReconciliationRun, SubjectType
from leases.reconciliation.triage import finding_acknowledge, finding_resolve
from leases.services import allocation_release
from ledger import clock


def _task_link(task_id: int, key: str) -> SafeString:
    return format_html('<a href="{}">{}</a>', reverse("admin:ledger_task_change", args=[task_id]), key)


class NoteInline(ReadOnlyInline):
    model = Note
    readonly_fields = (
        "created_at",
        "kind_badge",
        "important",
        "content_text",
        "next_steps_text",
    )
    fields = readonly_fields
    ordering = ["id"]
    verbose_name_plural = "Notes (oldest first)"

    @admin.display(description="kind")
    def kind_badge(self, note: Note) -> SafeString:
        return format_html('<span class="lh-mono">{}</span>', note.kind)

    @admin.display(description="content")
    def content_text(self, note: Note) -> SafeString:
        return SafeString(linebreaks(note.content, autoescape=True))

    @admin.display(description="next steps")
    def next_steps_text(self, note: Note) -> str:
        return "; ".join(note.next_steps) or EMPTY


class AllocationInline(ReadOnlyInline):
    model = Allocation
    readonly_fields = (
        "environment",
        "status_badge",
        "allocated_at",
        "released_at",
    )
    fields = readonly_fields
    verbose_name_plural = "Environment allocations"

    def get_queryset(self, request: HttpRequest) -> QuerySet[Allocation]:
        return super().get_queryset(request).select_related("environment")

    @admin.display(description="status")
    def status_badge(self, allocation: Allocation) -> SafeString:
        return badge(allocation.status)


@admin.register(Attempt)
class AttemptAdmin(EstimatedCountMixin, ReadOnlyAdmin):
    list_display = ["id", "task_key", "agent", "epoch", "status_badge", "claimed_at", "lease", "renew_count", "branch"]
    list_display_links = ["id"]
    list_filter = ["status", "task__project", "agent"]
    search_fields = ["=task__key", "=branch", "label"]
    search_help_text = "A task key or branch (exact), or part of a label."
    list_select_related = ["task", "agent"]
    ordering = ["-id"]
    inlines = [NoteInline, AllocationInline]
    change_form_template = "admin/leases/attempt/change_form.html"
    fieldsets = [
        (None, {"fields": ["task_key", "agent", "epoch", "status_badge", "label_text", "branch", "base_commit"]}),
        (
            "Lease",
            {"fields": ["lease_seconds", "claimed_at", "lease", "last_renewed_at", "renew_count", "finished_at"]},
        ),
        (
            "Outcome",
            {
                "fields": [
                    "result_summary",
                    "next_steps_text",
                    "failure_reason_code",
                    "interruption_reason_code",
                    "revoked_by",
                    "revoke_reason",
                ]
            },
        ),
        ("Claim", {"fields": ["task_version_at_claim", "event_id_at_claim"], "classes": ["collapse"]}),
    ]
    readonly_fields = flatten_fieldsets(fieldsets)

    def get_inlines(self, request: HttpRequest, obj: Any) -> Any:
        """Only the inlines that have rows: an attempt without notes shows no empty notes table."""
        if obj is None:
            return []
        shown: list[Any] = []
        if Note.objects.filter(attempt=obj).exists():
            shown.append(NoteInline)
        if Allocation.objects.filter(attempt=obj).exists():
            shown.append(AllocationInline)
        return shown

    def change_view(
        self, request: HttpRequest, object_id: str, form_url: str = "", extra_context: dict[str, Any] | None = None
    ) -> HttpResponse:
        events_url = reverse("admin:ledger_event_changelist") + f"?attempt_id={object_id}"
        return super().change_view(request, object_id, form_url, {"events_url": events_url, **(extra_context or {})})

    @admin.display(description="task", ordering="task__key")
    def task_key(self, attempt: Attempt) -> SafeString:
        return _task_link(attempt.task_id, attempt.task.key)

    @admin.display(description="status", ordering="status")
    def status_badge(self, attempt: Attempt) -> SafeString:
        return badge(attempt.status)

    @admin.display(description="lease left / ended", ordering="lease_expires_at")
    def lease(self, attempt: Attempt) -> Any:
        if attempt.status != AttemptStatus.ACTIVE:
            return moment(attempt.finished_at)
        return lease_remaining(attempt.lease_expires_at, clock.now())

    @admin.display(description="label")
    def label_text(self, attempt: Attempt) -> SafeString:
        return format_html('<span class="lh-mono">{}</span>', attempt.label)

    @admin.display(description="next steps")
    def next_steps_text(self, attempt: Attempt) -> str:
        return "; ".join(attempt.next_steps) or EMPTY


@admin.register(Allocation)
class AllocationAdmin(EstimatedCountMixin, LeaseholdModelAdmin):
    list_display = [
        "id",
        "environment",
        "project",
        "status_badge",
        "attempt_link",
        "task",
        "allocated_at",
        "released_at",
    ]
    list_filter = ["status", "environment__project"]
    search_fields = ["=environment__name", "=attempt__task__key"]
    list_select_related = ["environment__project", "attempt__task", "attempt__agent"]
    ordering = ["-id"]
    actions = ["release"]
    readonly_fields = (
        "environment",
        "project",
        "status_badge",
        "attempt_link",
        "task",
        "allocated_at",
        "released_at",
    )
    fields = readonly_fields

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False

    @admin.display(description="project")
    def project(self, allocation: Allocation) -> str:
        return allocation.environment.project.slug

    @admin.display(description="status", ordering="status")
    def status_badge(self, allocation: Allocation) -> SafeString:
        return badge(allocation.status)

    @admin.display(description="attempt")
    def attempt_link(self, allocation: Allocation) -> SafeString:
        url = reverse("admin:leases_attempt_change", args=[allocation.attempt_id])
        agent = allocation.attempt.agent.handle
        return format_html(
            '<a href="{}">#{}</a> {} {}', url, allocation.attempt_id, agent, badge(allocation.attempt.status)
        )

    @admin.display(description="task")
    def task(self, allocation: Allocation) -> SafeString:
        return _task_link(allocation.attempt.task_id, allocation.attempt.task.key)

    @admin.action(description="Release (stale or leaked only)", permissions=["operate"])
    def release(self, request: HttpRequest, queryset: QuerySet[Allocation]) -> None:
        actor = actor_of(request)
        released, kept, refused = 0, [], []
        for allocation in queryset.exclude(status=AllocationStatus.RELEASED).select_related("attempt", "environment"):
            if not releasable(allocation):
                kept.append(f"{allocation.environment.name} (attempt {allocation.attempt_id} is live)")
                continue
            try:
                allocation_release(allocation=allocation, actor=actor)
            except LedgerError as exc:
                refused.append(f"{allocation.environment.name}: {exc.message}")
                continue
            released += 1
            self.log_change(request, allocation, f"Released the {allocation.status} allocation.")
        self.report(
            request,
            done=f"Released {plural(released, 'allocation')}." if released else None,
            skipped=[f"Kept: {', '.join(kept)}."] if kept else [],
            refused=refused,
        )


@admin.register(Finding)
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
            return _task_link(finding.task_id, finding.task.key)
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


@admin.register(ReconciliationRun)
class ReconciliationRunAdmin(EstimatedCountMixin, ReadOnlyAdmin):
    list_display = ["id", "started_at", "finished_at", "status_badge", "opened", "resolved", "error_count"]
    list_filter = ["status"]
    ordering = ["-id"]
    readonly_fields = (
        "started_at",
        "finished_at",
        "status_badge",
        "opened",
        "resolved",
        "counts_json",
        "errors_json",
    )
    fields = readonly_fields

    @admin.display(description="status", ordering="status")
    def status_badge(self, run: ReconciliationRun) -> SafeString:
        colors = {"succeeded": "completed", "partial": "warn", "failed": "error", "running": "active"}
        return badge(colors.get(run.status, run.status), run.get_status_display())

    @admin.display(description="errors")
    def error_count(self, run: ReconciliationRun) -> int:
        return len(run.errors or [])

    @admin.display(description="findings per condition")
    def counts_json(self, run: ReconciliationRun) -> SafeString:
        return format_html('<pre class="lh-mono">{}</pre>', json.dumps(run.counts, indent=2, sort_keys=True))

    @admin.display(description="errors")
    def errors_json(self, run: ReconciliationRun) -> SafeString:
        return format_html('<pre class="lh-mono">{}</pre>', json.dumps(run.errors, indent=2, ensure_ascii=False))
