"""The incident rules (issue 32): what holds right now, per rule and subject. Reads only; the check writes.

`incidents_observed(now)` returns one `Observation` per (rule, subject) that
holds; `insight.services.incidents.incidents_check` opens an incident for a
new one and resolves the open ones no longer observed. The rules:

- **agent silent** (`agent:<handle>`): an active agent holding a live lease
  whose health (`insight.agent_health`) is silent or silent · renewed, that
  is not heard from for `LEASEHOLD_AGENT_SILENCE_SECONDS` or said dead by the
  reconciler's findings. Resolved when it is heard from again or holds nothing;
- **queue wait** (`project:<slug>`): a claimable task waited longer than the
  project's `queue_wait_max_seconds`;
- **budget spent** (`agent:<handle>`, `project:<slug>`): today's (UTC) spend
  reached the daily budget; resolved the next day or when the budget is raised;
- **reconciliation failing** (`job:reconcile`): the last
  `LEASEHOLD_INCIDENT_RECONCILIATION_RUNS` finished runs all failed or finished with errors;
- **webhook failing** (`webhook:<id>`): `LEASEHOLD_INCIDENT_WEBHOOK_FAILURES` failed tries in a row;
- **landing queue stuck** (`project:<slug>`): a landing live for more than
  `LEASEHOLD_INCIDENT_LANDING_STUCK_MINUTES`, or a task delivered longer ago
  than that while no landing finished within it;
- **job failing** (`job:<name>`): a scheduled job's last run failed or was
  killed at django-q2's timeout, or its last success is older than its limit.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

from django.conf import settings
from django.db.models import Max, Min, QuerySet

from core.db import count_up_to
from insight.agent_health import SILENT, SILENT_RENEWED, agent_health
from insight.job_health import job_health
from insight.models.incidents import IncidentRule
from insight.models.job_heartbeat import JobName, JobOutcome
from landing.models import Landing, LandingStatus
from leases.models import ProjectDailyUsage
from leases.selectors import claimable_tasks
from ledger.models import Agent, Project, Task, TaskStatus
from push.models import WebhookEndpoint
from reconciliation.models import ReconciliationRun, RunStatus


@dataclass(frozen=True)
class Observation:
    rule: str
    subject: str
    title: str
    project_id: int | None = None
    detail: dict[str, Any] = field(default_factory=dict)

    @property
    def key(self) -> tuple[str, str]:
        return (self.rule, self.subject)


def _agents(now: datetime) -> list[Observation]:
    found = []
    for health in agent_health(now, agents=Agent.objects.filter(is_active=True)):
        agent = health.agent
        heard = health.heard_age
        if health.live and health.state in (SILENT, SILENT_RENEWED):
            found.append(
                Observation(
                    IncidentRule.AGENT_SILENT,
                    f"agent:{agent.handle}",
                    f"{agent.handle} is {health.state} holding {len(health.live)} live lease(s)",
                    detail={
                        "agent": agent.handle,
                        "state": health.state,
                        "heard_seconds_ago": None if heard is None else int(heard.total_seconds()),
                        "live_leases": [attempt.task.key for attempt in health.live],
                        "findings": health.findings,
                    },
                )
            )
        if health.budget_spent:
            found.append(
                Observation(
                    IncidentRule.BUDGET_SPENT,
                    f"agent:{agent.handle}",
                    f"{agent.handle}'s daily budget is spent",
                    detail={"agent": agent.handle, "day": now.date().isoformat()},
                )
            )
    return found


# The queue-wait incident counts the tasks waiting up to this many (issue 33: a backlog of 75k a project at
# 1M tasks made the check count it whole every minute); past it the detail says it stopped counting.
WAITING_COUNTED = 1000


def _waiting(waiting: QuerySet[Task]) -> dict[str, Any]:
    # Longest waiting first, along `task_ready_since` (project, ready_since; the ready tasks).
    counted, more = count_up_to(waiting.order_by("ready_since"), WAITING_COUNTED)
    return {"waiting": counted, "waiting_more": True} if more else {"waiting": counted}


def _projects(now: datetime) -> list[Observation]:
    found = []
    projects = list(Project.objects.filter(archived_at__isnull=True))
    usage = {row.project_id: row for row in ProjectDailyUsage.objects.filter(day=now.date())}
    delivered = {
        row["project_id"]: row
        for row in Task.objects.filter(status=TaskStatus.DELIVERED)
        .order_by()
        .values("project_id")
        .annotate(oldest=Min("delivered_at"))
    }
    landed = {
        row["project_id"]: row["last"]
        for row in Landing.objects.filter(status=LandingStatus.FINISHED)
        .order_by()
        .values("project_id")
        .annotate(last=Max("finished_at"))
    }
    live_landings = {
        row["project_id"]: row["first"]
        for row in Landing.objects.filter(status=LandingStatus.ACTIVE)
        .order_by()
        .values("project_id")
        .annotate(first=Min("claimed_at"))
    }
    stuck_minutes = settings.LEASEHOLD_INCIDENT_LANDING_STUCK_MINUTES
    stuck_before = now - timedelta(minutes=stuck_minutes)
    for project in projects:
        subject = f"project:{project.slug}"
        threshold = now - timedelta(seconds=project.queue_wait_max_seconds)
        waiting = claimable_tasks(project=project, now=now, include_reserved=True).filter(ready_since__lte=threshold)
        oldest = waiting.order_by("ready_since").values_list("ready_since", flat=True).first()
        if oldest is not None:
            found.append(
                Observation(
                    IncidentRule.QUEUE_WAIT,
                    subject,
                    f"{project.slug}: claimable work waits longer than {project.queue_wait_max_seconds} s",
                    project.pk,
                    {"waited_seconds": int((now - oldest).total_seconds()), **_waiting(waiting)},
                )
            )
        spent = usage.get(project.pk)
        if spent is not None and (
            (
                project.daily_budget_tokens is not None
                and spent.input_tokens + spent.output_tokens >= project.daily_budget_tokens
            )
            or (project.daily_budget_cost_usd is not None and spent.cost_usd >= project.daily_budget_cost_usd)
        ):
            found.append(
                Observation(
                    IncidentRule.BUDGET_SPENT,
                    subject,
                    f"{project.slug}'s daily budget is spent",
                    project.pk,
                    {"day": now.date().isoformat()},
                )
            )
        queue = delivered.get(project.pk)
        last_landed = landed.get(project.pk)
        live_since = live_landings.get(project.pk)
        queue_stuck = (
            queue is not None
            and queue["oldest"] is not None
            and queue["oldest"] <= stuck_before
            and (last_landed is None or last_landed <= stuck_before)
        )
        landing_stuck = live_since is not None and live_since <= stuck_before
        if queue_stuck or landing_stuck:
            found.append(
                Observation(
                    IncidentRule.LANDING_STUCK,
                    subject,
                    f"{project.slug}: landing queue stuck (no landing for {stuck_minutes} min)",
                    project.pk,
                    {
                        "oldest_delivered_at": queue["oldest"].isoformat() if queue and queue["oldest"] else None,
                        "last_landing_finished_at": last_landed.isoformat() if last_landed else None,
                        "live_landing_since": live_since.isoformat() if live_since else None,
                    },
                )
            )
    return found


def _webhooks() -> list[Observation]:
    failing_after = settings.LEASEHOLD_INCIDENT_WEBHOOK_FAILURES
    return [
        Observation(
            IncidentRule.WEBHOOK_FAILING,
            f"webhook:{endpoint.pk}",
            f"webhook #{endpoint.pk} ({endpoint.url[:200]}) failed {endpoint.consecutive_failures} times in a row",
            endpoint.project_id,
            {"failures": endpoint.consecutive_failures, "active": endpoint.is_active},
        )
        for endpoint in WebhookEndpoint.objects.filter(consecutive_failures__gte=failing_after)
    ]


def _jobs(now: datetime) -> list[Observation]:
    found = []
    failing_runs = settings.LEASEHOLD_INCIDENT_RECONCILIATION_RUNS
    runs = list(
        ReconciliationRun.objects.exclude(status__in=(RunStatus.RUNNING, RunStatus.SUPERSEDED))
        .order_by("-id")
        .values_list("status", flat=True)[:failing_runs]
    )
    if len(runs) == failing_runs and all(s in (RunStatus.FAILED, RunStatus.PARTIAL) for s in runs):
        found.append(
            Observation(
                IncidentRule.RECONCILIATION_PARTIAL,
                f"job:{JobName.RECONCILE}",
                f"reconciliation failed or finished with errors {failing_runs} times in a row",
                detail={"statuses": runs},
            )
        )
    for job in job_health(now).jobs.values():
        if job.name == JobName.INCIDENTS or job.runs == 0:
            continue  # this check itself, and a job that never ran (a fresh install)
        failed = job.killed or job.last_outcome == JobOutcome.FAILED
        # Stale once it has succeeded: a first run still under way is not yet late.
        stale = job.stale and job.last_succeeded_at is not None
        if failed or stale:
            found.append(
                Observation(
                    IncidentRule.JOB_FAILING,
                    f"job:{job.name}",
                    f"{job.label}: {'killed' if job.killed else 'failed' if failed else 'stale'}",
                    detail={"outcome": job.outcome_text, "error": job.error_text[:500], "stale": stale},
                )
            )
    return found


def incidents_observed(now: datetime) -> dict[tuple[str, str], Observation]:
    """Every (rule, subject) that holds at `now`."""
    found = [*_agents(now), *_projects(now), *_webhooks(), *_jobs(now)]
    return {observation.key: observation for observation in found}
