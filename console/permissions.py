"""Which models each console aggregate reads, for the one rule `ledger.permissions.may_view` (issue 32).

A dashboard panel, the report, a CSV export, the job-health and agent-health
pages show their figures only to a user who may view every model listed for
them here; a panel the user may not see is neither shown nor computed, and a
page answers 403. `/metrics` keeps its own list beside it
(`insight.apis.prometheus.METRICS_MODELS`) under the same rule. The table is
what docs/admin.md ("Who may see an aggregate") prints.
"""

from __future__ import annotations

from typing import Any

from django.http import HttpRequest

from insight.models import Incident, JobHeartbeat
from leases.models import AgentDailyUsage, Attempt, ProjectDailyUsage, TaskUsage
from ledger.models import Agent, Event, Project, Task
from ledger.permissions import may_view
from reconciliation.models import Finding, ReconciliationRun

# Dashboard panels (console.fleet.dashboard), by the name the template tests.
DASHBOARD_PANELS: dict[str, tuple[Any, ...]] = {
    "jobs": (JobHeartbeat, ReconciliationRun),
    "live_leases": (Task, Attempt),
    "ready": (Task,),
    "quarantined": (Task,),
    "expiring": (Attempt, Task, Agent),
    "open_findings": (Finding,),
    "incidents": (Incident,),
    "queue_alerts": (Event, Task),
    "charts": (Attempt, Event, Finding),
    "status_table": (Project, Task),
    "findings": (Finding, Task),
    "recent_alerts": (Event, Task),
    "spend": (Agent, Task, AgentDailyUsage, TaskUsage, ProjectDailyUsage),
}

# Whole pages outside one model's admin.
PAGES: dict[str, tuple[Any, ...]] = {
    "job_health": (JobHeartbeat, ReconciliationRun),
    "report": (Task, Attempt, Agent, Project),
    "tasks_csv": (Task, Project),
    "attempts_csv": (Attempt, Task, Agent),
    "agent_health": (Agent, Attempt, Task),
}


def visible_panels(request: HttpRequest) -> frozenset[str]:
    """The dashboard panels this user may see."""
    return frozenset(name for name, models in DASHBOARD_PANELS.items() if may_view(request.user, *models))


def may_see_page(request: HttpRequest, name: str) -> bool:
    return may_view(request.user, *PAGES[name])
