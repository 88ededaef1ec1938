"""The Task page's parts: its lease-aware list filters, the claimability cell, and its read-only inlines."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from django.contrib import admin
from django.db.models import Exists, OuterRef, Q, QuerySet
from django.http import HttpRequest
from django.urls import reverse
from django.utils.html import format_html
from django.utils.safestring import SafeString

from console.base import EMPTY, DefaultedListFilter, ReadOnlyInline, badge, lease_remaining, moment
from leases.models import Attempt, AttemptKind
from leases.selectors import (
    EFFECTIVE_STATUSES,
    HOLDS_SET,
    IN_PROGRESS,
    IN_REVIEW,
    LANDING,
    claimable_condition,
    live_attempts,
)
from leases.selectors.checks import check_row, checks_at, task_head
from leases.services.quarantine import QUARANTINE_REASON_PREFIX, is_quarantined
from ledger import clock
from ledger.models import RESOLVED_STATUSES, Task, TaskDependency, TaskStatus
from ledger.selectors import live_task_classes

EFFECTIVE_LABELS = {**dict(TaskStatus.choices), IN_PROGRESS: "In progress", IN_REVIEW: "In review", LANDING: "Landing"}
NOBODY = "__nobody__"
# Not a status of its own (SPEC §16.4): blocked with the reason the quarantine writes. The list filter's,
# the badge's and the dashboard tile's one test.
QUARANTINED = "quarantined"
QUARANTINED_TASKS = Q(status=TaskStatus.BLOCKED, blocked_reason__startswith=QUARANTINE_REASON_PREFIX)


def status_cell(task: Task) -> SafeString:
    """The effective status, saying what the bare word would hide.

    A cancelled task whose lease is still live is "cancelled (lease still
    live)", not "in progress"; a stored-ready task with unresolved blockers is
    "ready (blocked)" (amber), not a green Ready; the claimable column says by how many.
    """
    value = getattr(task, "effective_status", task.status)
    if value == TaskStatus.BLOCKED and is_quarantined(task):
        return badge(QUARANTINED, "Quarantined")
    if value == IN_PROGRESS and task.status == TaskStatus.CANCELLED:
        return badge("cancelled-live", "Cancelled (lease still live)")
    blockers = getattr(task, "blocked_by_count", 0) or 0
    if value == TaskStatus.READY and blockers:
        return badge(TaskStatus.BLOCKED, "Ready (blocked)")
    return badge(value, EFFECTIVE_LABELS.get(value, value))


def checks_panel(task: Task) -> dict[str, Any]:
    """SPEC §22: the latest check results at the task's head, and which checks its project requires."""
    head = task_head(task)
    results = [check_row(check) for check in checks_at(task.project_id, head)] if head else []
    return {"head": head, "results": results, "required": list(task.project.required_checks or [])}


def claimability_cell(task: Task) -> SafeString:
    """Can somebody claim this task now, and if not, why not (from `leases.selectors.with_claimability`)."""
    reserved = task.reserved_for.handle if task.reserved_for_id and task.reserved_for else None
    if getattr(task, "claimable", False):
        return badge("yes", f"only {reserved}") if reserved else badge("yes", "claimable")
    if getattr(task, "holder_attempt_id", None) is not None:
        return format_html('<span class="lh-muted">{}</span>', "held")
    if task.status != TaskStatus.READY:
        return format_html('<span class="lh-muted">{}</span>', EMPTY)
    blockers = getattr(task, "blocked_by_count", 0) or 0
    if blockers:
        return badge(TaskStatus.BLOCKED, f"blocked by {blockers}")
    if task.project.archived_at is not None:
        return badge("no", "project archived")
    if reserved:
        return badge("no", f"reserved for {reserved}, who cannot claim")
    return badge("no", "not claimable")


class WorkFilter(DefaultedListFilter):
    """The list opens on active work: neither done nor cancelled (a cancelled task still under a live lease shows).

    A stored or effective status filter, or a search, shows every task it selects.
    """

    title = "work"
    parameter_name = "work"
    default = "active"
    default_display = "Active (not done, not cancelled)"
    OVERRIDDEN_BY = ("status__exact", "effective_status", "q")

    def lookups(self, request: HttpRequest, model_admin: Any) -> list[tuple[str, str]]:
        return [("all", "All tasks"), ("closed", "Done or cancelled")]

    def queryset(self, request: HttpRequest, queryset: QuerySet[Any]) -> QuerySet[Any]:
        value = self.value()
        if value == "all":
            return queryset
        if value == "closed":
            return queryset.filter(status__in=RESOLVED_STATUSES)
        if any(request.GET.get(name) for name in self.OVERRIDDEN_BY):
            return queryset
        if request.method == "POST" and request.POST.get("action"):
            return queryset  # an action runs on the rows that were ticked, whatever the view was
        # Not closed, or held: an `IN` the planner hashes once, not the holder subquery per closed row
        # (100,000 tasks: 143 ms for the page's count alone, docs/performance.md).
        held = live_attempts(clock.now()).values("task_id")
        return queryset.filter(~Q(status__in=RESOLVED_STATUSES) | Q(pk__in=held))


class ClaimableFilter(admin.SimpleListFilter):
    """Claimability by the one rule (`leases.selectors.claimable_tasks(by_anyone=True)`, annotated per row)."""

    title = "claimable"
    parameter_name = "claimable"

    def lookups(self, request: HttpRequest, model_admin: Any) -> list[tuple[str, str]]:
        return [
            ("yes", "Claimable now"),
            ("no", "Not claimable"),
            ("blocked", "Ready but blocked by a dependency"),
            ("reserved", "Reserved for an agent"),
        ]

    def queryset(self, request: HttpRequest, queryset: QuerySet[Any]) -> QuerySet[Any]:
        value = self.value()
        if value == "yes":
            # The rule as a condition on the task's own columns (stored status ready first, so the ready
            # tasks' index serves it), not the per-row `claimable` annotation compared over every task.
            return queryset.filter(claimable_condition(now=clock.now(), agent=None, by_anyone=True, holds=HOLDS_SET))
        if value == "no":
            return queryset.filter(claimable=False)
        if value == "blocked":
            return queryset.filter(status=TaskStatus.READY, blocked_by_count__gt=0)
        if value == "reserved":
            return queryset.filter(reserved_for__isnull=False)
        return queryset


class EffectiveStatusFilter(admin.SimpleListFilter):
    """The `effective_status` annotation's rule, asked from the live attempts: `in_progress` exactly while a
    live lease of a work attempt exists, `in_review` a review's, `landing` a landing's; a stored status
    while no live lease exists.

    Read as `id IN (the live attempts' tasks)` (the partial index on active leases, a few hundred rows),
    not as the annotation compared per row: that evaluated the lease subqueries for every task (10-23 s at
    40,000 tasks on PostgreSQL, most of it JIT-compiling the scan; issue 33). `quarantined` selects the
    blocked tasks the quarantine blocked (SPEC §16.4).
    """

    title = "effective status"
    parameter_name = "effective_status"

    def lookups(self, request: HttpRequest, model_admin: Any) -> list[tuple[str, str]]:
        return [*((value, EFFECTIVE_LABELS[value]) for value in EFFECTIVE_STATUSES), (QUARANTINED, "Quarantined")]

    def queryset(self, request: HttpRequest, queryset: QuerySet[Any]) -> QuerySet[Any]:
        value = self.value()
        if value == QUARANTINED:
            return queryset.filter(QUARANTINED_TASKS)
        if value not in EFFECTIVE_STATUSES:
            return queryset
        live = live_attempts(clock.now())
        kinds = {IN_REVIEW: [AttemptKind.REVIEW], LANDING: [AttemptKind.LAND]}
        if value == IN_PROGRESS:
            return queryset.filter(pk__in=live.exclude(kind__in=[*kinds[IN_REVIEW], *kinds[LANDING]]).values("task_id"))
        if value in kinds:
            return queryset.filter(pk__in=live.filter(kind__in=kinds[value]).values("task_id"))
        return queryset.filter(status=value).exclude(pk__in=live.values("task_id"))


class TaskClassFilter(admin.AllValuesFieldListFilter):
    """The task classes of live work (tasks neither done nor cancelled) and the one chosen, not a DISTINCT
    over every task ever written (issue 33: it grew with history) nor over live work (a loose index scan:
    `ledger.selectors.live_task_classes`); the empty class is named "(no class)" instead of a link with
    no text (axe-core)."""

    CHOICES_SHOWN = 100

    def __init__(self, field: Any, request: HttpRequest, params: Any, model: Any, model_admin: Any, field_path: str):
        super().__init__(field, request, params, model, model_admin, field_path)
        live = live_task_classes(self.CHOICES_SHOWN)
        chosen = [value for value in (self.lookup_val or []) if value is not None]
        self.lookup_choices = sorted({*live, *chosen})  # type: ignore[assignment]  # Django's is any iterable

    def choices(self, changelist: Any) -> Iterator[Any]:
        for choice in super().choices(changelist):
            yield {**choice, "display": "(no class)"} if choice["display"] == "" else choice


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
        if value and "\x00" in value:
            return queryset.none()  # no handle holds a NUL, and PostgreSQL refuses one in a text parameter
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
        return lease_remaining(attempt.lease_expires_at, clock.now(), attempt.lease_seconds)

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
        live = live_attempts(clock.now()).filter(task=OuterRef("blocked_by"))
        return (
            super()
            .get_queryset(request)
            .select_related("blocked_by")
            .annotate(other_live=Exists(live))
            .order_by("removed_at", "blocked_by__number")
        )

    @admin.display(description="task")
    def blocker(self, dependency: TaskDependency) -> SafeString:
        task = dependency.blocked_by
        url = reverse("admin:ledger_task_change", args=[task.pk])
        return format_html('<a href="{}">{}</a> {}', url, task.key, task.title)

    @admin.display(description="its status")
    def blocker_status(self, dependency: TaskDependency) -> SafeString:
        """The other task's effective status: in progress while someone holds it."""
        other = dependency.blocked_by if self.fk_name == "task" else dependency.task
        if getattr(dependency, "other_live", False):
            return badge(IN_PROGRESS, EFFECTIVE_LABELS[IN_PROGRESS])
        return badge(other.status, other.get_status_display())


class DependentInline(DependencyInline):
    fk_name = "blocked_by"
    verbose_name = "dependent"
    verbose_name_plural = "Blocks"

    def get_queryset(self, request: HttpRequest) -> QuerySet[TaskDependency]:
        live = live_attempts(clock.now()).filter(task=OuterRef("task"))
        return (
            TaskDependency.objects.select_related("task")
            .filter(removed_at__isnull=True)
            .annotate(other_live=Exists(live))
            .order_by("task__number")
        )

    @admin.display(description="task")
    def blocker(self, dependency: TaskDependency) -> SafeString:
        task = dependency.task
        url = reverse("admin:ledger_task_change", args=[task.pk])
        return format_html('<a href="{}">{}</a> {}', url, task.key, task.title)
