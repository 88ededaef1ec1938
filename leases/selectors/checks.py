"""Reads of check results (SPEC §22): a task's head, the checks at a commit, the context's part."""

from __future__ import annotations

from typing import Any

from django.db.models import QuerySet

from leases.models import Attempt, AttemptKind, CheckResult
from ledger import clock
from ledger.models import Task, TaskStatus

CHECKS_SHOWN = 50
CONTEXT_SUMMARY_CHARS = 500


def task_head(task: Task) -> str | None:
    """The commit the task's checks are read at: the delivered head of a delivered (or landed) task,
    else the latest head its work attempts reported; None before any."""
    if task.status in (TaskStatus.DELIVERED, TaskStatus.DONE) and task.delivered_commit:
        return task.delivered_commit
    head = (
        Attempt.objects.filter(task=task, kind=AttemptKind.WORK)
        .exclude(head_commit="")
        .exclude(head_commit__isnull=True)
        .order_by("-id")
        .values_list("head_commit", flat=True)
        .first()
    )
    return head or task.delivered_commit or None


def checks_at(project_id: int, commit: str) -> QuerySet[CheckResult]:
    """The latest result of each check at the commit, by name (index `check_result_latest`)."""
    return CheckResult.objects.filter(project_id=project_id, commit=commit).select_related("agent").order_by("name")


def check_row(check: CheckResult, *, summary_chars: int | None = None) -> dict[str, Any]:
    summary = check.summary
    if summary_chars is not None and len(summary) > summary_chars:
        summary = summary[: summary_chars - 1] + "…"
    return {
        "name": check.name,
        "state": check.state,
        "commit": check.commit,
        "url": check.url or None,
        "summary": summary,
        "reported_by": check.agent.handle,
        "reported_at": clock.iso(check.reported_at),
    }


def checks_part(project_id: int, commit: str | None) -> dict[str, Any] | None:
    """The work and review contexts' `checks`: the head and its latest results (summaries cut short)."""
    if not commit:
        return None
    rows = list(checks_at(project_id, commit)[:CHECKS_SHOWN])
    return {"head": commit, "results": [check_row(row, summary_chars=CONTEXT_SUMMARY_CHARS) for row in rows]}
