"""Daily budgets of a project or an agent (SPEC §19); a task's budget is one of its own fields (`task_create`, PATCH).

A budget is a limit per UTC day on tokens (input + output) and on US dollars;
null is no limit. Setting one appends `budget.set`; what is spent against it
is counted by `leases.services.usage`.
"""

from __future__ import annotations

from decimal import Decimal
from typing import Any

from core.db import write_transaction
from ledger import clock
from ledger.actors import Actor
from ledger.models import Agent, EventType, Project
from ledger.paths import validate_budget_cost, validate_budget_tokens
from ledger.services.events import event_append

_UNCHANGED: Any = object()


@write_transaction
def budget_set(
    *,
    subject: Project | Agent,
    actor: Actor,
    daily_tokens: int | None = _UNCHANGED,
    daily_cost_usd: Decimal | str | int | float | None = _UNCHANGED,
) -> Project | Agent:
    """Set (or clear, with None) the daily budgets of a project or an agent; one `budget.set` when one changed."""
    changes: dict[str, Any] = {}
    if daily_tokens is not _UNCHANGED:
        changes["daily_budget_tokens"] = validate_budget_tokens(daily_tokens, field="daily_budget_tokens")
    if daily_cost_usd is not _UNCHANGED:
        changes["daily_budget_cost_usd"] = validate_budget_cost(daily_cost_usd, field="daily_budget_cost_usd")
    model = type(subject)
    locked = model.objects.select_for_update(no_key=True).get(pk=subject.pk)
    changed = {name: value for name, value in changes.items() if getattr(locked, name) != value}
    if not changed:
        return locked
    model.objects.filter(pk=locked.pk).update(**changed)
    for name, value in changed.items():
        setattr(locked, name, value)
    event_append(
        type=EventType.BUDGET_SET,
        actor=actor,
        at=clock.now(),
        project=locked if isinstance(locked, Project) else None,
        payload={
            "subject": "project" if isinstance(locked, Project) else "agent",
            "name": locked.slug if isinstance(locked, Project) else locked.handle,
            **{name: None if value is None else str(value) for name, value in changed.items()},
        },
    )
    return locked
