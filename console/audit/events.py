"""The audit log: read-only, filterable, exportable, and cheap on a table of millions of rows.

- The paginator never counts the table (`EstimatedCountPaginator`).
- The date hierarchy reads the first and last `created_at` (two index probes)
  instead of Django's `SELECT DISTINCT` over every row.
- Filter choices come from constants and small tables, never from a
  `DISTINCT` over the event table.
- CSV export streams the filtered list (`export/`) or the selected rows (an
  action), for anyone who may view events: Managers included.
"""

from __future__ import annotations

import calendar
import json
from collections.abc import Iterator
from datetime import UTC, date
from typing import Any

from django.contrib import admin
from django.contrib.admin.options import IncorrectLookupParameters
from django.contrib.admin.views.main import ChangeList
from django.contrib.auth import get_user_model
from django.core.exceptions import PermissionDenied
from django.db.models import QuerySet
from django.http import HttpRequest, HttpResponse, HttpResponseRedirect, StreamingHttpResponse
from django.http.response import HttpResponseBase
from django.urls import URLPattern, path, reverse
from django.utils.html import format_html
from django.utils.safestring import SafeString

from console.audit.alerts import readable_summary
from console.audit.timeline import payload_summary
from console.base import EMPTY, EstimatedCountMixin, ReadOnlyAdmin, badge, moment
from console.reports.exports import CSV_CHUNK, compact_json, csv_download, csv_lines
from ledger import clock
from ledger.models import Agent, Event, EventType

# `summary` is the readable sentence (console.audit.alerts.readable_summary); `payload` the compact JSON beside it.
CSV_COLUMNS = (
    "id",
    "created_at",
    "type",
    "severity",
    "project",
    "task",
    "task_title",
    "attempt_id",
    "actor",
    "summary",
    "payload",
)


class EventTypeFilter(admin.SimpleListFilter):
    title = "type"
    parameter_name = "type"

    def lookups(self, request: HttpRequest, model_admin: Any) -> list[tuple[str, str]]:
        """Exactly the declared types (`EventType`), in order: no query, no drift."""
        return [(value, value) for value in sorted(EventType.values)]

    def queryset(self, request: HttpRequest, queryset: QuerySet[Any]) -> QuerySet[Any]:
        value = self.value()
        return queryset.filter(type=value) if value else queryset


class ActorFilter(admin.SimpleListFilter):
    """The system, an agent, or a human user."""

    title = "actor"
    parameter_name = "actor"
    shown = 200

    def lookups(self, request: HttpRequest, model_admin: Any) -> list[tuple[str, str]]:
        users = get_user_model().objects.filter(is_staff=True).order_by("username")[: self.shown]
        agents = Agent.objects.order_by("handle").values_list("pk", "handle")[: self.shown]
        return [
            ("system", "system (jobs)"),
            *((f"user:{user.pk}", f"user:{user.get_username()}") for user in users),
            *((f"agent:{pk}", handle) for pk, handle in agents),
        ]

    def queryset(self, request: HttpRequest, queryset: QuerySet[Any]) -> QuerySet[Any]:
        value = self.value() or ""
        if value == "system":
            return queryset.filter(actor_agent__isnull=True, actor_user__isnull=True)
        kind, _, pk = value.partition(":")
        if not pk.isdigit():
            return queryset
        if kind == "agent":
            return queryset.filter(actor_agent_id=int(pk))
        if kind == "user":
            return queryset.filter(actor_user_id=int(pk))
        return queryset


class EventChangeList(ChangeList):
    def cheap_date_hierarchy(self) -> dict[str, Any] | None:
        """Django's date hierarchy without its `SELECT DISTINCT` over the whole table.

        The range comes from the oldest and newest event (two index probes);
        the links are every year, month or day inside it. A link may lead to
        an empty page; it never costs a scan.
        """
        field = self.date_hierarchy
        if not field:
            return None
        year_field, month_field, day_field = f"{field}__year", f"{field}__month", f"{field}__day"
        year, month, day = (self.params.get(name) for name in (year_field, month_field, day_field))
        first = Event.objects.order_by("created_at").values_list("created_at", flat=True).first()
        last = Event.objects.order_by("-created_at").values_list("created_at", flat=True).first()
        if first is None or last is None:
            return None
        first_day, last_day = first.astimezone(UTC).date(), last.astimezone(UTC).date()

        def link(filters: dict[str, Any]) -> str:
            return str(self.get_query_string(filters, [f"{field}__"]))

        def one(value: Any) -> int | None:
            return int(value) if value is not None and str(value).isdigit() else None

        y, m, d = one(year), one(month), one(day)
        if y is None and first_day.year == last_day.year:
            y = first_day.year
        if (
            y is not None
            and m is None
            and d is None
            and (first_day.year, first_day.month)
            == (
                last_day.year,
                last_day.month,
            )
        ):
            m = first_day.month if first_day.year == y else None
        if y and m and d:
            return {
                "show": True,
                "back": {"link": link({year_field: y, month_field: m}), "title": date(y, m, 1).strftime("%B %Y")},
                "choices": [{"title": date(y, m, d).strftime("%B %-d")}],
            }
        if y and m:
            days = [
                date(y, m, n)
                for n in range(1, calendar.monthrange(y, m)[1] + 1)
                if first_day <= date(y, m, n) <= last_day
            ]
            return {
                "show": True,
                "back": {"link": link({year_field: y}), "title": str(y)},
                "choices": [
                    {
                        "link": link({year_field: y, month_field: m, day_field: when.day}),
                        "title": when.strftime("%b %-d"),
                    }
                    for when in days
                ],
            }
        if y:
            months = [
                n
                for n in range(1, 13)
                if (first_day.year, first_day.month) <= (y, n) <= (last_day.year, last_day.month)
            ]
            return {
                "show": True,
                "back": {"link": link({}), "title": "All dates"},
                "choices": [
                    {"link": link({year_field: y, month_field: n}), "title": date(y, n, 1).strftime("%B %Y")}
                    for n in months
                ],
            }
        return {
            "show": True,
            "back": None,
            "choices": [
                {"link": link({year_field: n}), "title": str(n)} for n in range(first_day.year, last_day.year + 1)
            ],
        }


def csv_rows(events: QuerySet[Event]) -> Iterator[str]:
    """The CSV, a line at a time, reading the events in chunks (formula-like cells defused)."""
    rows = events.select_related("project", "task", "actor_agent", "actor_user").iterator(chunk_size=CSV_CHUNK)
    return csv_lines(
        CSV_COLUMNS,
        (
            [
                event.pk,
                clock.iso(event.created_at),
                event.type,
                event.severity,
                event.project.slug if event.project else "",
                event.task.key if event.task else "",
                event.task.title if event.task else "",
                event.attempt_id or "",
                event.actor_label,
                readable_summary(event.type, event.payload),
                compact_json(event.payload),
            ]
            for event in rows
        ),
    )


def csv_response(events: QuerySet[Event]) -> StreamingHttpResponse:
    return csv_download(csv_rows(events), name="events")


class EventAdmin(EstimatedCountMixin, ReadOnlyAdmin):
    list_display = [
        "id",
        "created",
        "type_code",
        "severity_badge",
        "project",
        "task_link",
        "attempt_link",
        "actor",
        "payload_text",
    ]
    list_display_links = ["id", "created"]
    list_filter = ["severity", EventTypeFilter, "project", ActorFilter]
    list_select_related = ["project", "task", "actor_agent", "actor_user"]
    search_fields = ["=task__key"]
    search_help_text = "A task key, exactly (e.g. WEB-412). Use the filters for type, severity, project and actor."
    date_hierarchy = "created_at"
    ordering = ["-id"]
    list_per_page = 100
    actions_selection_counter = False
    actions = ["export_selected"]
    change_list_template = "admin/ledger/event/change_list.html"
    readonly_fields = (
        "id",
        "created_at",
        "type",
        "severity",
        "project",
        "task_link",
        "attempt_link",
        "actor",
        "payload_json",
    )
    fields = readonly_fields

    def get_changelist(self, request: HttpRequest, **kwargs: Any) -> type[ChangeList]:
        return EventChangeList

    def lookup_allowed(self, lookup: str, value: str, request: HttpRequest | None = None) -> bool:
        # Links from task and attempt pages filter on these.
        # The dashboard's "all N →" links filter on the window and the severities.
        if lookup in ("task__id__exact", "attempt_id", "attempt_id__exact", "created_at__gte", "severity__in"):
            return True
        return super().lookup_allowed(lookup, value, request)

    def changelist_view(self, request: HttpRequest, extra_context: dict[str, Any] | None = None) -> HttpResponse:
        query = request.GET.copy()
        query.pop("p", None)
        extra = {
            "can_export": self.has_export_permission(request),
            "export_url": reverse("admin:ledger_event_export") + (f"?{query.urlencode()}" if query else ""),
            **(extra_context or {}),
        }
        return super().changelist_view(request, extra)

    def get_urls(self) -> list[URLPattern]:
        export = path("export/", self.admin_site.admin_view(self.export_view), name="ledger_event_export")
        return [export, *super().get_urls()]

    def export_view(self, request: HttpRequest) -> HttpResponseBase:
        """The filtered list as CSV: the same filters, search and ordering as the page it came from."""
        if not self.has_export_permission(request):
            raise PermissionDenied
        try:
            changelist = self.get_changelist_instance(request)
        except IncorrectLookupParameters:
            # A filter value the field cannot take (a garbage date): back to the list, which says so, as Django does.
            return HttpResponseRedirect(reverse("admin:ledger_event_changelist") + "?e=1")
        return csv_response(changelist.get_queryset(request))

    @admin.action(description="Export selected events as CSV", permissions=["export"])
    def export_selected(self, request: HttpRequest, queryset: QuerySet[Event]) -> StreamingHttpResponse:
        return csv_response(queryset.order_by("id"))

    # --- columns ------------------------------------------------------------

    @admin.display(description="created (UTC)", ordering="created_at")
    def created(self, event: Event) -> str:
        return moment(event.created_at)

    @admin.display(description="type", ordering="type")
    def type_code(self, event: Event) -> SafeString:
        return format_html('<span class="lh-mono">{}</span>', event.type)

    @admin.display(description="severity", ordering="severity")
    def severity_badge(self, event: Event) -> SafeString:
        return badge(event.severity)

    @admin.display(description="task")
    def task_link(self, event: Event) -> SafeString | str:
        if event.task is None:
            return EMPTY
        return format_html(
            '<a href="{}">{}</a>', reverse("admin:ledger_task_change", args=[event.task_id]), event.task.key
        )

    @admin.display(description="attempt")
    def attempt_link(self, event: Event) -> SafeString | str:
        if not event.attempt_id:
            return EMPTY
        url = reverse("admin:leases_attempt_change", args=[event.attempt_id])
        return format_html('<a href="{}">#{}</a>', url, event.attempt_id)

    @admin.display(description="actor")
    def actor(self, event: Event) -> str:
        return event.actor_label

    @admin.display(description="details")
    def payload_text(self, event: Event) -> SafeString:
        """Clamped to three lines so the table fits (bug 12); the whole payload is the cell's tooltip."""
        full = compact_json(event.payload)
        return format_html('<span class="lh-payload" title="{}">{}</span>', full[:2000], payload_summary(event.payload))

    @admin.display(description="payload")
    def payload_json(self, event: Event) -> SafeString:
        text = json.dumps(event.payload, indent=2, ensure_ascii=False, sort_keys=True)
        return format_html('<pre class="lh-mono">{}</pre>', text)
