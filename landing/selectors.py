"""Reads of the landing queue (SPEC §21.1): the queue in order, the live landing, the latest results."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from django.db.models import Prefetch, QuerySet

from landing.gates import waiting_reasons
from landing.models import Landing, LandingStatus, LandingTask
from landing.services.claiming import delivered_queue
from leases.models import CheckResult
from ledger import clock
from ledger.models import Project, Task

RECENT_LANDINGS = 20
QUEUE_SHOWN = 200


def landing_settings(project: Project) -> dict[str, Any]:
    return {
        "on": project.landing_on,
        "target_branch": project.target_branch,
        "land_method": project.land_method,
        "check_command": project.check_command,
        "check_timeout_seconds": project.check_timeout_seconds,
        "required_approvals": project.required_approvals,
        "required_checks": list(project.required_checks),
        "batch_max": project.batch_max,
        "max_failed_landings": project.max_failed_landings,
    }


def _entry(entry: LandingTask) -> dict[str, Any]:
    return {
        "key": entry.task.key,
        "title": entry.task.title,
        "branch": entry.branch,
        "head_commit": entry.head_commit,
        "outcome": entry.outcome,
        "paths": list(entry.paths),
        "output_tail": entry.output_tail,
    }


def landing_summary(landing: Landing) -> dict[str, Any]:
    return {
        "id": landing.pk,
        "epoch": landing.epoch,
        "target_branch": landing.target_branch,
        "agent": landing.agent.handle,
        "status": landing.status,
        "result": landing.result or None,
        "method": landing.method,
        "claimed_at": clock.iso(landing.claimed_at),
        "lease_expires_at": clock.iso(landing.lease_expires_at),
        "finished_at": clock.iso(landing.finished_at) if landing.finished_at else None,
        "landed_commit": landing.landed_commit or None,
        "check_runs": landing.check_runs,
        "duration_seconds": (landing.finished_at - landing.claimed_at).total_seconds() if landing.finished_at else None,
        "tasks": [_entry(entry) for entry in landing.tasks.all()],
    }


def _with_entries(landings: QuerySet[Landing]) -> QuerySet[Landing]:
    return landings.select_related("agent").prefetch_related(
        Prefetch("tasks", queryset=LandingTask.objects.select_related("task").order_by("position"))
    )


def _checks_by_head(project: Project, heads: set[str]) -> dict[str, list[dict[str, Any]]]:
    """The latest check results at each head, by name (SPEC §22): what the queue shows beside a task."""
    found: dict[str, list[dict[str, Any]]] = {}
    for commit, name, state, url in (
        CheckResult.objects.filter(project=project, commit__in=heads)
        .order_by("commit", "name")
        .values_list("commit", "name", "state", "url")
    ):
        found.setdefault(commit, []).append({"name": name, "state": state, "url": url or None})
    return found


def queue_rows(project: Project, *, now: datetime) -> list[Task]:
    return list(delivered_queue(project, now=now)[:QUEUE_SHOWN])


def landing_overview(project: Project, *, now: datetime) -> dict[str, Any]:
    """The landing page's content: settings, the queue in order, the live landing, the latest results."""
    landings = _with_entries(Landing.objects.filter(project=project))
    live = landings.filter(status=LandingStatus.ACTIVE, lease_expires_at__gt=now).first()
    recent = landings.exclude(status=LandingStatus.ACTIVE).order_by("-id")[:RECENT_LANDINGS]
    rows = queue_rows(project, now=now)
    waiting = waiting_reasons(project, rows)
    checks = _checks_by_head(project, {task.delivered_commit for task in rows})
    return {
        "project": project.slug,
        "settings": landing_settings(project),
        "queue": [
            {
                "key": task.key,
                "title": task.title,
                "priority": task.priority,
                "delivered_at": clock.iso(task.delivered_at) if task.delivered_at else None,
                "branch": task.delivered_branch,
                "head_commit": task.delivered_commit,
                "failed_landings": task.failed_landings,
                # SPEC §22: what the task waits for at its head (empty: the next lander may take it).
                "landable": not waiting[task.pk],
                "waiting_for": waiting[task.pk],
                "checks": checks.get(task.delivered_commit, []),
            }
            for task in rows
        ],
        "live": landing_summary(live) if live is not None else None,
        "recent": [landing_summary(landing) for landing in recent],
    }
