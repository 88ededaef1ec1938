"""Allocations: the read-only history of environment leases, and releasing the stale or leaked ones.

Releasing goes through `leases.services.allocation_release`; which allocations
may be released is `leases.selectors.releasable` (never a live attempt's), the
same rule the service enforces.
"""

from __future__ import annotations

from django.contrib import admin
from django.db.models import QuerySet
from django.http import HttpRequest
from django.urls import reverse
from django.utils.html import format_html
from django.utils.safestring import SafeString

from console.base import EstimatedCountMixin, LeaseholdModelAdmin, actor_of, badge, plural, task_link
from core.errors import LedgerError
from leases.models import Allocation, AllocationStatus
from leases.selectors import releasable
from leases.services import allocation_release


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
        return task_link(allocation.attempt.task_id, allocation.attempt.task.key)

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
