"""Budgets in the admin (SPEC §19): the "Set budget…" action of tasks, projects and agents."""

from __future__ import annotations

from decimal import Decimal

import pytest

from ledger.models import Agent, Event, EventType, Project, Task
from tests.factories import AgentFactory, ProjectFactory, TaskFactory

pytestmark = pytest.mark.django_db


@pytest.fixture
def admin_client(client, admin_user):
    client.force_login(admin_user)
    return client


def _set(admin_client, url: str, pk: int, tokens: str, cost: str):
    data = {
        "action": "set_budget",
        "_selected_action": [pk],
        "index": 0,
        "post": "yes",
        "tokens": tokens,
        "cost_usd": cost,
    }
    return admin_client.post(url, data)


def test_set_budget_on_a_task_goes_through_the_task_update(admin_client):
    task = TaskFactory()
    page = admin_client.post("/admin/ledger/task/", {"action": "set_budget", "_selected_action": [task.pk], "index": 0})
    assert b"Set budget" in page.content
    assert _set(admin_client, "/admin/ledger/task/", task.pk, "1000", "2.5").status_code == 302
    task = Task.objects.get(pk=task.pk)
    assert (task.budget_tokens, task.budget_cost_usd) == (1000, Decimal("2.5"))
    assert Event.objects.filter(type=EventType.TASK_UPDATED, task=task).exists()
    view = admin_client.get(f"/admin/ledger/task/{task.pk}/change/")
    assert b"0 tokens" in view.content


def test_set_daily_budget_on_projects_and_agents(admin_client):
    project = ProjectFactory()
    agent = AgentFactory()
    assert _set(admin_client, "/admin/ledger/project/", project.pk, "500", "").status_code == 302
    assert _set(admin_client, "/admin/ledger/agent/", agent.pk, "", "1.25").status_code == 302
    assert Project.objects.get(pk=project.pk).daily_budget_tokens == 500
    assert Agent.objects.get(pk=agent.pk).daily_budget_cost_usd == Decimal("1.25")
    assert Event.objects.filter(type=EventType.BUDGET_SET).count() == 2


def test_bad_budget_input_shows_the_form_again(admin_client):
    task = TaskFactory()
    page = _set(admin_client, "/admin/ledger/task/", task.pk, "-1", "0.0000001")
    assert page.status_code == 200
    assert Task.objects.get(pk=task.pk).budget_tokens is None
