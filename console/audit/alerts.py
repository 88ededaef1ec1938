"""Alerts grouped Sentry-style: one row per condition (event type or finding condition) and project, with count,
first and last seen, named by its latest item (issue 32: per-task groups made "3127 in 3089 groups").

The dashboard's panels (queue-wait alerts, warnings and errors, open findings)
are built here, each from a bounded number of queries over a recent window
(the event type/time and time indexes, the partial index on unresolved
findings): one GROUP BY for the top groups, one count of groups, one count of
items, one read of each shown group's latest row. A flood of one condition
in one project is one row, so it cannot bury the rest.

Every row names its task by key and title (linked), and the environment or
branch when the event or finding has one; durations read as "12 d 21 h".
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from typing import Any
from urllib.parse import urlencode

from django.db.models import Count, Max, Min, Q, QuerySet
from django.urls import reverse

from ledger.models import Event, EventType, Task
from reconciliation.models import UNRESOLVED_FINDING_STATUSES, Condition, Finding, FindingStatus, SubjectType

PANEL_SHOWN = 5

EVENT_LABELS: dict[str, str] = {
    EventType.TASK_QUEUE_WAIT_EXCEEDED: "Queue wait exceeded",
    EventType.TASK_CONTESTED: "Changed under a live lease",
    EventType.ATTEMPT_REVOKED: "Lease revoked",
    EventType.ATTEMPT_EXPIRED: "Lease expired",
    EventType.ATTEMPT_DISCARDED: "Attempt's work discarded",
    EventType.FINDING_OPENED: "Finding opened",
    EventType.ENVIRONMENT_QUARANTINED: "Environment quarantined",
    EventType.TASK_REASSIGNED: "Task reassigned",
}


def human_duration(seconds: float | None) -> str:
    """`42 s`, `4 min 10 s`, `5 h 07 min`, `12 d 21 h`: how long, for a person."""
    if seconds is None:
        return "—"
    total = int(seconds)
    sign = "-" if total < 0 else ""
    total = abs(total)
    if total < 60:
        return f"{sign}{total} s"
    minutes, secs = divmod(total, 60)
    if minutes < 60:
        return f"{sign}{minutes} min {secs:02d} s"
    hours, minutes = divmod(minutes, 60)
    if hours < 24:
        return f"{sign}{hours} h {minutes:02d} min"
    days, hours = divmod(hours, 24)
    return f"{sign}{days} d {hours} h"


def moment_utc(value: datetime | None) -> str:
    return value.strftime("%Y-%m-%d %H:%M:%S UTC") if value else "—"


def event_label(event_type: str) -> str:
    return EVENT_LABELS.get(event_type, event_type)


def readable_summary(event_type: str, payload: Any) -> str:
    """One sentence a person reads instead of the payload's JSON (the events CSV carries both)."""
    data = payload if isinstance(payload, dict) else {}

    def get(key: str) -> str:
        value = data.get(key)
        return "" if value is None else str(value)

    if event_type == EventType.TASK_QUEUE_WAIT_EXCEEDED:
        waited = data.get("waited_seconds")
        return f"ready and unclaimed for {human_duration(waited if isinstance(waited, int | float) else None)}"
    if event_type == EventType.TASK_CONTESTED:
        return f"{get('actor')} moved it {get('from')} → {get('to')} under {get('holder')}'s live lease"
    if event_type == EventType.ATTEMPT_REVOKED:
        return f"lease of {get('holder')} revoked: {get('reason')}"
    if event_type == EventType.TASK_REASSIGNED:
        return f"reassigned to {get('to') or get('agent') or get('reserved_for')}: {get('reason')}".rstrip(": ")
    if event_type == EventType.ATTEMPT_EXPIRED:
        return "lease expired without a finish"
    if event_type in (EventType.FINDING_OPENED, EventType.FINDING_RESOLVED, EventType.FINDING_ACKNOWLEDGED):
        condition = get("condition")
        label = dict(Condition.choices).get(condition, condition)
        verb = event_type.split(".", 1)[1]
        return f"{label} {verb}: {get('subject_type')} {get('subject')}".strip()
    if event_type == EventType.ATTEMPT_FINISHED:
        return f"finished {get('status') or get('outcome')}".strip()
    if event_type == EventType.TASK_STATUS_CHANGED:
        return f"{get('from')} → {get('to')}"
    pairs = [f"{key} {value}" for key, value in list(data.items())[:4] if value not in (None, "", [], {})]
    return "; ".join(pairs)[:300]


def where_of(payload: Any, fallback: str = "") -> str:
    """The environment or branch an alert concerns, when its payload names one."""
    data = payload if isinstance(payload, dict) else {}
    for key in ("environment", "branch"):
        value = data.get(key)
        if value:
            return f"{key} {value}"
    if data.get("subject_type") in (SubjectType.BRANCH, SubjectType.ENVIRONMENT, SubjectType.WORKTREE):
        return f"{data['subject_type']} {data.get('subject', '')}"
    return fallback


@dataclass(frozen=True)
class AlertGroup:
    code: str
    label: str
    severity: str
    count: int
    first_seen: datetime
    last_seen: datetime
    detail: str
    url: str
    task_key: str = ""
    task_title: str = ""
    task_url: str = ""
    where: str = ""
    project: str = ""

    @property
    def first_seen_text(self) -> str:
        return moment_utc(self.first_seen)

    @property
    def last_seen_text(self) -> str:
        return moment_utc(self.last_seen)


@dataclass(frozen=True)
class AlertPanel:
    groups: list[AlertGroup] = field(default_factory=list)
    total_groups: int = 0
    total_items: int = 0
    all_url: str = ""

    @property
    def more(self) -> bool:
        return self.total_groups > len(self.groups)


def events_url(**filters: Any) -> str:
    return reverse("admin:ledger_event_changelist") + ("?" + urlencode(filters) if filters else "")


def _task_fields(task: Task | None) -> dict[str, str]:
    if task is None:
        return {}
    return {
        "task_key": task.key,
        "task_title": task.title,
        "task_url": reverse("admin:ledger_task_change", args=[task.pk]),
    }


# PostgreSQL: a panel's window is read as a bitmap of its type's or severity's index (`event_type_time`,
# `event_severity_time`), in one process. Left to itself the planner walked `event_created_at` over the
# day's every event in parallel workers, filtering out all but the panel's (149,000 read for 18,500 at
# 1M tasks: 33 and 25 ms, against 14 and 17: docs/performance.md, "The dashboard's alert panels"). The
# panels' reads run inside `core.db.postgres_plan(PANEL_PLAN)`.
PANEL_PLAN = {"enable_indexscan": "off", "max_parallel_workers_per_gather": "0"}


def event_groups(events: QuerySet[Event], *, since: datetime, all_url: str, shown: int = PANEL_SHOWN) -> AlertPanel:
    """`events` grouped by (type, project), newest group first; the top `shown` named by their latest event.

    One aggregate over the window read whole (a group is a type and a project: tens of rows), the totals
    counted from it: the window's events are read once, not three times (issue 33: a day of warnings is
    100x larger at 1M tasks). Read it inside `core.db.postgres_plan(PANEL_PLAN)`."""
    grouped = list(
        events.order_by()
        .values("type", "project_id")
        .annotate(n=Count("id"), first=Min("created_at"), last=Max("created_at"), latest=Max("id"))
    )
    top = sorted(grouped, key=lambda row: -row["latest"])[:shown]
    latest = Event.objects.select_related("task", "project").in_bulk([row["latest"] for row in top])
    groups = []
    for row in top:
        event = latest[row["latest"]]
        task = event.task
        filters: dict[str, Any] = {"type": row["type"], "created_at__gte": since.isoformat()}
        if row["project_id"] is not None:
            filters["project__id__exact"] = row["project_id"]
        groups.append(
            AlertGroup(
                code=row["type"],
                label=event_label(row["type"]),
                severity=event.severity,
                count=row["n"],
                first_seen=row["first"],
                last_seen=row["last"],
                detail=readable_summary(event.type, event.payload),
                url=events_url(**filters),
                where=where_of(event.payload),
                project=event.project.slug if event.project else "",
                **_task_fields(task),
            )
        )
    return AlertPanel(
        groups=groups, total_groups=len(grouped), total_items=sum(row["n"] for row in grouped), all_url=all_url
    )


def _finding_where(finding: Finding) -> str:
    if finding.subject_type in (SubjectType.BRANCH, SubjectType.ENVIRONMENT, SubjectType.WORKTREE):
        return f"{finding.subject_type} {finding.subject_key}"
    for key in ("branch", "environment"):
        value = (finding.detail or {}).get(key) if isinstance(finding.detail, dict) else None
        if value:
            return f"{key} {value}"
    return ""


def finding_task(finding: Finding) -> Task | None:
    if finding.task is not None:
        return finding.task
    if finding.attempt is not None:
        return finding.attempt.task
    return None


def finding_groups(*, shown: int = PANEL_SHOWN) -> AlertPanel:
    """Unresolved findings, one row per condition and project (count, first and last seen), named by the latest."""
    unresolved = Finding.objects.filter(status__in=UNRESOLVED_FINDING_STATUSES)
    grouped = (
        unresolved.order_by()
        .values("condition", "project_id")
        .annotate(
            n=Count("id"),
            open=Count("id", filter=Q(status=FindingStatus.OPEN)),
            first=Min("first_seen_at"),
            last=Max("last_seen_at"),
            latest=Max("id"),
        )
    )
    rows = sorted(grouped, key=lambda row: row["last"], reverse=True)
    top = rows[:shown]
    latest = Finding.objects.select_related("task", "attempt__task", "project").in_bulk([row["latest"] for row in top])
    base = reverse("admin:reconciliation_finding_changelist")
    labels = dict(Condition.choices)
    groups = []
    for row in top:
        finding = latest[row["latest"]]
        acknowledged = row["n"] - row["open"]
        detail = f"{row['open']} open" + (f", {acknowledged} acknowledged" if acknowledged else "")
        groups.append(
            AlertGroup(
                code=row["condition"],
                label=str(labels.get(row["condition"], row["condition"])),
                severity="error" if row["open"] else "warn",
                count=row["n"],
                first_seen=row["first"],
                last_seen=row["last"],
                detail=detail,
                url=base
                + "?"
                + urlencode(
                    {
                        "condition__exact": row["condition"],
                        "project__id__exact": row["project_id"],
                        "status__exact": "unresolved",
                    }
                ),
                where=_finding_where(finding),
                project=finding.project.slug,
                **_task_fields(finding_task(finding)),
            )
        )
    return AlertPanel(groups=groups, total_groups=len(rows), total_items=sum(row["n"] for row in rows), all_url=base)
