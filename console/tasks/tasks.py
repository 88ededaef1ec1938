"""The Tasks page: the lease-aware list, the task's timeline, and the actions admins steer with.

Status actions (mark ready, reopen) go through the lease-aware
`leases.services.task_update`, so a change under someone's live lease is
recorded as `task.contested`. Cancel goes through `leases.services.task_cancel`:
a task under a live lease gets a confirmation page offering "also
force-release" (ticked by default; `console.tasks.cancel`). Force-release and
reassign go through `leases.services.task_force_release` / `task_reassign`
after a confirmation page that requires a reason and the tick "I have
confirmed the agent process is gone"; reassign offers only agents that may
claim the task (`console.tasks.revoke`). Planning (edit, dependencies,
reservation, the queue) is `console.tasks.planning`.

`inlines` and `actions` are plain lists: append to them.
"""

from __future__ import annotations

from typing import Any

from django.contrib import admin
from django.db.models import F, OuterRef, QuerySet, Subquery
from django.forms import BaseForm
from django.http import HttpRequest, HttpResponse
from django.urls import URLPattern, path, reverse
from django.utils.html import format_html, linebreaks
from django.utils.safestring import SafeString

from console.audit.comments import CommentInline
from console.audit.timeline import timeline_of
from console.base import (
    EMPTY,
    EstimatedCountMixin,
    ServiceFormAdmin,
    actor_of,
    badge,
    moment,
    plural,
    task_lease_left,
)
from console.reports.budgets import set_budget_action, spent_text
from console.reports.graph import task_graph_panel
from console.tasks.board import board_view
from console.tasks.cancel import TaskCancelMixin
from console.tasks.parts import (
    AttemptInline,
    ClaimableFilter,
    DependencyInline,
    DependentInline,
    EffectiveStatusFilter,
    HolderFilter,
    TaskClassFilter,
    WorkFilter,
    checks_panel,
    claimability_cell,
    status_cell,
)
from console.tasks.planning import TaskPlanningMixin, present_blockers, status_buttons
from console.tasks.quarantine import release_quarantined, release_view
from console.tasks.revoke import TaskRevokeMixin
from core.errors import LedgerError
from leases.models import PENDING_REVIEW_STATUSES, Attempt, ReviewRequest
from leases.selectors import live_attempts, with_claimability
from leases.services import task_update
from leases.services.quarantine import is_quarantined
from ledger import clock
from ledger.models import ALLOWED_TRANSITIONS, PathsMode, Task, TaskComment, TaskDependency, TaskStatus
from ledger.services import task_create, task_reservation_clear


# Never counted in full (`EstimatedCountMixin`): a COUNT over every task it selects grew with history
# (1.5-3.4 s of CPU at 1,000,000 tasks with the task-class DISTINCT); the pager says "more than N tasks".
class TaskAdmin(EstimatedCountMixin, TaskCancelMixin, TaskRevokeMixin, TaskPlanningMixin, ServiceFormAdmin):
    list_display = [
        "key",
        "title",
        "project",
        "effective_status_badge",
        "claimability",
        "holder",
        "lease_remaining_display",
        "priority",
        "task_class",
        "reserved_for",
        "updated",
    ]
    list_display_links = ["key", "title"]
    list_filter = [
        WorkFilter,
        "project",
        "status",
        EffectiveStatusFilter,
        ClaimableFilter,
        ("task_class", TaskClassFilter),
        HolderFilter,
    ]
    search_fields = ["=key", "title"]
    search_help_text = "A task key (exact, e.g. WEB-412) or words of its title."
    list_select_related = ["project", "reserved_for"]
    # By project id (the order projects were made in), then priority and number: the order of the index
    # `task_list_order`, walked and filtered, so a page reads about its own rows whatever the live work
    # (issue 33: ordered by the project's slug, the first 50 of 300k live tasks were sorted out of all).
    ordering = ["project_id", "-priority", "number", "-id"]
    list_per_page = 50
    inlines = [AttemptInline, DependencyInline, DependentInline]
    actions = [
        "mark_ready",
        "cancel",
        "reopen",
        "reassign",
        "force_release",
        "clear_reservation",
        "release_from_quarantine",
        "set_budget",
    ]
    change_form_template = "admin/ledger/task/change_form.html"

    add_fields = [
        "project",
        "title",
        "description",
        "acceptance_criteria",
        "status",
        "blocked_reason",
        "priority",
        "task_class",
        "requires",
        "budget_tokens",
        "budget_cost_usd",
        "paths",
        "paths_mode",
    ]
    # Status, holder, lease left, epoch, version, priority and reservation are in the summary above the form.
    view_fieldsets = [
        (
            None,
            {
                "fields": [
                    "key",
                    "project",
                    "title",
                    "status_badge",
                    "task_class",
                    "current_label",
                    "labels",
                    "requires",
                ]
            },
        ),
        ("Work", {"fields": ["description_text", "acceptance_criteria_text", "blocked_reason"]}),
        ("Record", {"fields": ["ready_since", "created_at", "updated_at"], "classes": ["collapse"]}),
        ("Budget and paths", {"fields": ["budget_tokens", "budget_cost_usd", "spent", "paths", "paths_mode"]}),
    ]

    def get_queryset(self, request: HttpRequest) -> QuerySet[Task]:
        now = clock.now()
        # The live lease's length, so that lease-left is coloured by the share left (console.base.lease_level).
        live_length = live_attempts(now).filter(task=OuterRef("pk")).values("lease_seconds")[:1]
        return with_claimability(super().get_queryset(request), now=now).annotate(
            holder_lease_seconds=Subquery(live_length)
        )

    # --- the add form and the read-only change page -------------------------

    def get_fieldsets(self, request: HttpRequest, obj: Any = None) -> Any:
        if obj is None:
            return [(None, {"fields": self.add_fields})]
        return self.view_fieldsets

    def get_readonly_fields(self, request: HttpRequest, obj: Any = None) -> Any:
        if obj is None:
            return []
        return [field for _, options in self.view_fieldsets for field in options["fields"]]

    def get_inlines(self, request: HttpRequest, obj: Any) -> Any:
        if obj is None:
            return []
        inlines: list[Any] = [AttemptInline]
        if TaskDependency.objects.filter(task=obj).exists():
            inlines.append(DependencyInline)
        if TaskDependency.objects.filter(blocked_by=obj, removed_at__isnull=True).exists():
            inlines.append(DependentInline)
        if TaskComment.objects.filter(task=obj).exists():
            inlines.append(CommentInline)  # SPEC §16.2 (console/audit/comments.py)
        return inlines

    def formfield_for_choice_field(self, db_field: Any, request: HttpRequest, **kwargs: Any) -> Any:
        if db_field.name == "status":
            kwargs["choices"] = [
                (value, label)
                for value, label in TaskStatus.choices
                if value in (TaskStatus.OPEN, TaskStatus.READY, TaskStatus.BLOCKED)
            ]
        return super().formfield_for_choice_field(db_field, request, **kwargs)

    def create_through_service(self, request: HttpRequest, form: BaseForm) -> Task:
        data = form.cleaned_data
        return task_create(
            project=data["project"],
            title=data["title"],
            actor=actor_of(request),
            description=data.get("description", ""),
            acceptance_criteria=data.get("acceptance_criteria", ""),
            status=data.get("status") or TaskStatus.OPEN,
            priority=data.get("priority") or 0,
            task_class=data.get("task_class", ""),
            requires=data.get("requires") or [],
            blocked_reason=data.get("blocked_reason", ""),
            budget_tokens=data.get("budget_tokens"),
            budget_cost_usd=data.get("budget_cost_usd"),
            paths=data.get("paths") or [],
            paths_mode=data.get("paths_mode") or PathsMode.EXCLUSIVE,
        )

    def change_view(
        self, request: HttpRequest, object_id: str, form_url: str = "", extra_context: dict[str, Any] | None = None
    ) -> HttpResponse:
        task = self.get_object(request, object_id)
        extra = dict(extra_context or {})
        if task is not None:
            extra.update(
                timeline=timeline_of(task),
                events_url=reverse("admin:ledger_event_changelist") + f"?task__id__exact={task.pk}",
                can_operate=self.has_operate_permission(request),
                has_live_lease=getattr(task, "holder_attempt_id", None) is not None,
                effective_badge=self.effective_status_badge(task),
                claimability=claimability_cell(task),
                lease_left=task_lease_left(task, clock.now()),
                status_buttons=status_buttons(task),
                can_cancel=TaskStatus.CANCELLED in ALLOWED_TRANSITIONS[task.status],
                quarantined=is_quarantined(task),
                review_request_id=ReviewRequest.objects.filter(task=task, status__in=PENDING_REVIEW_STATUSES)
                .values_list("pk", flat=True)
                .first(),
                blockers=present_blockers(task, now=clock.now()),
                queue_url=reverse("admin:ledger_task_queue", args=[task.project.slug]),
                board_url=reverse("admin:ledger_task_board", args=[task.project.slug]),
                graph=task_graph_panel(task),
                checks=checks_panel(task),
            )
        return super().change_view(request, object_id, form_url, extra)

    # --- columns ------------------------------------------------------------

    @admin.display(description="status", ordering="effective_status")
    def effective_status_badge(self, task: Task) -> SafeString:
        return status_cell(task)

    @admin.display(description="claimable", ordering="claimable")
    def claimability(self, task: Task) -> SafeString:
        return claimability_cell(task)

    @admin.display(description="updated (UTC)", ordering="updated_at")
    def updated(self, task: Task) -> str:
        return moment(task.updated_at)

    @admin.display(description="stored status", ordering="status")
    def status_badge(self, task: Task) -> SafeString:
        return badge(task.status, task.get_status_display())

    @admin.display(description="holder", ordering="holder_handle")
    def holder(self, task: Task) -> str:
        return getattr(task, "holder_handle", None) or EMPTY

    # Soonest-expiring first, tasks without a live lease last, on PostgreSQL and SQLite alike.
    @admin.display(description="lease left", ordering=F("lease_expires_at").asc(nulls_last=True))
    def lease_remaining_display(self, task: Task) -> SafeString:
        return task_lease_left(task, clock.now())

    @admin.display(description="label")
    def current_label(self, task: Task) -> SafeString:
        attempt_id = getattr(task, "holder_attempt_id", None)
        label = Attempt.objects.filter(pk=attempt_id).values_list("label", flat=True).first() if attempt_id else None
        return format_html('<span class="lh-mono">{}</span>', label) if label else format_html("{}", EMPTY)

    @admin.display(description="description")
    def description_text(self, task: Task) -> SafeString:
        return SafeString(linebreaks(task.description, autoescape=True)) if task.description else badge(None)

    @admin.display(description="acceptance criteria")
    def acceptance_criteria_text(self, task: Task) -> SafeString:
        text = task.acceptance_criteria
        return SafeString(linebreaks(text, autoescape=True)) if text else badge(None)

    @admin.display(description="spent")
    def spent(self, task: Task) -> str:
        return spent_text(task)

    @admin.action(description="Set budget…", permissions=["operate"])
    def set_budget(self, request: HttpRequest, queryset: QuerySet[Task]) -> HttpResponse | None:
        return set_budget_action(self, request, queryset, action_name="set_budget")

    # --- status actions -----------------------------------------------------

    def _set_status(self, request: HttpRequest, queryset: QuerySet[Task], *, verb: str, target: Any) -> None:
        actor = actor_of(request)
        changed: list[str] = []
        unchanged: list[str] = []
        refused: list[str] = []
        contested = 0
        for task in queryset:
            new_status = target(task)
            if new_status is None:
                refused.append(f"{task.key}: it is {task.status}; only done or cancelled tasks reopen.")
                continue
            if new_status == task.status:
                unchanged.append(task.key)
                continue
            try:
                result = task_update(task=task, actor=actor, changes={"status": new_status})
            except LedgerError as exc:
                refused.append(f"{task.key}: {exc.message}")
                continue
            if "status" not in result.changed:
                unchanged.append(task.key)
                continue
            if getattr(task, "holder_handle", None):
                contested += 1
            changed.append(task.key)
            self.log_change(request, result.task, f"Status {task.status} → {new_status} (admin action: {verb}).")
        done = f"{plural(len(changed), 'task')} {verb}." if changed else None
        if done and contested:
            done += f" {plural(contested, 'was', 'were')} under a live lease: recorded as contested."
        skipped = (
            [f"{plural(len(unchanged), 'task')} already {verb}: {', '.join(unchanged[:10])}."] if unchanged else []
        )
        self.report(request, done=done, skipped=skipped, refused=refused)

    @admin.action(description="Mark ready", permissions=["operate"])
    def mark_ready(self, request: HttpRequest, queryset: QuerySet[Task]) -> None:
        self._set_status(request, queryset, verb="marked ready", target=lambda task: TaskStatus.READY)

    @admin.action(description="Cancel (never deletes)…", permissions=["operate"])
    def cancel(self, request: HttpRequest, queryset: QuerySet[Task]) -> HttpResponse | None:
        return self._cancel_flow(request, list(queryset), action_name="cancel")

    @admin.action(description="Reopen (done → ready, cancelled → open)", permissions=["operate"])
    def reopen(self, request: HttpRequest, queryset: QuerySet[Task]) -> None:
        reopened = {TaskStatus.DONE: TaskStatus.READY, TaskStatus.CANCELLED: TaskStatus.OPEN}
        self._set_status(request, queryset, verb="reopened", target=lambda task: reopened.get(task.status))

    @admin.action(description="Clear reservation (any agent of the project may claim)", permissions=["operate"])
    def clear_reservation(self, request: HttpRequest, queryset: QuerySet[Task]) -> None:
        actor = actor_of(request)
        cleared: list[str] = []
        for task in queryset.filter(reserved_for__isnull=False).select_related("reserved_for"):
            previous = task.reserved_for.handle if task.reserved_for else EMPTY
            updated = task_reservation_clear(task=task, actor=actor, reason="cleared in the admin")
            self.log_change(request, updated, f"Cleared the reservation for {previous}.")
            cleared.append(task.key)
        self.report(
            request,
            done=f"Cleared the reservation of {plural(len(cleared), 'task')}." if cleared else None,
            skipped=[] if cleared else ["None of the selected tasks was reserved."],
        )

    @admin.action(description="Release from quarantine", permissions=["operate"])
    def release_from_quarantine(self, request: HttpRequest, queryset: QuerySet[Task]) -> None:
        release_quarantined(self, request, queryset)  # SPEC §16.4 (console/tasks/quarantine.py)

    # --- the task's own pages: force-release, reassign, cancel, planning --------

    def get_urls(self) -> list[URLPattern]:
        wrap = self.admin_site.admin_view
        own = [
            path("<path:object_id>/force-release/", wrap(self.force_release_view), name="ledger_task_force_release"),
            path("<path:object_id>/reassign/", wrap(self.reassign_view), name="ledger_task_reassign"),
            path("<path:object_id>/cancel/", wrap(self.cancel_view), name="ledger_task_cancel"),
            path("board/", wrap(lambda request: board_view(self, request)), name="ledger_task_board_index"),
            path(
                "board/<slug:slug>/",
                wrap(lambda request, slug: board_view(self, request, slug)),
                name="ledger_task_board",
            ),
            path(
                "<path:object_id>/release-quarantine/",
                wrap(lambda request, object_id: release_view(self, request, object_id)),
                name="ledger_task_release_quarantine",
            ),
            *self.planning_urls(),
        ]
        return own + super().get_urls()
