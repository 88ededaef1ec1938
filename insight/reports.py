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

Read from the report's rollup (`insight.models.report_tally`: attempts ended per
UTC day, project, agent, class, status, reason and lead-time bucket, kept by
triggers), never from the attempts: the page sums at most one row per key and
day of the range, whatever the number of attempts in it (issue 32). The lead
times are bucketed 2 % wide with their sum kept per bucket, so the median and
90th percentile are their bucket's mean: within 2 % of the exact nearest-rank
values, and exact when the bucket holds one lead time. The orphans are counted from the findings
(the first-seen index).
"""

from __future__ import annotations

import math
from collections import Counter, defaultdict
from dataclasses import dataclass, field
from datetime import UTC, date, datetime, time, timedelta

from django.db import connection
from django.db.models import Count

from core.errors import ValidationFailed
from insight.models.report_tally import NO_LEAD
from leases.models import AttemptStatus
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
    # Completed attempts per lead-time bucket (`insight.models.report_tally.LeadBucket`), and their lead
    # times added up per bucket.
    lead_buckets: Counter[int] = field(default_factory=Counter)
    lead_sums: dict[int, float] = field(default_factory=lambda: defaultdict(float))
    reasons: dict[str, int] = field(default_factory=lambda: defaultdict(int))

    @property
    def lead_median(self) -> float | None:
        return bucket_percentile(self.lead_buckets, self.lead_sums, 50)

    @property
    def lead_p90(self) -> float | None:
        return bucket_percentile(self.lead_buckets, self.lead_sums, 90)

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


def bucket_percentile(buckets: Counter[int], sums: dict[int, float], rank: int) -> float | None:
    """The nearest-rank percentile of lead times counted per bucket, as the mean of its bucket (seconds):
    within the bucket's 2 % of the exact value, and exact when the bucket holds one lead time."""
    total = sum(buckets.values())
    if not total:
        return None
    wanted = max(1, math.ceil(rank / 100 * total))
    seen = 0
    for bucket in sorted(buckets):
        seen += buckets[bucket]
        if seen >= wanted:
            return sums[bucket] / buckets[bucket]
    return None  # not reached: the counts sum to `total`


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


TALLY_COLUMNS = "agent_id, task_class, status, failure_reason_code, lead_bucket, n, lead_seconds"
TALLY_READ = """
SELECT agent_id, task_class, status, failure_reason_code, lead_bucket, sum(n), sum(lead_seconds) FROM (
    SELECT {columns} FROM insight_reportdaytally WHERE day >= %s AND day <= %s {project}
    UNION ALL
    SELECT {columns} FROM insight_reportdaytallychange WHERE day >= %s AND day <= %s {project}
) AS counted GROUP BY agent_id, task_class, status, failure_reason_code, lead_bucket HAVING sum(n) <> 0
"""


def _tallied(first: date, last: date, project: Project | None) -> list[tuple[int, str, str, str, int, int, float]]:
    """(agent id, class, status, reason, lead bucket, attempts) ended in the range: folded rows plus the
    changes not folded yet, in one statement (one snapshot)."""
    bounds: list[date | int] = [first, last, *([project.pk] if project is not None else [])]
    sql = TALLY_READ.format(columns=TALLY_COLUMNS, project="AND project_id = %s" if project is not None else "")
    with connection.cursor() as cursor:
        cursor.execute(sql, bounds * 2)
        rows = cursor.fetchall()
    return [(int(a), str(c), str(s), str(r or ""), int(b), int(n), float(t)) for a, c, s, r, b, n, t in rows]


def fleet_report(*, first: date, last: date, project: Project | None = None) -> Report:
    start, end = _bounds(first, last)
    by_agent: dict[str, Breakdown] = {}
    by_class: dict[str, Breakdown] = {}
    total = Breakdown(name="All")

    def targets(handle: str, task_class: str) -> tuple[Breakdown, Breakdown, Breakdown]:
        return (
            by_agent.setdefault(handle, Breakdown(name=handle)),
            by_class.setdefault(task_class or NO_CLASS, Breakdown(name=task_class or NO_CLASS)),
            total,
        )

    counts = _tallied(first, last, project)
    handles = dict(Agent.objects.filter(pk__in={row[0] for row in counts}).values_list("pk", "handle"))
    finished = 0
    for agent_id, task_class, status, reason, bucket, n, lead_seconds in counts:
        finished += n
        for target in targets(handles.get(agent_id, f"agent {agent_id}"), task_class):
            if status == AttemptStatus.COMPLETED:
                target.completed += n
                if bucket != NO_LEAD:
                    target.lead_buckets[bucket] += n
                    target.lead_sums[bucket] += lead_seconds
            elif status == AttemptStatus.FAILED:
                target.failed += n
                target.reasons[reason or "other"] += n
            elif status == AttemptStatus.EXPIRED:
                target.expired += n
            elif status == AttemptStatus.REVOKED:
                target.revoked += n
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
