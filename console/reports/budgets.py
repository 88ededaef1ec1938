"""Budgets in the admin (SPEC §19): the "Set budget…" action of tasks, projects and agents, and how spend reads.

A task's budget is over all its attempts (changed through `leases.services.task_update`, so it
is versioned and logged like any task field); a project's or agent's budget is per UTC day
(`ledger.services.budget_set`). Empty fields mean "no limit".
"""

from __future__ import annotations

from decimal import Decimal
from typing import Any

from django import forms
from django.contrib import admin
from django.db.models import Model, QuerySet
from django.http import HttpRequest, HttpResponse
from django.urls import reverse

from console.base import actor_of, plural
from console.confirm import Confirmation, is_confirmed, render_confirmation
from core.errors import LedgerError
from core.text import dollars
from leases.selectors import task_spent
from leases.services import task_update
from ledger.models import BUDGET_COST_DIGITS, Agent, Project, Task
from ledger.services import budget_set


class BudgetForm(forms.Form):
    tokens = forms.IntegerField(
        required=False, min_value=0, label="Tokens (input + output)", help_text="Empty: no limit."
    )
    cost_usd = forms.DecimalField(
        required=False,
        min_value=Decimal(0),
        max_digits=BUDGET_COST_DIGITS,
        decimal_places=6,
        label="US dollars",
        help_text="At most 6 decimal places. Empty: no limit.",
    )


def _budget_of(subject: Model) -> tuple[Any, Any]:
    if isinstance(subject, Task):
        return subject.budget_tokens, subject.budget_cost_usd
    return subject.daily_budget_tokens, subject.daily_budget_cost_usd  # type: ignore[attr-defined]


def _apply(request: HttpRequest, subject: Model, tokens: int | None, cost: Decimal | None) -> None:
    actor = actor_of(request)
    if isinstance(subject, Task):
        task_update(task=subject, actor=actor, changes={"budget_tokens": tokens, "budget_cost_usd": cost})
    elif isinstance(subject, Project | Agent):
        budget_set(subject=subject, actor=actor, daily_tokens=tokens, daily_cost_usd=cost)


def set_budget_action(
    model_admin: admin.ModelAdmin, request: HttpRequest, queryset: QuerySet[Any], *, action_name: str
) -> HttpResponse | None:
    """The confirmation page with the budget form; on confirm, one service call per selected row."""
    subjects = list(queryset)
    form = BudgetForm(request.POST if is_confirmed(request) else None)
    if form.is_bound and form.is_valid():
        done: list[str] = []
        refused: list[str] = []
        for subject in subjects:
            try:
                _apply(request, subject, form.cleaned_data["tokens"], form.cleaned_data["cost_usd"])
            except LedgerError as exc:
                refused.append(f"{subject}: {exc.message}")
            else:
                done.append(str(subject))
        model_admin.report(  # type: ignore[attr-defined]
            request, done=f"Budget set on {plural(len(done), 'row')}." if done else None, refused=refused
        )
        return None
    daily = model_admin.model is not Task
    opts = model_admin.model._meta
    confirmation = Confirmation(
        title=f"Set the {'daily ' if daily else ''}budget of {plural(len(subjects), str(opts.verbose_name))}",
        intro=(
            "Per UTC day, over every task: at 80 % one budget.warning event, at 100 % holder writes answer "
            "BUDGET_EXHAUSTED and nothing more is claimable until the next day."
            if daily
            else "Over all attempts of the task: at 80 % one budget.warning event, at 100 % the holder's writes "
            "answer BUDGET_EXHAUSTED (finish and release still work) and the task is not claimable."
        ),
        submit_label="Set budget",
        danger=False,
        columns=["Row", "Tokens now", "US dollars now"],
        rows=[
            (subject, [str(subject), *(value if value is not None else "no limit" for value in _budget_of(subject))])
            for subject in subjects
        ],
    )
    return render_confirmation(
        request,
        model_admin,
        confirmation=confirmation,
        form=form,
        action_name=action_name,
        objects=subjects,
        cancel_url=reverse(f"admin:{opts.app_label}_{opts.model_name}_changelist"),
    )


def spent_text(task: Task) -> str:
    """What the task's attempts reported spending, for its page."""
    spent = task_spent(task)
    tokens_in, tokens_out = spent["input_tokens"], spent["output_tokens"]
    return f"{tokens_in + tokens_out} tokens ({tokens_in} in, {tokens_out} out), {dollars(spent['cost_usd'])}"
