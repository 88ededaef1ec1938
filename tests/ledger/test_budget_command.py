"""`manage.py set_budget` (SPEC §19): daily budgets of a project or an agent."""

from __future__ import annotations

import io
from decimal import Decimal

import pytest
from django.core.management import CommandError, call_command

from ledger.models import Agent, Event, EventType, Project
from tests.factories import AgentFactory, ProjectFactory

pytestmark = pytest.mark.django_db


def test_set_budget_sets_changes_and_clears_daily_limits():
    project = ProjectFactory(slug="web")
    out = io.StringIO()
    call_command("set_budget", "--project", "web", "--daily-tokens", "5000", "--daily-cost-usd", "12.5", stdout=out)
    project.refresh_from_db()
    assert (project.daily_budget_tokens, project.daily_budget_cost_usd) == (5000, Decimal("12.5"))
    assert "5000 tokens, $12.500000" in out.getvalue()
    call_command("set_budget", "--project", "web", "--daily-tokens", "none", stdout=io.StringIO())
    project = Project.objects.get(pk=project.pk)
    assert (project.daily_budget_tokens, project.daily_budget_cost_usd) == (None, Decimal("12.5"))
    assert Event.objects.filter(type=EventType.BUDGET_SET).count() == 2

    agent = AgentFactory(handle="bot-1")
    call_command("set_budget", "--agent", "bot-1", "--daily-cost-usd", "3", stdout=io.StringIO())
    assert Agent.objects.get(pk=agent.pk).daily_budget_cost_usd == Decimal(3)


@pytest.mark.parametrize(
    "args",
    [
        ["--project", "web"],
        ["--project", "nope", "--daily-tokens", "1"],
        ["--project", "web", "--daily-tokens", "-3"],
        ["--project", "web", "--daily-cost-usd", "0.0000001"],
    ],
)
def test_set_budget_refuses_bad_input(args):
    ProjectFactory(slug="web")
    with pytest.raises(CommandError):
        call_command("set_budget", *args, stdout=io.StringIO())
