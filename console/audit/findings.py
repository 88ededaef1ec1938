"""Findings of reconciliation: triage you can act on.

- The list shows **open** findings by default (a status filter with
  acknowledged, unresolved, resolved and all besides), naming each one's task
  by key and title and its environment or branch.
- A finding's page shows the **remedy** of its condition
  (`reconciliation.remedies`, the remedy column of docs/operations.md)
  and buttons for the fitting action, each through the existing service and
  confirmation page: force-release the attempt (the task's revoke
  confirmation), release stale allocations or quarantine the environment
  (the environment actions), discard the attempt's work
  (`reconciliation.triage.attempt_discard`, with a reason), open the task.
  Which buttons fit, and the page's forms, are `console.audit.finding_triage`.
- **Acknowledge** with an owner and a note, **resolve** with a note
  (`finding_acknowledge`, `finding_resolve`); the list actions do the same
  without them. A finding resolved while its condition still holds is opened
  again, as a new finding, by the next run.
"""

from __future__ import annotations

import json
from typing import Any

from django.contrib import admin, messages
from django.core.exceptions import PermissionDenied
from django.db.models import QuerySet
from django.http import HttpRequest, HttpResponse, HttpResponseRedirect
from django.shortcuts import get_object_or_404
from django.urls import URLPattern, path, reverse
from django.utils.html import format_html
from django.utils.safestring import SafeString

from console.audit.alerts import finding_task
from console.audit.finding_triage import AcknowledgeForm, ResolveForm, discardable_attempt, triage_actions
from console.audit.timeline import payload_summary
from console.base import ConfirmationForm, DefaultedListFilter, LeaseholdModelAdmin, actor_of, badge, plural
from console.confirm import Confirmation, is_confirmed, render_confirmation
from core.errors import LedgerError
from reconciliation.models import UNRESOLVED_FINDING_STATUSES, Finding, FindingStatus, SubjectType
from reconciliation.remedies import REMEDIES
from reconciliation.triage import attempt_discard, finding_acknowledge, finding_resolve


class FindingStatusFilter(DefaultedListFilter):
    """Open findings by default; acknowledged, unresolved (both), resolved or all on request."""

    title = "status"
    parameter_name = "status__exact"
    default = FindingStatus.OPEN
    ALL = "all"
    UNRESOLVED = "unresolved"

    def lookups(self, request: HttpRequest, model_admin: Any) -> list[tuple[str, str]]:
        return [
            (FindingStatus.OPEN, "Open"),
            (FindingStatus.ACKNOWLEDGED, "Acknowledged"),
            (self.UNRESOLVED, "Open or acknowledged"),
            (FindingStatus.RESOLVED, "Resolved"),
            (self.ALL, "All"),
        ]

    def queryset(self, request: HttpRequest, queryset: QuerySet[Any]) -> QuerySet[Any]:
        value = self.value()
        if value == self.ALL:
            return queryset
        if value == self.UNRESOLVED:
            return queryset.filter(status__in=UNRESOLVED_FINDING_STATUSES)
        return queryset.filter(status=value)


class FindingAgentFilter(admin.SimpleListFilter):
    """`?agent=<handle>`: findings on that agent's attempts (the agent health page's findings link).

    No list of choices (there may be hundreds of agents): it is reached by the link, and shown while set.
    """

    title = "agent"
    parameter_name = "agent"

    def lookups(self, request: HttpRequest, model_admin: Any) -> list[tuple[str, str]]:
        value = self.value()
        return [(value, value)] if value else []

    def queryset(self, request: HttpRequest, queryset: QuerySet[Any]) -> QuerySet[Any]:
        value = self.value()
        return queryset.filter(attempt__agent__handle=value) if value else queryset


class FindingAdmin(LeaseholdModelAdmin):
    list_display = [
        "id",
        "condition_label",
        "status_badge",
        "project",
        "task_named",
        "subject",
        "owner",
        "last_seen_at",
        "first_seen_at",
    ]
    list_display_links = ["id", "condition_label"]
    list_filter = [FindingStatusFilter, "condition", "project", "subject_type", FindingAgentFilter]
    search_fields = ["subject_key"]
    list_select_related = ["project", "task", "attempt__task", "environment"]
    ordering = ["-last_seen_at", "-id"]
    actions = ["acknowledge", "resolve"]
    change_form_template = "admin/reconciliation/finding/change_form.html"
    readonly_fields = (
        "condition_label",
        "status_badge",
        "project",
        "task_named",
        "subject",
        "remedy",
        "detail_json",
        "first_seen_at",
        "last_seen_at",
        "acknowledged_at",
        "acknowledged_by",
        "owner",
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

    @admin.display(description="task")
    def task_named(self, finding: Finding) -> SafeString | str:
        task = finding_task(finding)
        if task is None:
            return "—"
        url = reverse("admin:ledger_task_change", args=[task.pk])
        return format_html(
            '<a href="{}" class="lh-mono">{}</a> <span class="lh-clip" title="{}">{}</span>',
            url,
            task.key,
            task.title,
            task.title,
        )

    @admin.display(description="subject")
    def subject(self, finding: Finding) -> SafeString:
        if finding.subject_type == SubjectType.ATTEMPT and finding.attempt_id and finding.attempt:
            url = reverse("admin:leases_attempt_change", args=[finding.attempt_id])
            attempt = finding.attempt
            branch = f" · branch {attempt.branch}" if attempt.branch else ""
            return format_html(
                'attempt <a href="{}">{} #{}</a> of {}{}', url, attempt.task.key, attempt.epoch, attempt.agent, branch
            )
        if finding.subject_type == SubjectType.ENVIRONMENT and finding.environment_id:
            url = reverse("admin:environments_environment_change", args=[finding.environment_id])
            return format_html('environment <a href="{}">{}</a>', url, finding.subject_key)
        if finding.subject_type == SubjectType.TASK and finding.task_id and finding.task:
            return format_html("task {}", finding.task.key)
        return format_html(
            '{} <span class="lh-mono lh-clip" title="{}">{}</span>',
            finding.subject_type,
            finding.subject_key,
            finding.subject_key,
        )

    @admin.display(description="remedy")
    def remedy(self, finding: Finding) -> str:
        return REMEDIES.get(finding.condition, "")

    @admin.display(description="detail")
    def detail_json(self, finding: Finding) -> SafeString:
        return format_html(
            '{}<pre class="lh-mono">{}</pre>',
            payload_summary(finding.detail),
            json.dumps(finding.detail, indent=2, sort_keys=True, ensure_ascii=False),
        )

    # --- the finding's page: remedy, actions, acknowledge, resolve ---------------

    def change_view(
        self, request: HttpRequest, object_id: str, form_url: str = "", extra_context: dict[str, Any] | None = None
    ) -> HttpResponse:
        finding = self.get_object(request, object_id)
        extra: dict[str, Any] = dict(extra_context or {})
        if finding is not None:
            operate = self.has_operate_permission(request)
            extra.update(
                remedy_text=REMEDIES.get(finding.condition, ""),
                triage=triage_actions(finding, user=request.user) if operate else [],
                can_operate=operate,
                unresolved=finding.status in UNRESOLVED_FINDING_STATUSES,
                is_open=finding.status == FindingStatus.OPEN,
                acknowledge_form=AcknowledgeForm(),
                resolve_form=ResolveForm(),
                acknowledge_url=reverse("admin:reconciliation_finding_acknowledge", args=[finding.pk]),
                resolve_url=reverse("admin:reconciliation_finding_resolve", args=[finding.pk]),
            )
        return super().change_view(request, object_id, form_url, extra)

    def get_urls(self) -> list[URLPattern]:
        wrap = self.admin_site.admin_view
        return [
            path(
                "<path:object_id>/acknowledge/", wrap(self.acknowledge_view), name="reconciliation_finding_acknowledge"
            ),
            path("<path:object_id>/resolve/", wrap(self.resolve_view), name="reconciliation_finding_resolve"),
            path("<path:object_id>/discard/", wrap(self.discard_view), name="reconciliation_finding_discard"),
            *super().get_urls(),
        ]

    def _finding_for_operation(self, request: HttpRequest, object_id: str) -> Finding:
        if not self.has_operate_permission(request) or request.method not in ("POST", "GET"):
            raise PermissionDenied
        return get_object_or_404(Finding, pk=object_id)

    def _back(self, finding: Finding) -> HttpResponseRedirect:
        return HttpResponseRedirect(reverse("admin:reconciliation_finding_change", args=[finding.pk]))

    def acknowledge_view(self, request: HttpRequest, object_id: str) -> HttpResponse:
        finding = self._finding_for_operation(request, object_id)
        form = AcknowledgeForm(request.POST if request.method == "POST" else None)
        if request.method == "POST" and form.is_valid():
            try:
                finding_acknowledge(
                    finding=finding,
                    actor=actor_of(request),
                    owner=form.cleaned_data["owner"],
                    note=form.cleaned_data["note"],
                )
            except LedgerError as exc:
                self.message_user(request, exc.message, messages.ERROR)
            else:
                self.log_change(request, finding, f"Acknowledged; owner {finding.owner}.")
                self.message_user(request, f"Finding {finding.pk} acknowledged; owner {finding.owner}.")
        return self._back(finding)

    def resolve_view(self, request: HttpRequest, object_id: str) -> HttpResponse:
        finding = self._finding_for_operation(request, object_id)
        form = ResolveForm(request.POST if request.method == "POST" else None)
        if request.method == "POST" and form.is_valid():
            try:
                finding_resolve(finding=finding, actor=actor_of(request), note=form.cleaned_data["note"])
            except LedgerError as exc:
                self.message_user(request, exc.message, messages.ERROR)
            else:
                self.log_change(request, finding, "Resolved by hand.")
                self.message_user(
                    request,
                    f"Finding {finding.pk} resolved. A condition that still holds opens a new finding at the next run.",
                )
        return self._back(finding)

    def discard_view(self, request: HttpRequest, object_id: str) -> HttpResponse:
        finding = self._finding_for_operation(request, object_id)
        attempt = discardable_attempt(finding)
        if attempt is None:
            self.message_user(
                request,
                "This finding has no ended attempt whose work could still be discarded (none, or discarded already): "
                "nothing recorded.",
                messages.ERROR,
            )
            return self._back(finding)
        form = ConfirmationForm(request.POST if is_confirmed(request) else None)
        if form.is_bound and form.is_valid():
            try:
                attempt_discard(attempt=attempt, actor=actor_of(request), reason=form.cleaned_data["reason"])
            except LedgerError as exc:
                self.message_user(request, exc.message, messages.ERROR)
            else:
                self.log_change(request, finding, f"Discarded the work of attempt {attempt.pk}.")
                self.message_user(
                    request,
                    f"The work of attempt {attempt.pk} ({attempt.task.key}) is discarded: the next run may call its "
                    "clean worktree removable. Nothing was deleted.",
                )
            return self._back(finding)
        confirmation = Confirmation(
            title=f"Discard the work of {attempt.task.key}'s attempt #{attempt.epoch}",
            intro="Record that this ended attempt's work is not wanted, so reconciliation may call its clean "
            "worktree removable (only `manage.py reconcile --prune-worktrees` removes one). The branch stays; "
            "nothing is deleted now.",
            submit_label="Yes, discard its work",
            columns=["Task", "Title", "Agent", "Status", "Branch"],
            rows=[
                (attempt, [attempt.task.key, attempt.task.title, attempt.agent.handle, attempt.status, attempt.branch])
            ],
        )
        return render_confirmation(
            request,
            self,
            confirmation=confirmation,
            form=form,
            action_name=None,
            objects=[attempt],
            cancel_url=reverse("admin:reconciliation_finding_change", args=[finding.pk]),
        )

    # --- list actions ---------------------------------------------------------

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
