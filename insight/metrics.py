"""Fleet metrics per day (SPEC §7, §10), shared by `GET /api/v1/metrics/` and the admin dashboard.

Each selector returns a plain list of `{"day": "YYYY-MM-DD", "value": ...}`,
one entry per day of the window, oldest first, zero-filled, so a JSON
endpoint can return it as is and a chart can plot it without gaps. Days are
UTC calendar days; the window ends today by the one clock.

- claims: attempts claimed that day.
- lease conflicts: claims refused as `TASK_TAKEN` (`ClaimRefusalTally`) plus
  contested writes (`task.contested` events) that day.
- orphan rate: orphan branches first found that day ÷ attempts finished
  that day. `value` is 0.0 on a day when no attempt finished; the entry also
  carries the raw `orphans` and `finished` counts so nothing is hidden.

Claims, finishes and contested writes are read from `FleetDayTally` plus the
changes not folded into it yet (`FleetDayTallyChange`), which triggers append
in the writing transaction (`insight.models.rollups`), in one statement: exact
and live, today included, at the cost of one small row per day, project and
agent (and a minute's changes), instead of a month of attempts and events per
read (docs/performance.md).
Refusals and orphan findings are few and counted as they are.
"""

from __future__ import annotations

from collections.abc import Iterable
from datetime import UTC, date, datetime, time, timedelta
from typing import Any, TypedDict

from django.db import connection
from django.db.models import Count, QuerySet, Sum
from django.db.models.functions import Substr, TruncDate

from core.errors import ValidationFailed
from insight.models import FleetDayTally, FleetDayTallyChange
from leases.models import ClaimRefusalTally
from ledger import clock
from ledger.models import Agent, Project
from ledger.selectors import projects_visible_to
from reconciliation.models import Condition, Finding

DEFAULT_DAYS = 30
MAX_DAYS = 366


class DayValue(TypedDict):
    day: str
    value: float


class OrphanRateDay(DayValue):
    orphans: int
    finished: int


class FleetMetrics(TypedDict):
    days: int
    claims: list[DayValue]
    lease_conflicts: list[DayValue]
    orphan_rate: list[OrphanRateDay]


class _Window:
    """The last `days` UTC days up to today, and how to filter and fill a daily series over them."""

    def __init__(self, *, days: int, today: date | None) -> None:
        if isinstance(days, bool) or not isinstance(days, int) or not 1 <= days <= MAX_DAYS:
            raise ValidationFailed(f"days must be an integer from 1 to {MAX_DAYS}.")
        self.last = today or clock.now().astimezone(UTC).date()
        self.first = self.last - timedelta(days=days - 1)
        self.start = datetime.combine(self.first, time.min, tzinfo=UTC)
        self.end = datetime.combine(self.last + timedelta(days=1), time.min, tzinfo=UTC)

    def days(self) -> list[date]:
        return [self.first + timedelta(days=offset) for offset in range((self.last - self.first).days + 1)]

    def per_day(self, rows: Iterable[dict[str, Any]]) -> dict[date, int]:
        totals: dict[date, int] = {}
        for row in rows:
            day = date.fromisoformat(row["day"]) if isinstance(row["day"], str) else row["day"]
            totals[day] = totals.get(day, 0) + (row["value"] or 0)
        return totals


def _day_of(field: str) -> Any:
    """The UTC day of a datetime column, computed by the database itself.

    On SQLite Django's `TruncDate` calls a Python function once per row (measured: 400 ms for the
    15,000 claims of 30 days, docs/performance.md); SQLite stores datetimes as UTC text
    (`YYYY-MM-DD HH:MM:SS`), so its first ten characters are the day.
    """
    if connection.vendor == "sqlite":
        return Substr(field, 1, 10)
    return TruncDate(field, tzinfo=UTC)


def _count_per_day(queryset: QuerySet[Any], field: str, window: _Window) -> dict[date, int]:
    rows = (
        queryset.filter(**{f"{field}__gte": window.start, f"{field}__lt": window.end})
        .annotate(day=_day_of(field))
        .values("day")
        .annotate(value=Count("id"))
        .order_by()
    )
    return window.per_day(rows)


def fleet_tally_per_day(
    column: str, *, first: date, last: date, project: Project | None = None, visible_to: Agent | None = None
) -> QuerySet[Any]:
    """One counter of the fleet tally summed per day from `first` to `last`: the folded rows and the changes.

    One statement (UNION ALL of the two sums), so one snapshot: a fold
    committing meanwhile is seen whole or not at all. A day may come as two
    rows (folded, pending); `_Window.per_day` adds them. The tally's unique
    index leads with the day; the change table is a minute of writes.
    """
    sums = [
        _scoped(model.objects.all(), "project_id", project, visible_to)
        .filter(day__gte=first, day__lte=last)
        .values("day")
        .annotate(value=Sum(column))
        .order_by()
        for model in (FleetDayTally, FleetDayTallyChange)
    ]
    return sums[0].union(sums[1], all=True)


def _tallied(column: str, window: _Window, project: Project | None, visible_to: Agent | None) -> dict[date, int]:
    rows = fleet_tally_per_day(column, first=window.first, last=window.last, project=project, visible_to=visible_to)
    return window.per_day(rows)


def _scoped(queryset: QuerySet[Any], path: str, project: Project | None, visible_to: Agent | None) -> Any:
    """`queryset` limited to `project`, and to the projects `visible_to` may see
    (`ledger.selectors.projects_visible_to`; None: staff, every project)."""
    if project is not None:
        queryset = queryset.filter(**{path: project.pk})
    if visible_to is not None:
        queryset = queryset.filter(**{f"{path}__in": projects_visible_to(visible_to).values("pk")})
    return queryset


def claims_per_day(
    *,
    days: int = DEFAULT_DAYS,
    project: Project | None = None,
    visible_to: Agent | None = None,
    today: date | None = None,
) -> list[DayValue]:
    """Attempts claimed per day. `visible_to` limits to the projects that agent may see (None: staff, all)."""
    window = _Window(days=days, today=today)
    totals = _tallied("claims", window, project, visible_to)
    return [{"day": day.isoformat(), "value": totals.get(day, 0)} for day in window.days()]


def lease_conflicts_per_day(
    *,
    days: int = DEFAULT_DAYS,
    project: Project | None = None,
    visible_to: Agent | None = None,
    today: date | None = None,
) -> list[DayValue]:
    """Claims refused as taken plus contested writes, per day."""
    window = _Window(days=days, today=today)
    tallies = _scoped(ClaimRefusalTally.objects.all(), "project_id", project, visible_to)
    refused = window.per_day(
        tallies.filter(day__gte=window.first, day__lte=window.last)
        .values("day")
        .annotate(value=Sum("count"))
        .order_by()
    )
    contested = _tallied("contested", window, project, visible_to)
    return [{"day": day.isoformat(), "value": refused.get(day, 0) + contested.get(day, 0)} for day in window.days()]


def orphan_rate_per_day(
    *,
    days: int = DEFAULT_DAYS,
    project: Project | None = None,
    visible_to: Agent | None = None,
    today: date | None = None,
) -> list[OrphanRateDay]:
    """Orphan branches first found per day ÷ attempts finished that day (0.0 when none finished)."""
    window = _Window(days=days, today=today)
    findings = _scoped(Finding.objects.filter(condition=Condition.ORPHAN_BRANCH), "project_id", project, visible_to)
    orphans = _count_per_day(findings, "first_seen_at", window)
    # A finish time means a terminal attempt (CHECK attempt_finished_at_iff_terminal): the tally counts
    # finish times.
    finished = _tallied("finished", window, project, visible_to)
    series: list[OrphanRateDay] = []
    for day in window.days():
        found, ended = orphans.get(day, 0), finished.get(day, 0)
        series.append(
            {
                "day": day.isoformat(),
                "value": round(found / ended, 4) if ended else 0.0,
                "orphans": found,
                "finished": ended,
            }
        )
    return series


def fleet_metrics(
    *,
    days: int = DEFAULT_DAYS,
    project: Project | None = None,
    visible_to: Agent | None = None,
) -> FleetMetrics:
    """All three series over one window, read against one reading of the clock."""
    today = clock.now().astimezone(UTC).date()
    scope: dict[str, Any] = {"days": days, "project": project, "visible_to": visible_to, "today": today}
    return {
        "days": days,
        "claims": claims_per_day(**scope),
        "lease_conflicts": lease_conflicts_per_day(**scope),
        "orphan_rate": orphan_rate_per_day(**scope),
    }


def pooled_orphan_rate(series: Iterable[OrphanRateDay]) -> float | None:
    """All orphan branches found ÷ all attempts finished over the series' days (None when none finished).

    Not the mean of the daily ratios: a quiet day with one attempt would weigh as much as a busy
    one, and a day with none would count as 0 %.
    """
    days = list(series)
    finished = sum(day["finished"] for day in days)
    return round(sum(day["orphans"] for day in days) / finished, 4) if finished else None
