"""The landing gates (SPEC §22): when a delivered task is landable, and why one waits.

A delivered task is landable when every one of the project's `required_checks` is `success` at its
delivered head and it has `required_approvals` approved reviews pinned to that head (§16.1). A new
head (the task delivered again) needs its checks and approvals anew: everything is read at the
head. `gated` filters a queryset of delivered tasks in SQL (the queue the landers take from);
`waiting_reasons` says, per task, what it waits for (the queue page and the API).
"""

from __future__ import annotations

from collections.abc import Iterable

from django.db.models import Count, Exists, IntegerField, OuterRef, QuerySet, Subquery, Value
from django.db.models.functions import Coalesce

from leases.models import CheckResult, CheckState, ReviewRequest, ReviewStatus
from ledger.models import Project, Task


def short(commit: str) -> str:
    return f"{commit[:7]}…"


def gated(tasks: QuerySet[Task], project: Project) -> QuerySet[Task]:
    """Only the landable ones of `tasks` (delivered tasks of `project`)."""
    for name in project.required_checks or []:
        tasks = tasks.filter(
            Exists(
                CheckResult.objects.filter(
                    project_id=project.pk, commit=OuterRef("delivered_commit"), name=name, state=CheckState.SUCCESS
                )
            )
        )
    if project.required_approvals:
        approvals = (
            ReviewRequest.objects.filter(
                task=OuterRef("pk"), status=ReviewStatus.APPROVED, head_commit=OuterRef("delivered_commit")
            )
            .order_by()
            .values("task")
            .annotate(count=Count("pk"))
            .values("count")
        )
        tasks = tasks.alias(
            approvals_at_head=Coalesce(Subquery(approvals, output_field=IntegerField()), Value(0))
        ).filter(approvals_at_head__gte=project.required_approvals)
    return tasks


def waiting_reasons(project: Project, tasks: Iterable[Task]) -> dict[int, list[str]]:
    """For each task (by id), what it waits for at its delivered head; an empty list: landable."""
    tasks = list(tasks)
    reasons: dict[int, list[str]] = {task.pk: [] for task in tasks}
    required = list(project.required_checks or [])
    if not tasks or (not required and not project.required_approvals):
        return reasons
    commits = {task.delivered_commit for task in tasks}
    states = {
        (commit, name): state
        for commit, name, state in CheckResult.objects.filter(
            project_id=project.pk, commit__in=commits, name__in=required
        ).values_list("commit", "name", "state")
    }
    approvals: dict[tuple[int, str], int] = {}
    if project.required_approvals:
        for task_id, head, count in (
            ReviewRequest.objects.filter(task__in=[task.pk for task in tasks], status=ReviewStatus.APPROVED)
            .values("task", "head_commit")
            .annotate(count=Count("pk"))
            .values_list("task", "head_commit", "count")
        ):
            approvals[(task_id, head or "")] = count
    for task in tasks:
        head = task.delivered_commit
        for name in required:
            state = states.get((head, name))
            if state != CheckState.SUCCESS:
                seen = f" ({state})" if state else " (not reported)"
                reasons[task.pk].append(f"waiting for check `{name}` at {short(head)}{seen}")
        missing = project.required_approvals - approvals.get((task.pk, head), 0)
        if missing > 0:
            plural = "" if missing == 1 else "s"
            reasons[task.pk].append(f"waiting for {missing} approval{plural} at {short(head)}")
    return reasons
