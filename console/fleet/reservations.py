"""Path reservations (SPEC §19): which attempt holds which repository paths, read-only.

A reservation has no end of its own: it is live exactly while its attempt's lease is (active and
unexpired), so the list opens on the live ones (`LiveFilter`) and says so per row. A claim refused
for overlapping paths writes a `claim.paths_refused` event; the page links those refusals.
"""

from __future__ import annotations

from typing import Any
from urllib.parse import urlencode

from django.contrib import admin
from django.db.models import QuerySet
from django.http import HttpRequest, HttpResponse
from django.urls import reverse
from django.utils.html import format_html, format_html_join
from django.utils.safestring import SafeString

from console.base import (
    EMPTY,
    DefaultedListFilter,
    EstimatedCountMixin,
    ReadOnlyAdmin,
    badge,
    lease_remaining,
    moment,
    task_link,
)
from leases.models import AttemptStatus, PathReservation
from ledger import clock
from ledger.models import EventType

PATHS_SHOWN = 12


def paths_cell(paths: list[str]) -> SafeString:
    """The reserved paths, monospace, one per line; past PATHS_SHOWN, how many more."""
    if not paths:
        return format_html("{}", EMPTY)
    shown = format_html_join(
        SafeString("<br>"), '<span class="lh-mono">{}</span>', ((path,) for path in paths[:PATHS_SHOWN])
    )
    more = len(paths) - PATHS_SHOWN
    return format_html("{}<br>… and {} more", shown, more) if more > 0 else shown


def refusals_url() -> str:
    return reverse("admin:ledger_event_changelist") + "?" + urlencode({"type": EventType.CLAIM_PATHS_REFUSED})


class LiveFilter(DefaultedListFilter):
    """Live by default: a reservation of an ended or lapsed lease reserves nothing."""

    title = "lease"
    parameter_name = "live"
    default = "live"
    default_display = "Live (the lease holds them now)"

    def lookups(self, request: HttpRequest, model_admin: Any) -> list[tuple[str, str]]:
        return [("all", "All, ended too"), ("ended", "Ended or lapsed")]

    def queryset(self, request: HttpRequest, queryset: QuerySet[Any]) -> QuerySet[Any]:
        value = self.value()
        live = {"attempt__status": AttemptStatus.ACTIVE, "attempt__lease_expires_at__gt": clock.now()}
        if value == "all":
            return queryset
        if value == "ended":
            return queryset.exclude(**live)
        return queryset.filter(**live)


class PathReservationAdmin(EstimatedCountMixin, ReadOnlyAdmin):
    list_display = ["attempt_link", "task", "holder", "project", "mode_badge", "paths_list", "lease", "created"]
    list_display_links = None
    list_filter = [LiveFilter, "project", "mode"]
    search_fields = ["=attempt__task__key", "=attempt__agent__handle"]
    search_help_text = "A task key or an agent's handle (exact)."
    list_select_related = ["attempt__task", "attempt__agent", "project"]
    ordering = ["-attempt"]
    change_list_template = "admin/leases/pathreservation/change_list.html"

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    def changelist_view(self, request: HttpRequest, extra_context: dict[str, Any] | None = None) -> HttpResponse:
        return super().changelist_view(request, {"refusals_url": refusals_url(), **(extra_context or {})})

    @admin.display(description="attempt", ordering="attempt")
    def attempt_link(self, reservation: PathReservation) -> SafeString:
        url = reverse("admin:leases_attempt_change", args=[reservation.attempt_id])
        return format_html('<a href="{}">#{}</a>', url, reservation.attempt_id)

    @admin.display(description="task")
    def task(self, reservation: PathReservation) -> SafeString:
        attempt = reservation.attempt
        return task_link(attempt.task_id, attempt.task.key)

    @admin.display(description="holder")
    def holder(self, reservation: PathReservation) -> str:
        return reservation.attempt.agent.handle

    @admin.display(description="project", ordering="project__slug")
    def project(self, reservation: PathReservation) -> str:
        return reservation.project.slug

    @admin.display(description="mode", ordering="mode")
    def mode_badge(self, reservation: PathReservation) -> SafeString:
        return format_html('<span class="lh-mono">{}</span>', reservation.mode)

    @admin.display(description="paths")
    def paths_list(self, reservation: PathReservation) -> SafeString:
        return paths_cell(reservation.paths)

    @admin.display(description="lease left / ended")
    def lease(self, reservation: PathReservation) -> Any:
        attempt = reservation.attempt
        now = clock.now()
        if attempt.status != AttemptStatus.ACTIVE:
            return format_html("{} {}", badge(attempt.status), moment(attempt.finished_at))
        if attempt.lease_expires_at <= now:
            return badge("expired", "lapsed")
        return lease_remaining(attempt.lease_expires_at, now, attempt.lease_seconds)

    @admin.display(description="reserved (UTC)", ordering="created_at")
    def created(self, reservation: PathReservation) -> str:
        return moment(reservation.created_at)
