"""Job health for people: the dashboard's tiles and the job-health page (`/admin/jobs/`).

Reads `insight.job_health.job_health` (the same facts as `/readyz`) and
the recent reconciliation runs that failed or finished with errors. Visible to
anyone who may view tasks (Ledger admins and Managers), not only superusers:
django-q2's own admin pages stay superuser-only.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from django.core.exceptions import PermissionDenied
from django.http import HttpRequest
from django.template.response import TemplateResponse
from django.urls import reverse

from console.audit.alerts import human_duration
from console.permissions import may_see_page
from insight.job_health import SCHEDULER_HEARTBEAT_MAX_AGE, JobHealth, JobState, job_health
from insight.models.job_heartbeat import JobName
from ledger import clock
from operations.schedules import SCHEDULES
from reconciliation.models import ReconciliationRun, RunStatus

RECENT_RUNS_SHOWN = 10
# The tiles the dashboard shows; the page shows every job.
TILE_JOBS = (JobName.SWEEP, JobName.RECONCILE)


@dataclass(frozen=True)
class JobView:
    state: JobState
    every: str

    def __getattr__(self, name: str) -> Any:
        return getattr(self.state, name)

    @property
    def success_age_text(self) -> str:
        age = self.state.success_age
        return human_duration(age.total_seconds()) if age is not None else "never"

    @property
    def stale_after_text(self) -> str:
        return human_duration(self.state.stale_after.total_seconds())


@dataclass(frozen=True)
class JobsView:
    health: JobHealth
    jobs: list[JobView]

    def __getattr__(self, name: str) -> Any:
        return getattr(self.health, name)

    @property
    def tiles(self) -> list[JobView]:
        return [job for job in self.jobs if job.state.name in TILE_JOBS]

    @property
    def last_heartbeat_age(self) -> str:
        beat: datetime | None = self.health.last_heartbeat_at
        return human_duration((self.health.now - beat).total_seconds()) if beat else "never"

    @property
    def scheduler_limit(self) -> str:
        return human_duration(SCHEDULER_HEARTBEAT_MAX_AGE.total_seconds())


def _every() -> dict[str, str]:
    by_func = {func.rsplit(".", 1)[1]: minutes for _, func, minutes in SCHEDULES}
    wrappers = {
        JobName.SWEEP: "sweep_expired_job",
        JobName.QUEUE_WAIT: "check_queue_wait_job",
        JobName.RECONCILE: "reconcile_job",
        JobName.PURGE: "purge_idempotency_job",
        JobName.INCIDENTS: "check_incidents_job",
    }
    return {name: human_duration(by_func.get(func, 0) * 60) for name, func in wrappers.items()}


def jobs_view(now: datetime) -> JobsView:
    health = job_health(now)
    every = _every()
    views = [JobView(state=state, every=every[name]) for name, state in health.jobs.items()]
    return JobsView(health=health, jobs=views)


def troubled_runs(now: datetime) -> list[ReconciliationRun]:
    """Reconciliation runs of the last 24 hours that failed or finished with errors, newest first."""
    return list(
        ReconciliationRun.objects.filter(
            status__in=(RunStatus.FAILED, RunStatus.PARTIAL), started_at__gte=now - timedelta(hours=24)
        ).order_by("-id")[:RECENT_RUNS_SHOWN]
    )


def jobs_page(request: HttpRequest, site: Any) -> TemplateResponse:
    if not may_see_page(request, "job_health"):  # the one rule for aggregates (console.permissions)
        raise PermissionDenied
    now = clock.now()
    context = {
        **site.each_context(request),
        "title": "Job health",
        "jobs": jobs_view(now),
        "runs": troubled_runs(now),
        "runs_url": reverse("admin:reconciliation_reconciliationrun_changelist"),
        "now": now,
    }
    return TemplateResponse(request, "admin/leasehold/jobs.html", context)
