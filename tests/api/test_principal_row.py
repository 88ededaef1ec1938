"""The token's agent with the request's project and idempotency record, in one statement (`api.principal_row`).

What the statement reads must be what the ORM reads, row for row and type for type, and it must refuse
what `agent_for_token` and `project_by_slug` refuse: a rotated or deactivated token, another agent's
project, another agent's record, a pending record.
"""

from __future__ import annotations

from datetime import UTC, datetime
from decimal import Decimal

import pytest

from api.principal_row import agent_with
from leases.models import IdempotencyRecord
from ledger import clock as clock_module
from ledger.models import Agent, Project
from tests.api.conftest import assert_error, client_for
from tests.factories import AgentFactory, ProjectFactory, TaskFactory

pytestmark = pytest.mark.django_db


def _same_row(found, expected) -> None:
    assert found._state.adding is False
    for field in type(expected)._meta.concrete_fields:
        assert getattr(found, field.attname) == getattr(expected, field.attname), field.name
        assert type(getattr(found, field.attname)) is type(getattr(expected, field.attname)), field.name


def _record(agent: Agent, key: str, *, status: int = 201, response=None) -> IdempotencyRecord:
    return IdempotencyRecord.objects.create(
        agent=agent,
        key=key,
        fingerprint="f" * 64,
        status_code=status,
        response=response,
        attempt_id=None,
        created_at=clock_module.now(),
    )


def test_the_agent_project_and_record_are_the_rows_the_orm_reads(project):
    agent = AgentFactory(projects=[project])
    Agent.objects.filter(pk=agent.pk).update(
        last_seen_at=datetime(2026, 3, 4, 5, 6, 7, 890000, tzinfo=UTC), daily_budget_cost_usd=Decimal("1.5")
    )
    _record(agent, "k-1", response='{"a":[1,2],"b":null}')

    found = agent_with(agent.api_token, project_slug=project.slug, idempotency_key="k-1")

    assert found is not None
    _same_row(found.agent, Agent.objects.get(pk=agent.pk))
    _same_row(found.project, Project.objects.get(pk=project.pk))
    _same_row(found.record, IdempotencyRecord.objects.get(agent=agent, key="k-1"))
    assert found.agent.last_seen_at.tzinfo is not None
    # Each join on its own, and neither (then no statement of this module is needed, but it answers the same).
    assert agent_with(agent.api_token, project_slug=project.slug).project.pk == project.pk
    assert agent_with(agent.api_token, idempotency_key="k-1").record.key == "k-1"
    assert agent_with(agent.api_token).agent.pk == agent.pk


def test_only_the_agents_own_project_and_record_are_read(project):
    agent = AgentFactory(projects=[project])
    other = AgentFactory(projects=[project])
    elsewhere = ProjectFactory(slug="elsewhere")
    _record(other, "theirs")

    assert agent_with(agent.api_token, project_slug="elsewhere").project is None
    assert agent_with(agent.api_token, project_slug="no-such").project is None
    assert agent_with(agent.api_token, idempotency_key="theirs").record is None
    assert agent_with(agent.api_token, idempotency_key="unused").record is None
    # One row for the agent whatever its number of projects (the membership is a condition, not a join).
    agent.projects.add(elsewhere)
    assert agent_with(agent.api_token, project_slug="elsewhere").project.pk == elsewhere.pk


def test_a_refused_token_reads_nothing_whatever_it_asks(project):
    agent = AgentFactory(projects=[project])
    token = agent.api_token
    Agent.objects.filter(pk=agent.pk).update(is_active=False)
    assert agent_with(token, project_slug=project.slug, idempotency_key="k") is None
    assert agent_with("lh_" + "x" * 43, project_slug=project.slug) is None
    assert agent_with("not-a-token", idempotency_key="k") is None


def test_claim_next_refuses_a_project_the_agent_is_not_in_without_reading_it_again(project):
    outsider = client_for(AgentFactory(projects=[ProjectFactory(slug="mine")]))
    TaskFactory(project=project)
    refused = outsider.post("/api/v1/claims/next/", {"project": project.slug}, format="json")
    assert_error(refused, 404, "NOT_FOUND")
    assert refused.json()["error"]["details"] == {"project": project.slug}


def test_a_key_answered_after_authentication_read_none_is_replayed(client, task, monkeypatch):
    """A duplicate that commits between authentication's read and the INSERT: the INSERT collides, the
    record is read again and replayed (step 3 of `leases.idempotency`), as before the read moved."""
    import api.principal_row as principal_row

    url = f"/api/v1/tasks/{task.key}/claim/"
    first = client.post(url, {}, format="json", HTTP_IDEMPOTENCY_KEY="raced")
    assert first.status_code == 201
    real = principal_row.agent_with

    def stale(token, **asked):  # authentication's read as it was before the first request committed
        found = real(token, **asked)
        return None if found is None else principal_row.AgentWith(agent=found.agent, project=found.project)

    monkeypatch.setattr(principal_row, "agent_with", stale)
    again = client.post(url, {}, format="json", HTTP_IDEMPOTENCY_KEY="raced")
    assert again.status_code == 201
    assert again["Idempotent-Replayed"] == "true"
    assert again.content == first.content


@pytest.mark.django_db(transaction=True)  # the service's read is made outside any transaction only
def test_the_claimable_read_agrees_with_claim_nexts_own_read(clock):
    """Claim-next's read, embedded in authentication's statement, finds what the service's own read finds:
    nothing, a ready task, a task held by a live lease (nothing), the same once its lease has expired, and
    nothing of another project; and it is not asked without the project."""
    from leases.services import anything_to_claim, lease_claim_next

    project = ProjectFactory(slug="read")
    agent = AgentFactory(projects=[project])
    other = AgentFactory(projects=[project])

    def both() -> tuple[bool | None, bool]:
        found = agent_with(agent.api_token, project_slug=project.slug, claimable_now=clock_module.now())
        assert found is not None
        return found.claimable, anything_to_claim(project=project, agent=agent)

    assert both() == (False, False)
    TaskFactory(project=ProjectFactory(slug="elsewhere"))
    assert both() == (False, False)
    TaskFactory(project=project)
    assert both() == (True, True)
    assert lease_claim_next(project=project, agent=other) is not None
    assert both() == (False, False)
    clock.advance(24 * 3600)
    assert both() == (True, True)
    outsider = AgentFactory(projects=[ProjectFactory(slug="mine")])
    assert agent_with(outsider.api_token, project_slug=project.slug, claimable_now=clock_module.now()).claimable is None
    assert agent_with(agent.api_token, project_slug=project.slug).claimable is None
    with pytest.raises(ValueError, match="needs the project"):
        agent_with(agent.api_token, claimable_now=clock_module.now())


@pytest.mark.parametrize(
    ("body", "headers", "read"),
    [
        ({}, {}, True),
        ({"wait": 0}, {}, True),
        # A waiting claim reads after its waiter is registered, so a commit in between is not missed.
        ({"wait": 5}, {}, False),
        ({"task_class": "docs"}, {}, False),
        # A keyed claim runs its work in a transaction, where the read outside one does not decide.
        ({}, {"HTTP_IDEMPOTENCY_KEY": "k-1"}, False),
    ],
    ids=["plain", "wait-0", "waiting", "task-class", "keyed"],
)
def test_authentication_reads_what_is_claimable_only_for_a_plain_claim_next(project, monkeypatch, body, headers, read):
    import api.principal_row as principal_row
    from push.waiting import event_watcher

    client = client_for(AgentFactory(projects=[project]))
    asked: list[object] = []
    real = principal_row.agent_with

    def recording(token, **kwargs):
        asked.append(kwargs.get("claimable_now"))
        return real(token, **kwargs)

    monkeypatch.setattr(principal_row, "agent_with", recording)
    TaskFactory(project=project, task_class="docs")
    try:
        response = client.post("/api/v1/claims/next/", {"project": project.slug, **body}, format="json", **headers)
    finally:
        event_watcher().stop()  # a waiting claim starts it; its LISTEN connection would keep the test database
    assert response.status_code == 201
    assert [when is not None for when in asked] == [read]
