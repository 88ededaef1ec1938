"""The admin index as a fleet dashboard (SPEC §10).

Everything is read against one reading of the clock and with a bounded
number of queries, each served by an index: tasks by effective status per
project (`leases.selectors.with_lease_state`), leases expiring in the next 10
minutes (the partial index on active leases), unresolved findings by
condition, queue-wait alerts and warn/error events of the recent past (the
event type/time and time indexes), and 30 days of fleet metrics
(`insight.metrics`) drawn as server-rendered SVG.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, field
from datetime import date, datetime, timedelta
from decimal import Decimal
from typing import Any
from urllib.parse import urlencode

from django.db.models import Count, Q
from django.urls import reverse
from django.utils.safestring import SafeString

from console.audit.alerts import PANEL_PLAN, AlertPanel, event_groups, events_url, finding_groups, human_duration
from console.base import lease_level
from console.fleet.charts import Stack, bar_chart, rate_chart
from console.fleet.jobs_health import JobsView, jobs_view
from console.permissions import DASHBOARD_PANELS
from console.tasks.parts import QUARANTINED_TASKS
from core.db import count_up_to, postgres_plan
from insight.metrics import fleet_metrics, pooled_orphan_rate
from insight.models.incidents import Incident, IncidentStatus
from insight.spending import Spend, spend_per_day, top_agents, top_tasks
from insight.status_counts import task_counts_by_effective_status
from leases.models import Attempt
from leases.selectors import (
    HOLDS_SET,
    IN_PROGRESS,
    IN_REVIEW,
    LANDING,
    claimable_tasks,
    live_attempts,
)
from ledger.models import Event, EventType, Project, Severity, Task, TaskStatus
from reconciliation.models import UNRESOLVED_FINDING_STATUSES, Condition, Finding, FindingStatus

EXPIRING_WINDOW = timedelta(minutes=10)
# Panels show their top 5 with "all N →", so the page fits a laptop screen.
EXPIRING_SHOWN = 5
QUEUE_WAIT_WINDOW = timedelta(hours=24)
# 24 hours, like the queue-wait panel: grouping a week of warnings cost 340 ms at 1,000,000 events on SQLite.
ALERTS_WINDOW = timedelta(hours=24)
AUTO_REFRESH_SECONDS = 30
# The "Ready, unclaimed" tile counts this many at most and then says "1000+".
CLAIMABLE_COUNTED = 1000
CHART_DAYS = 30
# Columns of the status table, in the order a reader scans a fleet.
STATUS_COLUMNS: tuple[tuple[str, str], ...] = (
    (IN_PROGRESS, "In progress"),
    (IN_REVIEW, "In review"),
    (TaskStatus.READY, "Ready"),
    (TaskStatus.OPEN, "Open"),
    (TaskStatus.BLOCKED, "Blocked"),
    (TaskStatus.REVIEW, "Review"),
    (LANDING, "Landing"),
    (TaskStatus.DELIVERED, "Delivered"),
    (TaskStatus.DONE, "Done"),
    (TaskStatus.CANCELLED, "Cancelled"),
)


@dataclass(frozen=True)
class StatusCell:
    status: str
    count: int
    url: str


@dataclass(frozen=True)
class ProjectRow:
    project: Project
    cells: list[StatusCell]
    total: int
    url: str


@dataclass(frozen=True)
class ExpiringLease:
    attempt: Attempt
    left: str
    urgent: bool
    task_url: str
    attempt_url: str


@dataclass(frozen=True)
class FindingRow:
    condition: str
    label: str
    open: int
    acknowledged: int
    url: str


@dataclass(frozen=True)
class Chart:
    title: str
    description: str
    svg: SafeString


@dataclass
class Dashboard:
    now: datetime
    projects: list[ProjectRow] = field(default_factory=list)
    status_totals: list[StatusCell] = field(default_factory=list)
    expiring: list[ExpiringLease] = field(default_factory=list)
    expiring_count: int = 0
    findings: list[FindingRow] = field(default_factory=list)
    finding_panel: AlertPanel = field(default_factory=AlertPanel)
    queue_alerts: AlertPanel = field(default_factory=AlertPanel)
    recent_alerts: AlertPanel = field(default_factory=AlertPanel)
    charts: list[Chart] = field(default_factory=list)
    jobs: JobsView | None = None
    orphan_rate: float | None = None
    # Blocked by the quarantine (SPEC §16.4): tasks that keep failing, waiting for a person.
    quarantined: int = 0
    # Open incidents (insight.incidents) that are not snoozed, and how many of them nobody acknowledged.
    incidents: int = 0
    incidents_unacknowledged: int = 0
    # The panels this user may see (console.permissions): the others are neither computed nor shown.
    shown: frozenset[str] = frozenset()

    @property
    def expiring_more(self) -> bool:
        return self.expiring_count > len(self.expiring)

    @property
    def orphan_rate_text(self) -> str:
        return "—" if self.orphan_rate is None else f"{self.orphan_rate * 100:.1f} %"

    @property
    def queue_alert_count(self) -> int:
        """Every queue-wait alert of the window: a count, not the length of a cut list (bug 2)."""
        return self.queue_alerts.total_items

    spend: SpendPanel | None = None

    @property
    def live_leases(self) -> int:
        return sum(cell.count for cell in self.status_totals if cell.status in (IN_PROGRESS, IN_REVIEW))

    # Tasks somebody can claim now, by the one rule (leases.selectors.claimable_tasks): not a
    # stored-ready task that is blocked, or reserved for an agent who cannot claim it. Counted up to
    # CLAIMABLE_COUNTED; `claimable_more` says there are more (the tile reads "1000+").
    claimable: int = 0
    claimable_more: bool = False

    @property
    def ready_text(self) -> str:
        return f"{self.claimable}+" if self.claimable_more else str(self.claimable)

    @property
    def ready(self) -> int:
        return self.claimable

    @property
    def open_findings(self) -> int:
        return sum(row.open for row in self.findings)


def _task_list_url(**filters: Any) -> str:
    return reverse("admin:ledger_task_changelist") + ("?" + urlencode(filters) if filters else "")


def status_table(now: datetime) -> tuple[list[ProjectRow], list[StatusCell], int]:
    """Tasks by effective status per (non-archived) project, without reading the task table.

    The same numbers as grouping `with_lease_state` by `effective_status`: the trigger-kept counts per
    project and stored status (`insight.status_counts`, a few rows per project whatever the number of
    tasks; a GROUP BY over every task was 40-140 ms at 100,000 and grew with history), each live lease
    moving its task to in progress, in review or landing. `tests/console/test_dashboard.py` holds the two
    ways together. The third value is the number of quarantined tasks: blocked ones, read by the
    project/status index (live work, not history).
    """
    projects = list(Project.objects.filter(archived_at__isnull=True).order_by("slug"))
    counts: dict[int, dict[str, int]] = defaultdict(lambda: defaultdict(int))
    for (project_id, status), n in task_counts_by_effective_status(now).items():
        counts[project_id][status] += n
    quarantined = Task.objects.filter(QUARANTINED_TASKS, project__archived_at__isnull=True).order_by().count()
    table = []
    totals: dict[str, int] = defaultdict(int)
    for project in projects:
        cells = []
        for status, _ in STATUS_COLUMNS:
            count = counts[project.pk].get(status, 0)
            totals[status] += count
            url = _task_list_url(project__id__exact=project.pk, effective_status=status)
            cells.append(StatusCell(status=status, count=count, url=url))
        url = _task_list_url(project__id__exact=project.pk)
        table.append(ProjectRow(project=project, cells=cells, total=sum(counts[project.pk].values()), url=url))
    total_cells = [
        StatusCell(status=status, count=totals[status], url=_task_list_url(effective_status=status))
        for status, _ in STATUS_COLUMNS
    ]
    return table, total_cells, quarantined


def expiring_leases(now: datetime) -> tuple[list[ExpiringLease], int]:
    """Live leases that lapse within 10 minutes, soonest first, and how many (the sweep's partial index)."""
    expiring = live_attempts(now).filter(lease_expires_at__lte=now + EXPIRING_WINDOW)
    attempts = list(expiring.select_related("task", "agent").order_by("lease_expires_at")[:EXPIRING_SHOWN])
    shown = [
        ExpiringLease(
            attempt=attempt,
            left=human_duration((attempt.lease_expires_at - now).total_seconds()),
            urgent=lease_level((attempt.lease_expires_at - now).total_seconds(), attempt.lease_seconds) == "lh-urgent",
            task_url=reverse("admin:ledger_task_change", args=[attempt.task_id]),
            attempt_url=reverse("admin:leases_attempt_change", args=[attempt.pk]),
        )
        for attempt in attempts
    ]
    count = len(shown) if len(shown) < EXPIRING_SHOWN else expiring.count()
    return shown, count


def findings_by_condition() -> list[FindingRow]:
    """Unresolved findings per condition: open and acknowledged (the partial index on unresolved)."""
    counts: dict[str, dict[str, int]] = defaultdict(dict)
    rows = (
        Finding.objects.filter(status__in=UNRESOLVED_FINDING_STATUSES)
        .order_by()
        .values("condition", "status")
        .annotate(n=Count("id"))
    )
    for row in rows:
        counts[row["condition"]][row["status"]] = row["n"]
    base = reverse("admin:reconciliation_finding_changelist")
    return [
        FindingRow(
            condition=condition,
            label=str(label),
            open=counts[condition].get(FindingStatus.OPEN, 0),
            acknowledged=counts[condition].get(FindingStatus.ACKNOWLEDGED, 0),
            url=f"{base}?{urlencode({'condition__exact': condition, 'status__exact': FindingStatus.OPEN})}",
        )
        for condition, label in Condition.choices
        if counts[condition]
    ]


def open_incidents(now: datetime) -> tuple[int, int]:
    """Open incidents not snoozed at `now`, and those of them not yet acknowledged (the partial index on open).

    A snooze hides an incident from the dashboard until it ends (`insight.models.incidents`);
    the incidents page still lists it.
    """
    counts = (
        Incident.objects.filter(status=IncidentStatus.OPEN)
        .filter(Q(snoozed_until__isnull=True) | Q(snoozed_until__lte=now))
        .aggregate(open=Count("id"), unacknowledged=Count("id", filter=Q(acknowledged_at__isnull=True)))
    )
    return counts["open"], counts["unacknowledged"]


def queue_wait_alerts(now: datetime) -> AlertPanel:
    """Queue-wait alerts of the last 24 hours, one row per task (the event type/time index)."""
    since = now - QUEUE_WAIT_WINDOW
    events = Event.objects.filter(type=EventType.TASK_QUEUE_WAIT_EXCEEDED, created_at__gte=since)
    all_url = events_url(type=EventType.TASK_QUEUE_WAIT_EXCEEDED, created_at__gte=since.isoformat())
    return event_groups(events, since=since, all_url=all_url)


def recent_alerts(now: datetime) -> AlertPanel:
    """Warnings and errors of the last 24 hours but queue-wait alerts (their own panel), one row per type and task."""
    since = now - ALERTS_WINDOW
    events = Event.objects.filter(severity__in=(Severity.WARN, Severity.ERROR), created_at__gte=since).exclude(
        type=EventType.TASK_QUEUE_WAIT_EXCEEDED
    )
    return event_groups(
        events, since=since, all_url=events_url(severity__in="warn,error", created_at__gte=since.isoformat())
    )


def charts(days: int = CHART_DAYS) -> tuple[list[Chart], float | None]:
    """Claims, lease conflicts and orphan rate per day, as SVG (from `insight.metrics`), and the pooled orphan rate.

    The orphan rate's headline is pooled (all orphans ÷ all finished attempts of the window),
    and a day on which no attempt finished has no rate: it is not drawn (bug 5: it read as 0 %).
    """
    metrics = fleet_metrics(days=days)
    axis = [date.fromisoformat(point["day"]) for point in metrics["claims"]]
    claims = Stack("claims", "lh-bar-claims", "Claims")
    conflicts = Stack("conflicts", "lh-bar-refused", "Conflicts")
    orphan_rate = metrics["orphan_rate"]
    pooled = pooled_orphan_rate(orphan_rate)
    chart_list = [
        Chart(
            title="Claims per day",
            description="Attempts claimed each day.",
            svg=bar_chart(axis, [{"claims": p["value"]} for p in metrics["claims"]], stacks=[claims], label="Claims"),
        ),
        Chart(
            title="Lease conflicts per day",
            description="Claims refused as TASK_TAKEN plus contested writes.",
            svg=bar_chart(
                axis,
                [{"conflicts": p["value"]} for p in metrics["lease_conflicts"]],
                stacks=[conflicts],
                label="Lease conflicts",
            ),
        ),
        Chart(
            title="Orphan rate per day",
            description="Orphan branches found ÷ attempts finished; days with none finished are not drawn.",
            svg=rate_chart(
                axis,
                [p["value"] if p["finished"] else None for p in orphan_rate],
                details=[f"{p['orphans']} orphan branches / {p['finished']} attempts finished" for p in orphan_rate],
                label="Orphan rate",
                headline=pooled,
            ),
        ),
    ]
    return chart_list, pooled


SPEND_DAYS = 7


@dataclass(frozen=True)
class SpendPanel:
    """SPEC §19: spend per UTC day and the top spenders (`insight.spending`)."""

    days: int
    per_day: list[tuple[date, int, Decimal]]
    agents: list[Spend]
    tasks: list[Spend]

    @property
    def any(self) -> bool:
        return any(tokens or cost for _, tokens, cost in self.per_day) or bool(self.tasks)


def spend_panel(now: datetime, days: int = SPEND_DAYS) -> SpendPanel:
    today = now.date()
    return SpendPanel(
        days=days,
        per_day=spend_per_day(today=today, days=days),
        agents=top_agents(today=today, days=days),
        tasks=top_tasks(),
    )


def build_dashboard(*, now: datetime, shown: frozenset[str] | None = None) -> Dashboard:
    """The dashboard's panels named in `shown` (every panel when None), each read only if shown."""
    shown = frozenset(DASHBOARD_PANELS) if shown is None else shown
    dashboard = Dashboard(now=now, shown=shown)
    if shown & {"status_table", "live_leases", "quarantined"}:
        dashboard.projects, dashboard.status_totals, dashboard.quarantined = status_table(now)
    if shown & {"expiring"}:
        dashboard.expiring, dashboard.expiring_count = expiring_leases(now)
    if "charts" in shown:
        dashboard.charts, dashboard.orphan_rate = charts()
    if "open_findings" in shown:
        dashboard.findings = findings_by_condition()
    if "incidents" in shown:
        dashboard.incidents, dashboard.incidents_unacknowledged = open_incidents(now)
    if "findings" in shown:
        dashboard.finding_panel = finding_groups()
    if shown & {"queue_alerts", "recent_alerts"}:
        with postgres_plan(PANEL_PLAN):
            if "queue_alerts" in shown:
                dashboard.queue_alerts = queue_wait_alerts(now)
            if "recent_alerts" in shown:
                dashboard.recent_alerts = recent_alerts(now)
    if "jobs" in shown:
        dashboard.jobs = jobs_view(now)
    if "ready" in shown:
        claimable = claimable_tasks(project=None, now=now, by_anyone=True, holds=HOLDS_SET)
        # Counted up to a bound, not over every ready task (a backlog of 300,000 ready tasks is read to
        # the end by a full count): the planner stops at the bound's row.
        dashboard.claimable, dashboard.claimable_more = count_up_to(
            claimable.values("id").order_by(), CLAIMABLE_COUNTED
        )
    if "spend" in shown:
        dashboard.spend = spend_panel(now)
    return dashboard
