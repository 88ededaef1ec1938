"""Attempts: a read-only audit of every claim, with its notes and environment allocations.

Attempts are never changed here: an admin revokes one through the task's
force-release or reassign (`console.tasks.revoke`).
"""

from __future__ import annotations

from typing import Any

from django.contrib import admin
from django.contrib.admin.utils import flatten_fieldsets
from django.db.models import QuerySet
from django.http import HttpRequest, HttpResponse
from django.urls import reverse
from django.utils.html import format_html, linebreaks
from django.utils.safestring import SafeString

from console.base import (
    EMPTY,
    EstimatedCountMixin,
    ReadOnlyAdmin,
    ReadOnlyInline,
    badge,
    lease_remaining,
    moment,
    task_link,
)
from console.fleet.reservations import paths_cell
from leases.models import Allocation, Attempt, AttemptStatus, Note, PathReservation
from ledger import clock


class NoteInline(ReadOnlyInline):
    model = Note
    readonly_fields = (
        "created_at",
        "kind_badge",
        "important",
        "content_text",
        "next_steps_text",
    )
    fields = readonly_fields
    ordering = ["id"]
    verbose_name_plural = "Notes (oldest first)"

    @admin.display(description="kind")
    def kind_badge(self, note: Note) -> SafeString:
        return format_html('<span class="lh-mono">{}</span>', note.kind)

    @admin.display(description="content")
    def content_text(self, note: Note) -> SafeString:
        return SafeString(linebreaks(note.content, autoescape=True))

    @admin.display(description="next steps")
    def next_steps_text(self, note: Note) -> str:
        return "; ".join(note.next_steps) or EMPTY


class AllocationInline(ReadOnlyInline):
    model = Allocation
    readonly_fields = (
        "environment",
        "status_badge",
        "allocated_at",
        "released_at",
    )
    fields = readonly_fields
    verbose_name_plural = "Environment allocations"

    def get_queryset(self, request: HttpRequest) -> QuerySet[Allocation]:
        return super().get_queryset(request).select_related("environment")

    @admin.display(description="status")
    def status_badge(self, allocation: Allocation) -> SafeString:
        return badge(allocation.status)


def attempt_title(attempt: Attempt) -> str:
    """`WEB-412 · attempt 3 (epoch 4)`: the task's key and the attempt's number among that task's attempts."""
    number = Attempt.objects.filter(task_id=attempt.task_id, pk__lte=attempt.pk).count()
    return f"{attempt.task.key} · attempt {number} (epoch {attempt.epoch})"


class AttemptAdmin(EstimatedCountMixin, ReadOnlyAdmin):
    list_display = ["id", "task_key", "agent", "epoch", "status_badge", "claimed_at", "lease", "renew_count", "branch"]
    list_display_links = ["id"]
    list_filter = ["status", "task__project", "agent"]
    search_fields = ["=task__key", "=branch", "label"]
    search_help_text = "A task key or branch (exact), or part of a label."
    list_select_related = ["task", "agent"]
    ordering = ["-id"]
    inlines = [NoteInline, AllocationInline]
    change_form_template = "admin/leases/attempt/change_form.html"
    fieldsets = [
        (None, {"fields": ["task_key", "agent", "epoch", "status_badge", "label_text", "branch", "base_commit"]}),
        (
            "Git",
            {
                "fields": [
                    "head_commit",
                    "commits_ahead",
                    "dirty",
                    "pushed",
                    "worktree_path",
                    "host",
                    "seen_commits_ahead",
                ],
                "description": "As the holder reported them; seen commits ahead is what reconciliation saw.",
            },
        ),
        (
            "Lease",
            {
                "fields": [
                    "lease_seconds",
                    "claimed_at",
                    "lease",
                    "last_renewed_at",
                    "last_worked_at",
                    "renew_count",
                    "finished_at",
                ]
            },
        ),
        (
            "Outcome",
            {
                "fields": [
                    "result_summary",
                    "next_steps_text",
                    "failure_reason_code",
                    "interruption_reason_code",
                    "revoked_by",
                    "revoke_reason",
                ]
            },
        ),
        (
            "Paths",
            {
                "fields": ["reserved_paths"],
                "description": "Reserved while this attempt's lease is live (SPEC §19); overlapping claims are refused",
            },
        ),
        ("Claim", {"fields": ["task_version_at_claim", "event_id_at_claim"], "classes": ["collapse"]}),
    ]
    readonly_fields = flatten_fieldsets(fieldsets)

    def get_inlines(self, request: HttpRequest, obj: Any) -> Any:
        """Only the inlines that have rows: an attempt without notes shows no empty notes table."""
        if obj is None:
            return []
        shown: list[Any] = []
        if Note.objects.filter(attempt=obj).exists():
            shown.append(NoteInline)
        if Allocation.objects.filter(attempt=obj).exists():
            shown.append(AllocationInline)
        return shown

    def change_view(
        self, request: HttpRequest, object_id: str, form_url: str = "", extra_context: dict[str, Any] | None = None
    ) -> HttpResponse:
        events_url = reverse("admin:ledger_event_changelist") + f"?attempt_id={object_id}"
        extra: dict[str, Any] = {"events_url": events_url}
        attempt = self.get_object(request, object_id)
        if attempt is not None:
            # Named as people say it: the task's key and which of its attempts (not database ids).
            extra["title"] = f"{attempt_title(attempt)}: {attempt.status}, by {attempt.agent.handle}"
            extra["subtitle"] = None
        return super().change_view(request, object_id, form_url, {**extra, **(extra_context or {})})

    @admin.display(description="task", ordering="task__key")
    def task_key(self, attempt: Attempt) -> SafeString:
        return task_link(attempt.task_id, attempt.task.key)

    @admin.display(description="status", ordering="status")
    def status_badge(self, attempt: Attempt) -> SafeString:
        return badge(attempt.status)

    @admin.display(description="lease left / ended", ordering="lease_expires_at")
    def lease(self, attempt: Attempt) -> Any:
        if attempt.status != AttemptStatus.ACTIVE:
            return moment(attempt.finished_at)
        return lease_remaining(attempt.lease_expires_at, clock.now(), attempt.lease_seconds)

    @admin.display(description="label")
    def label_text(self, attempt: Attempt) -> SafeString:
        return format_html('<span class="lh-mono">{}</span>', attempt.label)

    @admin.display(description="next steps")
    def next_steps_text(self, attempt: Attempt) -> str:
        return "; ".join(attempt.next_steps) or EMPTY

    @admin.display(description="reserved paths")
    def reserved_paths(self, attempt: Attempt) -> SafeString:
        reservation = PathReservation.objects.filter(attempt=attempt).first()
        if reservation is None:
            return format_html('<span class="lh-muted">{}</span>', "none reserved")
        now = clock.now()
        live = attempt.status == AttemptStatus.ACTIVE and attempt.lease_expires_at > now
        state = "live" if live else "ended with the lease"
        url = reverse("admin:leases_pathreservation_changelist") + f"?live=all&q={attempt.task.key}"
        return format_html(
            '{} <span class="lh-muted">({}, {}; <a href="{}">all reservations</a>)</span>',
            paths_cell(reservation.paths),
            reservation.mode,
            state,
            url,
        )
