"""Reads of what the fleet spent (SPEC §19): per UTC day and the top spenders, from the usage totals.

`leases.services.usage` writes the totals; the dashboard (and the metrics) read them here.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import date, timedelta
from decimal import Decimal

from django.db.models import F, Sum

from leases.models import AgentDailyUsage, ProjectDailyUsage, TaskUsage

TOP_SPENDERS = 5


@dataclass(frozen=True)
class Spend:
    name: str
    tokens: int
    cost_usd: Decimal


def spend_per_day(*, today: date, days: int) -> list[tuple[date, int, Decimal]]:
    """(day, tokens, dollars) for each of the last `days` UTC days up to `today`, oldest first; zero days included."""
    first = today - timedelta(days=days - 1)
    rows = (
        ProjectDailyUsage.objects.filter(day__gte=first, day__lte=today)
        .values("day")
        .annotate(spent_tokens=Sum(F("input_tokens") + F("output_tokens")), cost=Sum("cost_usd"))
    )
    found = {row["day"]: (int(row["spent_tokens"] or 0), row["cost"] or Decimal(0)) for row in rows}
    return [(day, *found.get(day, (0, Decimal(0)))) for day in (first + timedelta(days=n) for n in range(days))]


def top_agents(*, today: date, days: int, limit: int = TOP_SPENDERS) -> list[Spend]:
    """The agents that spent most (dollars, then tokens) over the last `days` UTC days."""
    rows = (
        AgentDailyUsage.objects.filter(day__gte=today - timedelta(days=days - 1), day__lte=today)
        .values("agent__handle")
        .annotate(spent_tokens=Sum(F("input_tokens") + F("output_tokens")), cost=Sum("cost_usd"))
        .order_by("-cost", "-spent_tokens", "agent__handle")[:limit]
    )
    return [Spend(row["agent__handle"], int(row["spent_tokens"] or 0), row["cost"] or Decimal(0)) for row in rows]


def top_tasks(*, limit: int = TOP_SPENDERS) -> list[Spend]:
    """The tasks whose attempts spent most, all time (dollars, then tokens)."""
    rows = (
        TaskUsage.objects.annotate(spent_tokens=F("input_tokens") + F("output_tokens"))
        .order_by("-cost_usd", "-spent_tokens", "task_id")
        .values("task__key", "spent_tokens", "cost_usd")[:limit]
    )
    return [Spend(row["task__key"], int(row["spent_tokens"]), row["cost_usd"]) for row in rows]
