"""Projects: listed read-only; added through `ledger.services.project_create`; the page shows the dependency graph.

The key prefix is derived from the slug when left empty (the service does it).
"""

from __future__ import annotations

import re
from typing import Any

from django.contrib import admin
from django.db.models import Case, QuerySet, Value, When
from django.forms import BaseForm
from django.http import HttpRequest, HttpResponse
from django.urls import reverse
from django.utils.html import format_html
from django.utils.safestring import SafeString

from console.base import ServiceFormAdmin, actor_of, badge
from console.reports.budgets import set_budget_action
from console.reports.graph import project_graph_panel
from ledger.models import Project
from ledger.services import project_create


def natural_key(text: str) -> list[tuple[int, int | str]]:
    """`q10` after `q2`: runs of digits compare as numbers, the rest as text."""
    return [(0, int(part)) if part.isdigit() else (1, part) for part in re.split(r"(\d+)", text) if part]


class ProjectAdmin(ServiceFormAdmin):
    list_display = ["slug", "name", "key_prefix", "repository", "required_isolation", "default_lease_seconds", "state"]
    search_fields = ["slug", "name"]
    ordering = ["slug"]
    add_fields = [
        "slug",
        "name",
        "key_prefix",
        "repository",
        "remote",
        "default_branch",
        "default_lease_seconds",
        "queue_wait_max_seconds",
        "required_isolation",
    ]
    view_fields = [
        *add_fields,
        "daily_budget_tokens",
        "daily_budget_cost_usd",
        "tasks_link",
        "landing_link",
        "created_at",
        "archived_at",
    ]
    actions = ["set_budget"]

    def get_queryset(self, request: HttpRequest) -> QuerySet[Project]:
        """Projects with their natural rank by slug (digits compared as numbers). Projects are few (a
        fleet has tens), so the rank is computed here and handed to the database as a CASE."""
        slugs = Project.objects.order_by().values_list("pk", "slug")
        ranked = sorted(slugs, key=lambda row: natural_key(row[1]))
        rank = Case(*(When(pk=pk, then=Value(position)) for position, (pk, _) in enumerate(ranked)), default=Value(0))
        # ModelAdmin.get_queryset, with the rank annotated before the ordering that names it.
        projects = self.model._default_manager.get_queryset().annotate(natural_rank=rank)
        ordering = self.get_ordering(request)
        return projects.order_by(*ordering) if ordering else projects

    def get_ordering(self, request: HttpRequest) -> Any:
        """The list: q0, q1, q2, q10 (natural order), not the text order q0, q1, q10, q11, q2. Elsewhere
        (another list's project filter reads this ordering without `get_queryset`) by slug."""
        match = getattr(request, "resolver_match", None)
        if match is not None and match.url_name == "ledger_project_changelist":
            return ["natural_rank", "slug"]
        return super().get_ordering(request)

    @admin.action(description="Set daily budget…", permissions=["operate"])
    def set_budget(self, request: HttpRequest, queryset: QuerySet[Project]) -> HttpResponse | None:
        return set_budget_action(self, request, queryset, action_name="set_budget")

    def change_view(
        self, request: HttpRequest, object_id: str, form_url: str = "", extra_context: dict[str, Any] | None = None
    ) -> HttpResponse:
        project = self.get_object(request, object_id)
        extra = dict(extra_context or {})
        if project is not None:
            extra["graph"] = project_graph_panel(project)
        return super().change_view(request, object_id, form_url, extra)

    def get_fields(self, request: HttpRequest, obj: Any = None) -> Any:
        return self.add_fields if obj is None else self.view_fields

    def get_readonly_fields(self, request: HttpRequest, obj: Any = None) -> Any:
        return [] if obj is None else self.view_fields

    def get_form(self, request: HttpRequest, obj: Any = None, change: bool = False, **kwargs: Any) -> Any:
        form = super().get_form(request, obj, change, **kwargs)
        if obj is None and "key_prefix" in form.base_fields:
            form.base_fields["key_prefix"].required = False
            form.base_fields[
                "key_prefix"
            ].help_text = "Prefix of task keys (WEB in WEB-412); derived from the slug if empty."
        return form

    def create_through_service(self, request: HttpRequest, form: BaseForm) -> Project:
        data = form.cleaned_data
        return project_create(
            slug=data["slug"],
            name=data["name"],
            key_prefix=data.get("key_prefix") or "",
            repository=data.get("repository") or "",
            remote=data.get("remote") or "",
            default_branch=data.get("default_branch") or "main",
            default_lease_seconds=data["default_lease_seconds"],
            queue_wait_max_seconds=data["queue_wait_max_seconds"],
            required_isolation=data["required_isolation"],
            actor=actor_of(request),
        )

    @admin.display(description="state", ordering="archived_at")
    def state(self, project: Project) -> SafeString:
        return badge("cancelled", "archived") if project.archived_at else badge("available", "active")

    @admin.display(description="tasks")
    @admin.display(description="Landing")
    def landing_link(self, project: Project) -> SafeString:
        url = reverse("admin:leasehold_landing", args=[project.slug])
        state = f"on: {project.land_method} onto {project.target_branch}" if project.landing_on else "off"
        return format_html('<a href="{}">Landing queue and settings</a> ({})', url, state)

    def tasks_link(self, project: Project) -> SafeString:
        url = reverse("admin:ledger_task_changelist") + f"?project__id__exact={project.pk}"
        return format_html('<a href="{}">Tasks of {}</a>', url, project.slug)
