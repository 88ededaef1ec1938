"""Environments: the mapping of names to sandboxes, their allocation history, and the admin's levers.

Adding goes through `environments.services.environment_create`, editing the
mapping (kind, isolation, resources, credentials reference) through
`environment_update`, status changes (quarantine, retire, make available)
through `environment_set_status`; releasing a stale allocation goes through
`leases.services.allocation_release`, for the allocations
`leases.selectors.releasable` allows. Quarantining asks for a reason on a
confirmation page.
"""

from __future__ import annotations

import json
from typing import Any

from django.contrib import admin
from django.db.models import OuterRef, QuerySet, Subquery
from django.forms import BaseForm
from django.http import HttpRequest, HttpResponse
from django.urls import reverse
from django.utils.html import format_html
from django.utils.safestring import SafeString

from console.base import EMPTY, ConfirmationForm, ServiceFormAdmin, actor_of, badge, plural
from console.confirm import Confirmation, is_confirmed, render_confirmation
from core.errors import LedgerError
from environments.models import Environment, EnvironmentStatus
from environments.services import environment_create, environment_set_status, environment_update
from leases.models import Allocation, AllocationStatus
from leases.selectors import releasable
from leases.services import allocation_release

ALLOCATION_HISTORY_SHOWN = 50


def _live_allocation() -> QuerySet[Allocation]:
    return Allocation.objects.filter(environment=OuterRef("pk")).exclude(status=AllocationStatus.RELEASED)


class EnvironmentAdmin(ServiceFormAdmin):
    list_display = [
        "name",
        "project",
        "kind",
        "isolation",
        "status_badge",
        "allocation",
        "credentials_ref",
        "updated_at",
    ]
    list_filter = ["project", "kind", "isolation", "status"]
    search_fields = ["name", "credentials_ref"]
    list_select_related = ["project"]
    ordering = ["project", "name"]
    actions = ["release_stale_allocations", "quarantine", "retire", "make_available"]
    change_form_template = "admin/environments/environment/change_form.html"
    add_fields = ["project", "name", "kind", "isolation", "resources", "credentials_ref"]
    mapping_fields = ["kind", "isolation", "resources", "credentials_ref"]
    view_fields = [
        "name",
        "project",
        "kind",
        "isolation",
        "status_badge",
        "status_reason",
        "resources_json",
        "credentials_ref",
        "created_at",
        "updated_at",
    ]

    def get_queryset(self, request: HttpRequest) -> QuerySet[Environment]:
        live = _live_allocation().order_by("-id")
        return (
            super()
            .get_queryset(request)
            .annotate(
                live_allocation_status=Subquery(live.values("status")[:1]),
                live_task_key=Subquery(live.values("attempt__task__key")[:1]),
                live_agent=Subquery(live.values("attempt__agent__handle")[:1]),
            )
        )

    def get_readonly_fields(self, request: HttpRequest, obj: Any = None) -> Any:
        if obj is None:
            return []
        if self.has_change_permission(request, obj):
            return [name for name in self.view_fields if name not in self.mapping_fields]
        return self.view_fields

    def get_fields(self, request: HttpRequest, obj: Any = None) -> Any:
        if obj is None:
            return self.add_fields
        if self.has_change_permission(request, obj):
            return [name if name != "resources_json" else "resources" for name in self.view_fields]
        return self.view_fields

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        """The mapping (kind, isolation, resources, credentials reference) is editable by Ledger admins."""
        return self.has_operate_permission(request)

    def update_through_service(self, request: HttpRequest, obj: Any, form: BaseForm) -> Environment:
        changes = {name: form.cleaned_data[name] for name in self.mapping_fields if name in form.cleaned_data}
        if changes.get("resources") is None and "resources" in changes:
            changes["resources"] = {}
        return environment_update(environment=obj, actor=actor_of(request), changes=changes)

    def create_through_service(self, request: HttpRequest, form: BaseForm) -> Environment:
        data = form.cleaned_data
        return environment_create(
            project=data["project"],
            name=data["name"],
            kind=data["kind"],
            isolation=data["isolation"],
            resources=data.get("resources") or {},
            credentials_ref=data.get("credentials_ref", ""),
            actor=actor_of(request),
        )

    def change_view(
        self, request: HttpRequest, object_id: str, form_url: str = "", extra_context: dict[str, Any] | None = None
    ) -> HttpResponse:
        allocations = (
            Allocation.objects.filter(environment_id=object_id)
            .select_related("attempt__task", "attempt__agent")
            .order_by("-id")[:ALLOCATION_HISTORY_SHOWN]
        )
        extra = {"allocations": list(allocations), "history_limit": ALLOCATION_HISTORY_SHOWN, **(extra_context or {})}
        return super().change_view(request, object_id, form_url, extra)

    # --- columns ------------------------------------------------------------

    @admin.display(description="status", ordering="status")
    def status_badge(self, environment: Environment) -> SafeString:
        return badge(environment.status, environment.get_status_display())

    @admin.display(description="allocation")
    def allocation(self, environment: Environment) -> SafeString | str:
        status = getattr(environment, "live_allocation_status", None)
        if not status:
            return EMPTY
        return format_html(
            "{} {} · {}",
            badge(status),
            getattr(environment, "live_task_key", ""),
            getattr(environment, "live_agent", ""),
        )

    @admin.display(description="resources")
    def resources_json(self, environment: Environment) -> SafeString:
        text = json.dumps(environment.resources, indent=2, sort_keys=True)
        return format_html('<pre class="lh-mono">{}</pre>', text)

    # --- actions ------------------------------------------------------------

    @admin.action(description="Release stale allocations", permissions=["operate"])
    def release_stale_allocations(self, request: HttpRequest, queryset: QuerySet[Environment]) -> None:
        actor = actor_of(request)
        released: list[str] = []
        kept: list[str] = []
        refused: list[str] = []
        for environment in queryset:
            live = Allocation.objects.filter(environment=environment).exclude(status=AllocationStatus.RELEASED)
            for allocation in live.select_related("attempt__task"):
                if not releasable(allocation):
                    kept.append(f"{environment.name} (held by a live attempt)")
                    continue
                try:
                    allocation_release(allocation=allocation, actor=actor)
                except LedgerError as exc:
                    refused.append(f"{environment.name}: {exc.message}")
                    continue
                released.append(environment.name)
                self.log_change(
                    request,
                    environment,
                    f"Released the {allocation.status} allocation of attempt {allocation.attempt_id} "
                    f"({allocation.attempt.task.key}).",
                )
        self.report(
            request,
            done=f"Released {plural(len(released), 'allocation')}: {', '.join(released)}." if released else None,
            skipped=([f"Kept: {', '.join(kept)}."] if kept else [])
            + ([] if released or kept or refused else ["No stale allocation to release."]),
            refused=refused,
        )

    @admin.action(description="Quarantine (keep aside for inspection)…", permissions=["operate"])
    def quarantine(self, request: HttpRequest, queryset: QuerySet[Environment]) -> HttpResponse | None:
        environments = list(queryset)
        form = ConfirmationForm(request.POST if is_confirmed(request) else None)
        if form.is_bound and form.is_valid():
            self._set_status(request, environments, EnvironmentStatus.QUARANTINED, reason=form.cleaned_data["reason"])
            return None
        confirmation = Confirmation(
            title=f"Quarantine {plural(len(environments), 'environment')}",
            intro="A quarantined environment is never allocated until it is made available again. "
            "Nothing in it is touched: it stays as it is for inspection.",
            submit_label="Yes, quarantine",
            columns=["Environment", "Project", "Kind", "Status", "Allocation"],
            rows=[
                (e, [e.name, e.project.slug, e.get_kind_display(), self.status_badge(e), self.allocation(e)])
                for e in environments
            ],
        )
        return render_confirmation(
            request,
            self,
            confirmation=confirmation,
            form=form,
            action_name="quarantine",
            objects=environments,
            cancel_url=reverse("admin:environments_environment_changelist"),
        )

    @admin.action(description="Retire", permissions=["operate"])
    def retire(self, request: HttpRequest, queryset: QuerySet[Environment]) -> None:
        self._set_status(request, list(queryset), EnvironmentStatus.RETIRED, reason="Retired from the admin.")

    @admin.action(description="Make available again", permissions=["operate"])
    def make_available(self, request: HttpRequest, queryset: QuerySet[Environment]) -> None:
        self._set_status(request, list(queryset), EnvironmentStatus.AVAILABLE, reason="")

    def _set_status(self, request: HttpRequest, environments: list[Environment], status: str, *, reason: str) -> None:
        actor = actor_of(request)
        changed: list[str] = []
        unchanged: list[str] = []
        refused: list[str] = []
        for environment in environments:
            if environment.status == status:
                unchanged.append(environment.name)
                continue
            try:
                environment_set_status(environment=environment, status=status, actor=actor, reason=reason)
            except LedgerError as exc:
                refused.append(f"{environment.name}: {exc.message}")
                continue
            changed.append(environment.name)
            note = f" Reason: {reason}" if reason else ""
            self.log_change(request, environment, f"Status {environment.status} → {status}.{note}")
        self.report(
            request,
            done=f"{plural(len(changed), 'environment')} now {status}: {', '.join(changed)}." if changed else None,
            skipped=[f"Already {status}: {', '.join(unchanged)}."] if unchanged else [],
            refused=refused,
        )
