"""The managers' report over a chosen range of UTC days: throughput, lead time, failure reasons, orphan rate.

- **throughput**: attempts completed in the range (the task moved to done or
  review), by agent and by task class;
- **lead time**: from the task's first becoming ready (created ready, or its
  first `task.status_changed` to ready) to the completed attempt's finish;
  median and 90th percentile (nearest rank), by agent and by task class;
- **failure reasons**: failed attempts by reason code, by agent and by task
  class; expired and revoked attempts counted beside them;
- **orphan rate**, pooled: orphan branches first seen in the range ÷ attempts
  finished in the range.

Bounded by the range, never by all-time history: every query filters on
`finished_at` (the status/finished index) or `first_seen_at`. The counts are
grouped in the database; the lead times read the completed attempts of the
range joined to their task's first ready time (`TaskFirstReady`, kept by a
trigger in the transaction that appends the ready event: `insight.models.rollups`).
"""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import UTC, date, datetime, time, timedelta

from django.db import connection
from django.db.models import BigIntegerField, CharField, Count, Func, QuerySet
from django.db.models.functions import Cast

from core.errors import ValidationFailed
from leases.models import Attempt, AttemptStatus
from ledger.models import Agent, Project
from reconciliation.models import Condition, Finding

MAX_RANGE_DAYS = 366
NO_CLASS = "(no class)"


@dataclass
class Breakdown:
    """One row of a by-agent or by-class table."""

    name: str
    completed: int = 0
    failed: int = 0
    expired: int = 0
    revoked: int = 0
    lead_times: list[float] = field(default_factory=list)
    reasons: dict[str, int] = field(default_factory=lambda: defaultdict(int))

    @property
    def lead_median(self) -> float | None:
        return percentile(self.lead_times, 50)

    @property
    def lead_p90(self) -> float | None:
        return percentile(self.lead_times, 90)

    @property
    def reason_list(self) -> list[tuple[str, int]]:
        return sorted(self.reasons.items(), key=lambda item: (-item[1], item[0]))


@dataclass
class Report:
    first: date
    last: date
    by_agent: list[Breakdown]
    by_class: list[Breakdown]
    total: Breakdown
    orphans: int
    finished: int

    @property
    def orphan_rate(self) -> float | None:
        return self.orphans / self.finished if self.finished else None

    @property
    def days(self) -> int:
        return (self.last - self.first).days + 1


def percentile(values: list[float], rank: int) -> float | None:
    if not values:
        return None
    ordered = sorted(values)
    return ordered[max(0, math.ceil(rank / 100 * len(ordered)) - 1)]


def report_range(first: date | None, last: date | None, *, today: date) -> tuple[date, date]:
    last = last or today
    first = first or last - timedelta(days=29)
    if first > last:
        raise ValidationFailed("The range starts after it ends.", details={"fields": {"since": ["after until"]}})
    if (last - first).days + 1 > MAX_RANGE_DAYS:
        raise ValidationFailed(
            f"The range is at most {MAX_RANGE_DAYS} days.", details={"fields": {"since": ["too long"]}}
        )
    return first, last


def _bounds(first: date, last: date) -> tuple[datetime, datetime]:
    return datetime.combine(first, time.min, tzinfo=UTC), datetime.combine(
        last + timedelta(days=1), time.min, tzinfo=UTC
    )


def _lead_seconds(finished_at: datetime | None, ready_at: datetime | None) -> float | None:
    if ready_at is None or finished_at is None or finished_at < ready_at:
        return None
    return (finished_at - ready_at).total_seconds()


def _naive_utc(text: str | None) -> datetime | None:
    """A stored SQLite datetime as naive UTC (differences are all the lead time needs)."""
    if text is None:
        return None
    moment = datetime.fromisoformat(text)
    return moment if moment.tzinfo is None else moment.astimezone(UTC).replace(tzinfo=None)


class _EpochMicroseconds(Func):
    """PostgreSQL: `a - b` as whole microseconds (EXTRACT returns an exact numeric there)."""

    arg_joiner = " - "
    template = "(EXTRACT(EPOCH FROM (%(expressions)s)) * 1000000)::bigint"
    output_field = BigIntegerField()


def _lead_rows(completed: QuerySet[Attempt]) -> Iterator[tuple[int, str, float | None]]:
    """(agent id, task class, lead seconds or None) of each completed attempt.

    Converting two datetimes a row in Python was most of the report's time at 50,000 completed
    attempts, on both databases; the values are the same `timedelta.total_seconds()` would give.
    """
    if connection.vendor == "postgresql":
        micros = completed.annotate(lead_us=_EpochMicroseconds("finished_at", "task__first_ready__ready_at"))
        for agent_id, task_class, lead_us in micros.values_list("agent_id", "task__task_class", "lead_us").iterator(
            chunk_size=5000
        ):
            yield agent_id, task_class, (lead_us / 1_000_000 if lead_us is not None and lead_us >= 0 else None)
        return
    # SQLite stores UTC text, which the C parser reads ten times faster than Django's converter.
    as_text = completed.annotate(
        finished_text=Cast("finished_at", CharField()), ready_text=Cast("task__first_ready__ready_at", CharField())
    ).values_list("agent_id", "task__task_class", "finished_text", "ready_text")
    for agent_id, task_class, finished_text, ready_text in as_text.iterator(chunk_size=5000):
        yield agent_id, task_class, _lead_seconds(_naive_utc(finished_text), _naive_utc(ready_text))


def fleet_report(*, first: date, last: date, project: Project | None = None) -> Report:
    start, end = _bounds(first, last)
    ended = Attempt.objects.filter(finished_at__gte=start, finished_at__lt=end).exclude(status=AttemptStatus.ACTIVE)
    if project is not None:
        ended = ended.filter(task__project=project)
    by_agent: dict[str, Breakdown] = {}
    by_class: dict[str, Breakdown] = {}
    total = Breakdown(name="All")

    def targets(handle: str, task_class: str) -> tuple[Breakdown, Breakdown, Breakdown]:
        return (
            by_agent.setdefault(handle, Breakdown(name=handle)),
            by_class.setdefault(task_class or NO_CLASS, Breakdown(name=task_class or NO_CLASS)),
            total,
        )

    # Counts in the database: one row per agent, class, status and reason, not one per attempt;
    # by agent id (the handles are read once after), which spares a join per attempt.
    counts = list(
        ended.order_by()
        .values_list("agent_id", "task__task_class", "status", "failure_reason_code")
        .annotate(n=Count("id"))
    )
    handles = dict(Agent.objects.filter(pk__in={row[0] for row in counts}).values_list("pk", "handle"))

    def handle(agent_id: int) -> str:
        # An attempt may have finished between the two reads: its agent is read then.
        if agent_id not in handles:
            handles[agent_id] = Agent.objects.values_list("handle", flat=True).get(pk=agent_id)
        return handles[agent_id]

    finished = 0
    for agent_id, task_class, status, reason, n in counts:
        finished += n
        for target in targets(handle(agent_id), task_class):
            if status == AttemptStatus.COMPLETED:
                target.completed += n
            elif status == AttemptStatus.FAILED:
                target.failed += n
                target.reasons[reason or "other"] += n
            elif status == AttemptStatus.EXPIRED:
                target.expired += n
            elif status == AttemptStatus.REVOKED:
                target.revoked += n
    # Lead times need each completed attempt; its task's first ready time is one join away
    # (`TaskFirstReady`, kept by a trigger on the event table).
    leads: dict[tuple[int, str], list[float]] = defaultdict(list)
    for agent_id, task_class, lead in _lead_rows(ended.filter(status=AttemptStatus.COMPLETED).order_by()):
        if lead is not None:
            leads[(agent_id, task_class)].append(lead)
    for (agent_id, task_class), values in leads.items():
        for target in targets(handle(agent_id), task_class):
            target.lead_times.extend(values)
    findings = Finding.objects.filter(
        condition=Condition.ORPHAN_BRANCH, first_seen_at__gte=start, first_seen_at__lt=end
    )
    if project is not None:
        findings = findings.filter(project=project)
    orphans = findings.aggregate(n=Count("id"))["n"]

    def ordered(table: dict[str, Breakdown]) -> list[Breakdown]:
        return sorted(table.values(), key=lambda row: (-row.completed, -row.failed, row.name))

    return Report(
        first=first,
        last=last,
        by_agent=ordered(by_agent),
        by_class=ordered(by_class),
        total=total,
        orphans=orphans,
        finished=finished,
    )
