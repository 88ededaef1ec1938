"""Incidents (`insight.models.incidents`): the list, and the levers a person pulls on one.

Opened and resolved by the incident check only; people **acknowledge**,
**snooze** (1 hour, 1 day, or end the snooze) and **assign** (to themselves,
or to nobody) from the list's actions, each through `insight.services.incidents`
and each with a LogEntry. `?subject=agent:<handle>` or `?subject=job:<name>`
is the timeline of one agent or job (the agent health and job health pages
link it). Open incidents are shown by default. The list is never counted in
full (the pager looks ahead a few pages) and reads the `incident_recent` index
newest first: its cost follows the open incidents, not the kept history.
"""

from __future__ import annotations

from typing import Any

from django.contrib import admin
from django.db.models import QuerySet
from django.http import HttpRequest
from django.utils.html import format_html
from django.utils.safestring import SafeString

from console.base import DefaultedListFilter, EstimatedCountMixin, LeaseholdModelAdmin, actor_of, plural
from insight.models.incidents import Incident, IncidentStatus
from insight.services.incidents import incident_acknowledge, incident_assign, incident_snooze
from ledger import clock

HOUR = 3600


class IncidentStatusFilter(DefaultedListFilter):
    """Open incidents by default (a subject's timeline: all); resolved or all on request."""

    title = "status"
    parameter_name = "status__exact"
    ALL = "all"

    def default_for(self, request: HttpRequest) -> str:
        return self.ALL if request.GET.get(IncidentSubjectFilter.parameter_name) else IncidentStatus.OPEN

    def lookups(self, request: HttpRequest, model_admin: Any) -> list[tuple[str, str]]:
        return [(IncidentStatus.OPEN, "Open"), (IncidentStatus.RESOLVED, "Resolved"), (self.ALL, "All")]

    def queryset(self, request: HttpRequest, queryset: QuerySet[Any]) -> QuerySet[Any]:
        value = self.value()
        return queryset if value == self.ALL else queryset.filter(status=value)


class IncidentSubjectFilter(admin.SimpleListFilter):
    """`?subject=agent:<handle>`: one subject's timeline, every status (reached by link, shown while set)."""

    title = "subject"
    parameter_name = "subject"

    def lookups(self, request: HttpRequest, model_admin: Any) -> list[tuple[str, str]]:
        value = self.value()
        return [(value, value)] if value else []

    def queryset(self, request: HttpRequest, queryset: QuerySet[Any]) -> QuerySet[Any]:
        value = self.value()
        return queryset.filter(subject=value) if value else queryset


# Never counted in full (`EstimatedCountMixin`): resolved incidents are kept for ever, and the admin's
# COUNT(*) over all of them ran on every page, the open list included. Listed newest first by the
# `incident_recent` index, so "All" and "Resolved" read one page of it, not a sort of every incident.
class IncidentAdmin(EstimatedCountMixin, LeaseholdModelAdmin):
    list_display = [
        "id",
        "rule",
        "status_badge",
        "subject",
        "project",
        "title",
        "opened_at",
        "last_seen_at",
        "resolved_at",
        "acknowledged_by",
        "snoozed_until",
        "assignee",
    ]
    list_display_links = ["id", "rule"]
    list_filter = [IncidentStatusFilter, "rule", "project", IncidentSubjectFilter]
    search_fields = ["subject", "title"]
    list_select_related = ["project", "acknowledged_by", "assignee"]
    ordering = ["-opened_at", "-id"]
    actions = ["acknowledge", "snooze_hour", "snooze_day", "unsnooze", "assign_to_me", "unassign"]
    readonly_fields = (
        "rule",
        "status",
        "subject",
        "project",
        "title",
        "detail",
        "opened_at",
        "last_seen_at",
        "resolved_at",
        "notified",
        "acknowledged_at",
        "acknowledged_by",
        "snoozed_until",
        "assignee",
    )
    fields = readonly_fields

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False

    @admin.display(description="Status", ordering="status")
    def status_badge(self, incident: Incident) -> SafeString:
        snoozed = incident.snoozed_until is not None and incident.snoozed_until > clock.now()
        css = "ready" if incident.status == IncidentStatus.RESOLVED else ("open" if snoozed else "error")
        label = incident.get_status_display() + (" · snoozed" if snoozed and incident.status == "open" else "")
        return format_html('<span class="lh-badge lh-{}">{}</span>', css, label)

    def _each(self, request: HttpRequest, queryset: QuerySet[Incident], verb: str, apply: Any) -> None:
        actor = actor_of(request)
        changed = 0
        for incident in queryset:
            if apply(incident, actor):
                changed += 1
                self.log_change(request, incident, f"{verb}.")
        self.report(request, done=f"{verb}: {plural(changed, 'incident')}.", skipped=[])

    @admin.action(description="Acknowledge", permissions=["operate"])
    def acknowledge(self, request: HttpRequest, queryset: QuerySet[Incident]) -> None:
        self._each(request, queryset, "Acknowledged", lambda i, a: incident_acknowledge(incident=i, actor=a))

    @admin.action(description="Snooze for 1 hour", permissions=["operate"])
    def snooze_hour(self, request: HttpRequest, queryset: QuerySet[Incident]) -> None:
        self._each(
            request, queryset, "Snoozed for 1 hour", lambda i, a: incident_snooze(incident=i, actor=a, seconds=HOUR)
        )

    @admin.action(description="Snooze for 1 day", permissions=["operate"])
    def snooze_day(self, request: HttpRequest, queryset: QuerySet[Incident]) -> None:
        self._each(
            request, queryset, "Snoozed for 1 day", lambda i, a: incident_snooze(incident=i, actor=a, seconds=24 * HOUR)
        )

    @admin.action(description="End the snooze", permissions=["operate"])
    def unsnooze(self, request: HttpRequest, queryset: QuerySet[Incident]) -> None:
        self._each(
            request,
            queryset.filter(snoozed_until__isnull=False),
            "Snooze ended",
            lambda i, a: incident_snooze(incident=i, actor=a, seconds=0) is None,
        )

    @admin.action(description="Assign to me", permissions=["operate"])
    def assign_to_me(self, request: HttpRequest, queryset: QuerySet[Incident]) -> None:
        def assign(incident: Incident, actor: Any) -> bool:
            incident_assign(incident=incident, assignee=request.user, actor=actor)
            return True

        self._each(request, queryset, f"Assigned to {request.user.get_username()}", assign)

    @admin.action(description="Unassign", permissions=["operate"])
    def unassign(self, request: HttpRequest, queryset: QuerySet[Incident]) -> None:
        def assign(incident: Incident, actor: Any) -> bool:
            incident_assign(incident=incident, assignee=None, actor=actor)
            return True

        self._each(request, queryset.filter(assignee__isnull=False), "Unassigned", assign)
