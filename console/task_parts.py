"""The Task page's parts: its lease-aware list filters and its read-only inlines (attempts, dependencies)."""

from __future__ import annotations

from typing import Any

from django.contrib import admin
from django.db.models import QuerySet
from django.http import HttpRequest
from django.urls import reverse
from django.utils.html import format_html
from django.utils.safestring import SafeString

from console.base import EMPTY, ReadOnlyInline, badge, lease_remaining, moment
from leases.models import Attempt
from leases.selectors import EFFECTIVE_STATUSES, IN_PROGRESS, IN_REVIEW, live_attempts
from ledger import clock
from ledger.models import TaskDependency, TaskStatus

EFFECTIVE_LABELS = {**dict(TaskStatus.choices), IN_PROGRESS: "In progress", IN_REVIEW: "In review"}
NOBODY = "__nobody__"


class EffectiveStatusFilter(admin.SimpleListFilter):
    """Filters on the `effective_status` annotation: `in_progress` exactly while a lease is live."""

    title = "effective status"
    parameter_name = "effective_status"

    def lookups(self, request: HttpRequest, model_admin: Any) -> list[tuple[str, str]]:
        return [(value, EFFECTIVE_LABELS[value]) for value in EFFECTIVE_STATUSES]

    def queryset(self, request: HttpRequest, queryset: QuerySet[Any]) -> QuerySet[Any]:
        value = self.value()
        return queryset.filter(effective_status=value) if value in EFFECTIVE_STATUSES else queryset


class HolderFilter(admin.SimpleListFilter):
    """Who holds the live lease; the choices are the agents holding one now."""

    title = "holder"
    parameter_name = "holder"

    def lookups(self, request: HttpRequest, model_admin: Any) -> list[tuple[str, str]]:
        handles = (
            live_attempts(clock.now())
            .order_by("agent__handle")
            .values_list("agent__handle", flat=True)
            .distinct()[:100]
        )
        return [(NOBODY, "Nobody (no live lease)"), *((handle, handle) for handle in handles)]

    def queryset(self, request: HttpRequest, queryset: QuerySet[Any]) -> QuerySet[Any]:
        value = self.value()
        if value == NOBODY:
            return queryset.filter(holder_handle__isnull=True)
        return queryset.filter(holder_handle=value) if value else queryset


class AttemptInline(ReadOnlyInline):
    model = Attempt
    fk_name = "task"
    verbose_name_plural = "Attempts (newest first)"
    readonly_fields = (
        "attempt_link",
        "agent",
        "epoch",
        "status_badge",
        "claimed",
        "lease_or_finish",
        "outcome",
    )
    fields = readonly_fields
    ordering = ["-id"]

    def get_queryset(self, request: HttpRequest) -> QuerySet[Attempt]:
        return super().get_queryset(request).select_related("agent")

    @admin.display(description="attempt")
    def attempt_link(self, attempt: Attempt) -> SafeString:
        url = reverse("admin:leases_attempt_change", args=[attempt.pk])
        return format_html('<a href="{}">#{}</a>', url, attempt.pk)

    @admin.display(description="status")
    def status_badge(self, attempt: Attempt) -> SafeString:
        return badge(attempt.status)

    @admin.display(description="claimed")
    def claimed(self, attempt: Attempt) -> str:
        return moment(attempt.claimed_at)

    @admin.display(description="lease left / ended")
    def lease_or_finish(self, attempt: Attempt) -> Any:
        if attempt.finished_at is not None:
            return moment(attempt.finished_at)
        return lease_remaining(attempt.lease_expires_at, clock.now())

    @admin.display(description="outcome")
    def outcome(self, attempt: Attempt) -> str:
        return (
            attempt.failure_reason_code
            or attempt.interruption_reason_code
            or (f"revoked by {attempt.revoked_by}: {attempt.revoke_reason}" if attempt.revoked_by else "")
            or (attempt.result_summary[:160] if attempt.result_summary else EMPTY)
        )


class DependencyInline(ReadOnlyInline):
    model = TaskDependency
    fk_name = "task"
    verbose_name = "blocker"
    verbose_name_plural = "Blocked by"
    readonly_fields = (
        "blocker",
        "blocker_status",
        "created_at",
        "removed_at",
    )
    fields = readonly_fields

    def get_queryset(self, request: HttpRequest) -> QuerySet[TaskDependency]:
        return super().get_queryset(request).select_related("blocked_by").order_by("removed_at", "blocked_by__number")

    @admin.display(description="task")
    def blocker(self, dependency: TaskDependency) -> SafeString:
        task = dependency.blocked_by
        url = reverse("admin:ledger_task_change", args=[task.pk])
        return format_html('<a href="{}">{}</a> {}', url, task.key, task.title)

    @admin.display(description="its status")
    def blocker_status(self, dependency: TaskDependency) -> SafeString:
        return badge(dependency.blocked_by.status)


class DependentInline(DependencyInline):
    fk_name = "blocked_by"
    verbose_name = "dependent"
    verbose_name_plural = "Blocks"

    def get_queryset(self, request: HttpRequest) -> QuerySet[TaskDependency]:
        return TaskDependency.objects.select_related("task").filter(removed_at__isnull=True).order_by("task__number")

    @admin.display(description="task")
    def blocker(self, dependency: TaskDependency) -> SafeString:
        task = dependency.task
        url = reverse("admin:ledger_task_change", args=[task.pk])
        return format_html('<a href="{}">{}</a> {}', url, task.key, task.title)

    @admin.display(description="its status")
    def blocker_status(self, dependency: TaskDependency) -> SafeString:
        return badge(dependency.task.status)
