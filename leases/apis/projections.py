"""The API's projections of tasks and attempts, built as plain dicts (hot paths), and the
serializers that document them in the OpenAPI schema.

Compact (lists, claims, finishes): never a description or acceptance criteria.
Full: single-object reads only.
"""

from __future__ import annotations

from typing import Any

from rest_framework import serializers

from config.errors import ValidationFailed
from leases.labels import parse_label
from leases.models import Allocation, Attempt, AttemptStatus
from leases.selectors import EFFECTIVE_STATUSES, unresolved_blockers_of
from ledger import clock
from ledger.models import Task, TaskStatus

RESULT_SUMMARY_SHOWN_CHARS = 4000
# The row of a compact task: `with_compact_state(...).values(*COMPACT_TASK_FIELDS)`.
COMPACT_TASK_FIELDS = (
    "id",
    "key",
    "title",
    "status",
    "effective_status",
    "priority",
    "task_class",
    "version",
    "epoch",
    "holder_handle",
    "lease_expires_at",
    "blocked_by_count",
)


def compact_task(row: dict[str, Any]) -> dict[str, Any]:
    """A `with_compact_state(...).values(*COMPACT_TASK_FIELDS)` row as the compact list item."""
    return {
        "key": row["key"],
        "title": row["title"],
        "status": row["status"],
        "effective_status": row["effective_status"],
        "priority": row["priority"],
        "task_class": row["task_class"],
        "version": row["version"],
        "epoch": row["epoch"],
        "holder": row["holder_handle"],
        "lease_expires_at": clock.iso(row["lease_expires_at"]),
        "blocked_by": row["blocked_by_count"],
    }


def held_compact_task(task: Task, attempt: Attempt) -> dict[str, Any]:
    """The compact item of a task just claimed by `attempt`, without a query.

    A claim succeeds only on a task without unresolved blockers, and the
    claim's transaction saw that, so `blocked_by` is 0.
    """
    return compact_task(
        {
            "key": task.key,
            "title": task.title,
            "status": task.status,
            "effective_status": "in_progress",
            "priority": task.priority,
            "task_class": task.task_class,
            "version": task.version,
            "epoch": task.epoch,
            "holder_handle": attempt.agent.handle,
            "lease_expires_at": attempt.lease_expires_at,
            "blocked_by_count": 0,
        }
    )


def ended_task_row(task: Task) -> dict[str, Any]:
    """The compact row of `task` as its attempt just ended: the state of that commit.

    No live lease exists then (one active attempt per task, and it just
    ended), so the lease columns need no subqueries; only the blocker count
    is read.
    """
    return {
        "id": task.pk,
        "key": task.key,
        "title": task.title,
        "status": task.status,
        "effective_status": task.status,
        "priority": task.priority,
        "task_class": task.task_class,
        "version": task.version,
        "epoch": task.epoch,
        "holder_handle": None,
        "lease_expires_at": None,
        "blocked_by_count": unresolved_blockers_of(task).count(),
    }


def full_task(task: Task, blockers: list[dict[str, Any]]) -> dict[str, Any]:
    """`task` as read by `full_task_read` (annotated with lease state and blocker count)."""
    return {
        "key": task.key,
        "project": task.project.slug,
        "title": task.title,
        "description": task.description,
        "acceptance_criteria": task.acceptance_criteria,
        "status": task.status,
        "effective_status": task.effective_status,  # type: ignore[attr-defined]
        "blocked_reason": task.blocked_reason,
        "priority": task.priority,
        "task_class": task.task_class,
        "labels": task.labels,
        "version": task.version,
        "epoch": task.epoch,
        "holder": task.holder_handle,  # type: ignore[attr-defined]
        "lease_expires_at": clock.iso(task.lease_expires_at),  # type: ignore[attr-defined]
        "reserved_for": task.reserved_for.handle if task.reserved_for else None,
        "blocked_by": [{"key": row["blocked_by__key"], "status": row["blocked_by__status"]} for row in blockers],
        "unresolved_blockers": task.blocked_by_count,  # type: ignore[attr-defined]
        "ready_since": clock.iso(task.ready_since),
        "created_at": clock.iso(task.created_at),
        "updated_at": clock.iso(task.updated_at),
    }


def environment_name(attempt: Attempt) -> str | None:
    """The environment the attempt was given, as its server-written label names it (no query)."""
    try:
        return parse_label(attempt.label).env
    except ValidationFailed:
        return None


def attempt_summary(attempt: Attempt, *, allocation: Allocation | None = None) -> dict[str, Any]:
    return {
        "id": attempt.pk,
        "task": attempt.task.key,
        "epoch": attempt.epoch,
        "status": attempt.status,
        "lease_expires_at": clock.iso(attempt.lease_expires_at),
        "branch": attempt.branch or None,
        "base_commit": attempt.base_commit or None,
        "environment": allocation.environment.name if allocation is not None else environment_name(attempt),
        "label": attempt.label,
    }


def attempt_detail(attempt: Attempt, notes: list[dict[str, Any]], notes_total: int) -> dict[str, Any]:
    summary = attempt.result_summary
    return {
        **attempt_summary(attempt),
        "agent": attempt.agent.handle,
        "lease_seconds": attempt.lease_seconds,
        "claimed_at": clock.iso(attempt.claimed_at),
        "last_renewed_at": clock.iso(attempt.last_renewed_at),
        "renew_count": attempt.renew_count,
        "finished_at": clock.iso(attempt.finished_at),
        "result_summary": summary[:RESULT_SUMMARY_SHOWN_CHARS],
        "result_summary_truncated": len(summary) > RESULT_SUMMARY_SHOWN_CHARS,
        "next_steps": attempt.next_steps,
        "failure_reason_code": attempt.failure_reason_code or None,
        "interruption_reason_code": attempt.interruption_reason_code or None,
        "revoked_by": attempt.revoked_by or None,
        "revoke_reason": attempt.revoke_reason or None,
        "notes": [
            {
                "id": note["id"],
                "kind": note["kind"],
                "important": note["important"],
                "created_at": clock.iso(note["created_at"]),
                "excerpt": note["excerpt"],
                "truncated": note["content_length"] > len(note["excerpt"]),
                "next_steps": note["next_steps"],
            }
            for note in notes
        ],
        "notes_total": notes_total,
    }


# --- documentation: the shapes above as serializers, for the OpenAPI schema -----------


class CompactTaskSerializer(serializers.Serializer[Any]):
    key = serializers.CharField()
    title = serializers.CharField()
    status = serializers.ChoiceField(choices=TaskStatus.values)
    effective_status = serializers.ChoiceField(choices=list(EFFECTIVE_STATUSES))
    priority = serializers.IntegerField()
    task_class = serializers.CharField(allow_blank=True)
    version = serializers.IntegerField()
    epoch = serializers.IntegerField()
    holder = serializers.CharField(allow_null=True, help_text="Handle of the live lease's holder.")
    lease_expires_at = serializers.DateTimeField(allow_null=True)
    blocked_by = serializers.IntegerField(help_text="Number of unresolved blockers.")


class DependencySerializer(serializers.Serializer[Any]):
    key = serializers.CharField()
    status = serializers.ChoiceField(choices=TaskStatus.values)


class FullTaskSerializer(serializers.Serializer[Any]):
    key = serializers.CharField()
    project = serializers.CharField()
    title = serializers.CharField()
    description = serializers.CharField(allow_blank=True)
    acceptance_criteria = serializers.CharField(allow_blank=True)
    status = serializers.ChoiceField(choices=TaskStatus.values)
    effective_status = serializers.ChoiceField(choices=list(EFFECTIVE_STATUSES))
    blocked_reason = serializers.CharField(allow_blank=True)
    priority = serializers.IntegerField()
    task_class = serializers.CharField(allow_blank=True)
    labels = serializers.ListField(child=serializers.CharField())
    version = serializers.IntegerField()
    epoch = serializers.IntegerField()
    holder = serializers.CharField(allow_null=True)
    lease_expires_at = serializers.DateTimeField(allow_null=True)
    reserved_for = serializers.CharField(allow_null=True)
    blocked_by = DependencySerializer(many=True, help_text="Present dependencies (at most 100).")
    unresolved_blockers = serializers.IntegerField()
    ready_since = serializers.DateTimeField(allow_null=True)
    created_at = serializers.DateTimeField()
    updated_at = serializers.DateTimeField()


class AttemptSummarySerializer(serializers.Serializer[Any]):
    id = serializers.IntegerField()
    task = serializers.CharField()
    epoch = serializers.IntegerField()
    status = serializers.ChoiceField(choices=AttemptStatus.values)
    lease_expires_at = serializers.DateTimeField()
    branch = serializers.CharField(allow_null=True)
    base_commit = serializers.CharField(allow_null=True)
    environment = serializers.CharField(allow_null=True, help_text="Name of the environment allocated with the lease.")
    label = serializers.CharField()  # type: ignore[assignment]  # a field named like Field.label


class NoteExcerptSerializer(serializers.Serializer[Any]):
    id = serializers.IntegerField()
    kind = serializers.CharField()
    important = serializers.BooleanField()
    created_at = serializers.DateTimeField()
    excerpt = serializers.CharField(allow_blank=True, help_text="The first 300 characters.")
    truncated = serializers.BooleanField()
    next_steps = serializers.ListField(child=serializers.CharField())


class AttemptDetailSerializer(AttemptSummarySerializer):
    agent = serializers.CharField()
    lease_seconds = serializers.IntegerField()
    claimed_at = serializers.DateTimeField()
    last_renewed_at = serializers.DateTimeField(allow_null=True)
    renew_count = serializers.IntegerField()
    finished_at = serializers.DateTimeField(allow_null=True)
    result_summary = serializers.CharField(allow_blank=True, help_text="At most 4,000 characters.")
    result_summary_truncated = serializers.BooleanField()
    next_steps = serializers.ListField(child=serializers.CharField())
    failure_reason_code = serializers.CharField(allow_null=True)
    interruption_reason_code = serializers.CharField(allow_null=True)
    revoked_by = serializers.CharField(allow_null=True)
    revoke_reason = serializers.CharField(allow_null=True)
    notes = NoteExcerptSerializer(many=True, help_text="The latest 50 notes, oldest first.")
    notes_total = serializers.IntegerField()


class WorkContextSerializer(serializers.Serializer[Any]):
    """The bounded work context (`leases.context.work_context`); at most LEASEHOLD_CONTEXT_MAX_BYTES."""

    task = serializers.DictField()
    blockers = serializers.ListField(child=serializers.DictField())
    blockers_total = serializers.IntegerField()
    latest_checkpoint = serializers.DictField(allow_null=True)
    previous_attempt = serializers.DictField(allow_null=True)
    label = serializers.CharField(allow_null=True)  # type: ignore[assignment]
    environment = serializers.DictField(allow_null=True, help_text="name, kind, isolation, resources, credentials_ref.")
    warnings = serializers.ListField(child=serializers.CharField())
    truncated = serializers.ListField(child=serializers.CharField(), help_text="Parts that were cut to fit.")


class CompactTaskPageSerializer(serializers.Serializer[Any]):
    results = CompactTaskSerializer(many=True)
    next_cursor = serializers.CharField(allow_null=True)
