"""Usage and budgets (SPEC §19): what holder calls report, the totals, the 80 % warning and the 100 % stop.

A holder call (renew, note, git, finish) may carry `usage` increments. Inside
the call's transaction, under the attempt's lock, `record_usage` adds them to
four totals — the attempt, the task, the agent's UTC day, the project's UTC
day — each with a conditional `UPDATE … SET n = n + k` (a missing row is
inserted with ON CONFLICT DO NOTHING first), so concurrent holders never lose
an increment. For each subject that has a budget the total is read back (the
row is locked by our UPDATE: the value is ours plus every committed one), and
`warned_at` / `exhausted_at` are set by an UPDATE conditional on their being
null: of two concurrent calls that cross 80 %, exactly one sets the flag and
writes `budget.warning`.

`budget_refusal` answers BUDGET_EXHAUSTED for a spent budget. Holder writes
other than finish and release call it after recording their usage (the usage
was spent, so it is kept; the call returns the refusal for
`refusals_after_commit` to raise). Claims call `claim_budget_refusal`.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from datetime import date, datetime
from decimal import Decimal
from typing import Any

from django.db.models import F, Model, Q

from core.errors import BudgetExhausted, TaskNotClaimable, ValidationFailed
from core.text import dollars
from leases.models import AgentDailyUsage, Attempt, AttemptUsage, ProjectDailyUsage, TaskUsage
from ledger.actors import Actor
from ledger.models import Agent, EventType, Project, Severity, Task
from ledger.paths import validate_cost, validate_tokens
from ledger.services import event_append

USAGE_FIELDS = ("input_tokens", "output_tokens", "cost_usd")
WARNING_SHARE = Decimal("0.8")
ZERO = Decimal(0)


@dataclass(frozen=True)
class Usage:
    """Increments a holder reports: tokens in and out, and US dollars."""

    input_tokens: int = 0
    output_tokens: int = 0
    cost_usd: Decimal = ZERO

    def is_empty(self) -> bool:
        return not (self.input_tokens or self.output_tokens or self.cost_usd)


def validate_usage(value: Any) -> Usage | None:
    """`{"input_tokens"?, "output_tokens"?, "cost_usd"?}` → Usage (None: none); VALIDATION_ERROR names the field."""
    if value is None or isinstance(value, Usage):
        return value
    if not isinstance(value, Mapping):
        raise ValidationFailed("usage must be an object.", details={"fields": {"usage": ["an object"]}})
    unknown = sorted(str(name) for name in value if name not in USAGE_FIELDS)
    if unknown:
        raise ValidationFailed(
            f"usage has unknown fields: {', '.join(unknown)} (known: {', '.join(USAGE_FIELDS)}).",
            details={"fields": {f"usage.{name}": ["unknown field"] for name in unknown}},
        )
    return Usage(
        input_tokens=validate_tokens(value.get("input_tokens", 0), field="usage.input_tokens"),
        output_tokens=validate_tokens(value.get("output_tokens", 0), field="usage.output_tokens"),
        cost_usd=validate_cost(value.get("cost_usd", 0), field="usage.cost_usd"),
    )


@dataclass(frozen=True)
class Budget:
    """One budgeted subject of a holder call and its limits."""

    scope: str  # "task", "agent" or "project"
    name: str
    model: type[Model]
    key: dict[str, Any]
    tokens: int | None
    cost_usd: Decimal | None
    project_id: int
    task: Task | None = None

    def spent(self, tokens: int, cost: Decimal) -> bool:
        return (self.tokens is not None and tokens >= self.tokens) or (
            self.cost_usd is not None and cost >= self.cost_usd
        )

    def nearly_spent(self, tokens: int, cost: Decimal) -> bool:
        return (self.tokens is not None and tokens >= WARNING_SHARE * self.tokens) or (
            self.cost_usd is not None and cost >= WARNING_SHARE * self.cost_usd
        )

    def refusal(self, tokens: int, cost: Decimal) -> dict[str, Any]:
        return {
            "scope": self.scope,
            "name": self.name,
            "budget_tokens": self.tokens,
            "budget_cost_usd": None if self.cost_usd is None else str(self.cost_usd),
            "spent_tokens": tokens,
            "spent_cost_usd": str(cost),
        }


def _budgets(*, task: Task | None, agent: Agent, project: Project, day: date) -> list[Budget]:
    """The subjects with a budget, among the task, the agent's day and the project's day."""
    found = []
    if task is not None and (task.budget_tokens is not None or task.budget_cost_usd is not None):
        found.append(
            Budget(
                "task",
                task.key,
                TaskUsage,
                {"task_id": task.pk},
                task.budget_tokens,
                task.budget_cost_usd,
                project.pk,
                task,
            )
        )
    if agent.daily_budget_tokens is not None or agent.daily_budget_cost_usd is not None:
        found.append(
            Budget(
                "agent",
                agent.handle,
                AgentDailyUsage,
                {"agent_id": agent.pk, "day": day},
                agent.daily_budget_tokens,
                agent.daily_budget_cost_usd,
                project.pk,
            )
        )
    if project.daily_budget_tokens is not None or project.daily_budget_cost_usd is not None:
        found.append(
            Budget(
                "project",
                project.slug,
                ProjectDailyUsage,
                {"project_id": project.pk, "day": day},
                project.daily_budget_tokens,
                project.daily_budget_cost_usd,
                project.pk,
            )
        )
    return found


def _add(model: type[Model], key: dict[str, Any], usage: Usage, now: datetime) -> None:
    """Add `usage` to row `key` of `model`, race-free: UPDATE; else insert a zero row (or lose to one), UPDATE."""
    increments = {
        "input_tokens": F("input_tokens") + usage.input_tokens,
        "output_tokens": F("output_tokens") + usage.output_tokens,
        "cost_usd": F("cost_usd") + usage.cost_usd,
        "updated_at": now,
    }
    rows = model._default_manager.filter(**key)
    if rows.update(**increments):
        return
    # ON CONFLICT DO NOTHING: a concurrent insert of the same row wins, and our UPDATE then adds to it.
    model._default_manager.bulk_create([model(**key, updated_at=now)], ignore_conflicts=True)
    rows.update(**increments)


def _totals(budget: Budget) -> tuple[int, Decimal, datetime | None, datetime | None]:
    row = (
        budget.model._default_manager.filter(**budget.key)
        .values_list("input_tokens", "output_tokens", "cost_usd", "warned_at", "exhausted_at")
        .first()
    )
    if row is None:
        return 0, ZERO, None, None
    return row[0] + row[1], row[2], row[3], row[4]


def _flag_once(budget: Budget, *, flag: str, now: datetime) -> bool:
    """Set `flag` if still null; True for the one call that set it."""
    return bool(
        budget.model._default_manager.filter(Q(**{f"{flag}__isnull": True}), **budget.key).update(**{flag: now})
    )


def _announce(
    budget: Budget, *, event_type: EventType, tokens: int, cost: Decimal, now: datetime, actor: Actor, attempt: Attempt
) -> None:
    # The event names the task whose call crossed the line, also for an agent's or a project's budget.
    event_append(
        type=event_type,
        actor=actor,
        at=now,
        task=attempt.task,
        attempt_id=attempt.pk,
        severity=Severity.WARN,
        payload=budget.refusal(tokens, cost),
    )


@dataclass(frozen=True)
class Spending:
    """The budgeted subjects of a call and their totals after it (None: not read)."""

    budgets: list[Budget]
    totals: dict[str, tuple[int, Decimal]]

    def refusal(self) -> BudgetExhausted | None:
        for budget in self.budgets:
            tokens, cost = self.totals[budget.scope]
            if budget.spent(tokens, cost):
                return _exhausted(budget, tokens, cost)
        return None


def _spent_text(budget: Budget, tokens: int, cost: Decimal) -> str:
    what = {
        "task": f"task {budget.name}",
        "agent": f"agent {budget.name} today",
        "project": f"project {budget.name} today",
    }
    return f"The budget of {what[budget.scope]} is spent ({tokens} tokens, {dollars(cost)})"


def _exhausted(budget: Budget, tokens: int, cost: Decimal) -> BudgetExhausted:
    """The holder's refusal: it is told how its attempt may still end."""
    return BudgetExhausted(
        f"{_spent_text(budget, tokens, cost)}; finish or release the attempt.", details=budget.refusal(tokens, cost)
    )


def _attempt_subjects(attempt: Attempt) -> tuple[Task, Agent, Project]:
    return attempt.task, attempt.agent, attempt.task.project


def record_usage(attempt: Attempt, usage: Usage | None, *, now: datetime, actor: Actor) -> Spending:
    """Add `usage` to the four totals and raise the once-only warnings; returns the budgeted totals.

    Runs inside the holder call's transaction, the attempt locked. Without
    usage, nothing is written and only budgeted totals are read.
    """
    task, agent, project = _attempt_subjects(attempt)
    day = now.date()
    budgets = _budgets(task=task, agent=agent, project=project, day=day)
    if usage is not None and not usage.is_empty():
        _add(AttemptUsage, {"attempt_id": attempt.pk}, usage, now)
        _add(TaskUsage, {"task_id": task.pk}, usage, now)
        _add(AgentDailyUsage, {"agent_id": agent.pk, "day": day}, usage, now)
        _add(ProjectDailyUsage, {"project_id": project.pk, "day": day}, usage, now)
    totals: dict[str, tuple[int, Decimal]] = {}
    for budget in budgets:
        tokens, cost, warned_at, exhausted_at = _totals(budget)
        totals[budget.scope] = (tokens, cost)
        if warned_at is None and budget.nearly_spent(tokens, cost) and _flag_once(budget, flag="warned_at", now=now):
            _announce(
                budget,
                event_type=EventType.BUDGET_WARNING,
                tokens=tokens,
                cost=cost,
                now=now,
                actor=actor,
                attempt=attempt,
            )
        if exhausted_at is None and budget.spent(tokens, cost) and _flag_once(budget, flag="exhausted_at", now=now):
            _announce(
                budget,
                event_type=EventType.BUDGET_EXHAUSTED,
                tokens=tokens,
                cost=cost,
                now=now,
                actor=actor,
                attempt=attempt,
            )
    return Spending(budgets=budgets, totals=totals)


def budget_refusal(attempt: Attempt, usage: Usage | None, *, now: datetime, actor: Actor) -> BudgetExhausted | None:
    """Record `usage`, then BUDGET_EXHAUSTED if a budget of the attempt is spent (holder writes but finish, release)."""
    return record_usage(attempt, usage, now=now, actor=actor).refusal()


def claim_budget_refusal(
    *,
    task: Task | None,
    agent: Agent,
    project: Project,
    now: datetime,
    scopes: tuple[str, ...] = ("task", "agent", "project"),
) -> TaskNotClaimable | None:
    """TASK_NOT_CLAIMABLE (reason `budget`) when the task's, the agent's or the project's budget is spent today.

    Reads only the budgeted totals: a claim with no budget anywhere reads nothing.
    Without a task (claim-next, before its walk), only the agent's and project's.
    """
    for budget in _budgets(task=task, agent=agent, project=project, day=now.date()):
        if budget.scope not in scopes:
            continue
        tokens, cost, _, _ = _totals(budget)
        if budget.spent(tokens, cost):
            what = task.key if task is not None else f"No task of {project.slug}"
            return TaskNotClaimable(
                f"{what} cannot be claimed (budget): {_spent_text(budget, tokens, cost)}.",
                details={
                    "task": task.key if task is not None else None,
                    "reason": "budget",
                    **budget.refusal(tokens, cost),
                },
            )
    return None
