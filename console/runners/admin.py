"""The Runners list (`/admin/runners/runner/`): each runner's connection, slots busy and idle, and the
cordon / drain levers as admin actions on the selected runners (`console.runners.actions`).

Runners are created with `manage.py create_runner` (the token is printed once there); the list adds
none. Its rows read the runners with their projects and slots prefetched: the queries do not grow with
the number of runners or slots. The change page is the runner's detail page (`console.runners.detail`).
"""

from __future__ import annotations

from typing import Any

from django.contrib import admin
from django.db.models import Q, QuerySet
from django.http import HttpRequest, HttpResponse
from django.urls import URLPattern, path, reverse
from django.utils.html import format_html
from django.utils.safestring import SafeString

from console.base import LeaseholdModelAdmin
from console.runners.actions import TOGGLES, cancel_attempt_view, rotate_flow, rotate_view, toggle_flow, toggle_view
from console.runners.cells import ago, busy_idle, labels_cell, status_badges
from console.runners.detail import detail_view
from ledger import clock
from runners.models import Runner
from runners.selectors import online_q, runners_with_slots


class RunnerStatusFilter(admin.SimpleListFilter):
    title = "status"
    parameter_name = "status"

    def lookups(self, request: HttpRequest, model_admin: Any) -> list[tuple[str, str]]:
        return [
            ("online", "online"),
            ("offline", "offline (missed heartbeats, lost or never registered)"),
            ("lost", "lost"),
            ("cordoned", "cordoned"),
            ("draining", "draining"),
        ]

    def queryset(self, request: HttpRequest, queryset: QuerySet[Any]) -> QuerySet[Any]:
        value = self.value()
        online = online_q(now=clock.now())
        filters: dict[str, Q] = {
            "online": online,
            "offline": ~online,
            "lost": Q(lost_at__isnull=False),
            "cordoned": Q(cordoned_at__isnull=False),
            "draining": Q(draining_at__isnull=False),
        }
        return queryset.filter(filters[value]) if value in filters else queryset


class RunnerAdmin(LeaseholdModelAdmin):
    list_display = [
        "name_link",
        "status",
        "host",
        "version",
        "label_list",
        "project_list",
        "slots_busy_idle",
        "last_heartbeat",
    ]
    list_display_links = None
    list_filter = [RunnerStatusFilter]
    search_fields = ["name", "host"]
    ordering = ["name"]
    actions = ["cordon", "uncordon", "drain", "undrain", "rotate_token"]

    def has_add_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        # `manage.py create_runner` prints the token once; the console lists and operates runners.
        return False

    def get_queryset(self, request: HttpRequest) -> QuerySet[Runner]:
        return runners_with_slots()

    # --- cells --------------------------------------------------------------

    @admin.display(description="runner", ordering="name")
    def name_link(self, runner: Runner) -> SafeString:
        url = reverse("admin:runners_runner_change", args=[runner.pk])
        return format_html('<a href="{}" id="runner-{}">{}</a>', url, runner.name, runner.name)

    @admin.display(description="status")
    def status(self, runner: Runner) -> SafeString:
        return status_badges(runner, now=clock.now())

    @admin.display(description="labels")
    def label_list(self, runner: Runner) -> Any:
        return labels_cell(list(runner.labels))

    @admin.display(description="projects")
    def project_list(self, runner: Runner) -> str:
        return ", ".join(project.slug for project in runner.projects.all()) or "—"

    @admin.display(description="slots busy · idle")
    def slots_busy_idle(self, runner: Runner) -> SafeString:
        busy, idle = busy_idle(list(runner.slot_rows.all()))
        return format_html('<span class="lh-num" title="{} slots">{} · {}</span>', runner.slots, busy, idle)

    @admin.display(description="last heartbeat", ordering="last_heartbeat_at")
    def last_heartbeat(self, runner: Runner) -> SafeString:
        return ago(runner.last_heartbeat_at, now=clock.now())

    # --- actions on the selected runners ------------------------------------

    def _toggle(self, request: HttpRequest, queryset: QuerySet[Runner], name: str) -> HttpResponse | None:
        return toggle_flow(self, request, list(queryset), TOGGLES[name], action_name=name)

    @admin.action(description="Cordon (take no new work)…", permissions=["operate"])
    def cordon(self, request: HttpRequest, queryset: QuerySet[Runner]) -> HttpResponse | None:
        return self._toggle(request, queryset, "cordon")

    @admin.action(description="Uncordon (take work again)…", permissions=["operate"])
    def uncordon(self, request: HttpRequest, queryset: QuerySet[Runner]) -> HttpResponse | None:
        return self._toggle(request, queryset, "uncordon")

    @admin.action(description="Drain (finish what runs, then take no new work)…", permissions=["operate"])
    def drain(self, request: HttpRequest, queryset: QuerySet[Runner]) -> HttpResponse | None:
        return self._toggle(request, queryset, "drain")

    @admin.action(description="Undrain (take work again)…", permissions=["operate"])
    def undrain(self, request: HttpRequest, queryset: QuerySet[Runner]) -> HttpResponse | None:
        return self._toggle(request, queryset, "undrain")

    @admin.action(description="Rotate runner token…", permissions=["operate"])
    def rotate_token(self, request: HttpRequest, queryset: QuerySet[Runner]) -> HttpResponse | None:
        return rotate_flow(self, request, list(queryset), action_name="rotate_token")

    # --- pages --------------------------------------------------------------

    def change_view(
        self, request: HttpRequest, object_id: str, form_url: str = "", extra_context: dict[str, Any] | None = None
    ) -> HttpResponse:
        return detail_view(self, request, object_id)

    def get_urls(self) -> list[URLPattern]:
        wrap = self.admin_site.admin_view

        def toggle(name: str) -> URLPattern:
            return path(
                f"<path:object_id>/{name}/",
                wrap(lambda request, object_id: toggle_view(self, request, object_id, name)),
                name=f"runners_runner_{name}",
            )

        pages = [
            *(toggle(name) for name in TOGGLES),
            path(
                "<path:object_id>/rotate-token/",
                wrap(lambda request, object_id: rotate_view(self, request, object_id)),
                name="runners_runner_rotate",
            ),
            path(
                "<path:object_id>/slots/<int:number>/cancel/<int:attempt_id>/",
                wrap(
                    lambda request, object_id, number, attempt_id: cancel_attempt_view(
                        self, request, object_id, number, attempt_id
                    )
                ),
                name="runners_runner_cancel_attempt",
            ),
        ]
        return [*pages, *super().get_urls()]
