"""The admin index as a fleet dashboard (SPEC §10).

Everything is read against one reading of the clock and with a bounded
number of queries, each served by an index: tasks by effective status per
project (`leases.selectors.with_lease_state`), leases expiring in the next 10
minutes (the partial index on active leases), unresolved findings by
condition, queue-wait alerts and warn/error events of the recent past (the
event type/time and time indexes), and 30 days of fleet metrics
(`leases.metrics`) drawn as server-rendered SVG.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, field
from datetime import date, datetime, timedelta
from decimal import Decimal
from typing import Any
from urllib.parse import urlencode

from django.db.models import Count
from django.urls import reverse
from django.utils.safestring import SafeString

from console.base import duration
from console.charts import Stack, bar_chart, rate_chart
from console.timeline import TimelineItem, timeline_items, with_actors
from leases.metrics import fleet_metrics
from leases.models import Attempt
from leases.reconciliation.models import UNRESOLVED_STATUSES, Condition, Finding, FindingStatus
from leases.selectors import IN_PROGRESS, live_attempts, with_lease_state
from leases.spending import Spend, spend_per_day, top_agents, top_tasks
from ledger.models import Event, EventType, Project, Severity, Task, TaskStatus

EXPIRING_WINDOW = timedelta(minutes=10)
EXPIRING_SHOWN = 15
QUEUE_WAIT_WINDOW = timedelta(hours=24)
ALERTS_WINDOW = timedelta(days=7)
ALERTS_SHOWN = 15
CHART_DAYS = 30
# Columns of the status table, in the order a reader scans a fleet.
STATUS_COLUMNS: tuple[tuple[str, str], ...] = (
    (IN_PROGRESS, "In progress"),
    (TaskStatus.READY, "Ready"),
    (TaskStatus.OPEN, "Open"),
    (TaskStatus.BLOCKED, "Blocked"),
    (TaskStatus.REVIEW, "Review"),
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
    expiring_more: bool = False
    findings: list[FindingRow] = field(default_factory=list)
    queue_alerts: list[TimelineItem] = field(default_factory=list)
    recent_alerts: list[TimelineItem] = field(default_factory=list)
    charts: list[Chart] = field(default_factory=list)
    spend: SpendPanel | None = None

    @property
    def live_leases(self) -> int:
        return next((cell.count for cell in self.status_totals if cell.status == IN_PROGRESS), 0)

    @property
    def ready(self) -> int:
        return next((cell.count for cell in self.status_totals if cell.status == TaskStatus.READY), 0)

    @property
    def open_findings(self) -> int:
        return sum(row.open for row in self.findings)


def _task_list_url(**filters: Any) -> str:
    return reverse("admin:ledger_task_changelist") + ("?" + urlencode(filters) if filters else "")


# Passed unpacked: the annotation is invisible to the type checker's field lookup.
GROUPING = ("project_id", "effective_status")


def status_table(now: datetime) -> tuple[list[ProjectRow], list[StatusCell]]:
    """Tasks by effective status per (non-archived) project, one GROUP BY over the annotation."""
    projects = list(Project.objects.filter(archived_at__isnull=True).order_by("slug"))
    counts: dict[int, dict[str, int]] = defaultdict(dict)
    rows = (
        with_lease_state(Task.objects.filter(project__archived_at__isnull=True), now=now)
        .order_by()
        .values(*GROUPING)
        .annotate(n=Count("id"))
    )
    for row in rows:
        counts[row["project_id"]][row["effective_status"]] = row["n"]
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
    return table, total_cells


def expiring_leases(now: datetime) -> tuple[list[ExpiringLease], bool]:
    """Live leases that lapse within 10 minutes, soonest first (the sweep's partial index)."""
    attempts = list(
        live_attempts(now)
        .filter(lease_expires_at__lte=now + EXPIRING_WINDOW)
        .select_related("task", "agent")
        .order_by("lease_expires_at")[: EXPIRING_SHOWN + 1]
    )
    shown = [
        ExpiringLease(
            attempt=attempt,
            left=duration((attempt.lease_expires_at - now).total_seconds()),
            urgent=(attempt.lease_expires_at - now) < timedelta(minutes=1),
            task_url=reverse("admin:ledger_task_change", args=[attempt.task_id]),
            attempt_url=reverse("admin:leases_attempt_change", args=[attempt.pk]),
        )
        for attempt in attempts[:EXPIRING_SHOWN]
    ]
    return shown, len(attempts) > EXPIRING_SHOWN


def findings_by_condition() -> list[FindingRow]:
    """Unresolved findings per condition: open and acknowledged (the partial index on unresolved)."""
    counts: dict[str, dict[str, int]] = defaultdict(dict)
    rows = (
        Finding.objects.filter(status__in=UNRESOLVED_STATUSES)
        .order_by()
        .values("condition", "status")
        .annotate(n=Count("id"))
    )
    for row in rows:
        counts[row["condition"]][row["status"]] = row["n"]
    base = reverse("admin:leases_finding_changelist")
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


def queue_wait_alerts(now: datetime) -> list[TimelineItem]:
    events = Event.objects.filter(type=EventType.TASK_QUEUE_WAIT_EXCEEDED, created_at__gte=now - QUEUE_WAIT_WINDOW)
    return timeline_items(list(with_actors(events).order_by("-id")[:ALERTS_SHOWN]))


def recent_alerts(now: datetime) -> list[TimelineItem]:
    events = Event.objects.filter(severity__in=(Severity.WARN, Severity.ERROR), created_at__gte=now - ALERTS_WINDOW)
    return timeline_items(list(with_actors(events).order_by("-id")[:ALERTS_SHOWN]))


def charts(days: int = CHART_DAYS) -> list[Chart]:
    """Claims, lease conflicts and orphan rate per day, as SVG (from `leases.metrics`)."""
    metrics = fleet_metrics(days=days)
    axis = [date.fromisoformat(point["day"]) for point in metrics["claims"]]
    claims = Stack("claims", "lh-bar-claims", "Claims")
    conflicts = Stack("conflicts", "lh-bar-refused", "Conflicts")
    orphan_rate = metrics["orphan_rate"]
    return [
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
            description="Orphan branches found ÷ attempts finished.",
            svg=rate_chart(
                axis,
                [p["value"] for p in orphan_rate],
                details=[f"{p['orphans']} orphan branches / {p['finished']} attempts finished" for p in orphan_rate],
                label="Orphan rate",
            ),
        ),
    ]


SPEND_DAYS = 7


@dataclass(frozen=True)
class SpendPanel:
    """SPEC §19: spend per UTC day and the top spenders (`leases.spending`)."""

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


def build_dashboard(*, now: datetime) -> Dashboard:
    projects, totals = status_table(now)
    expiring, more = expiring_leases(now)
    return Dashboard(
        now=now,
        projects=projects,
        status_totals=totals,
        expiring=expiring,
        expiring_more=more,
        findings=findings_by_condition(),
        queue_alerts=queue_wait_alerts(now),
        recent_alerts=recent_alerts(now),
        charts=charts(),
        spend=spend_panel(now),
    )
