"""The dashboard's spend panel (SPEC §19): spend per UTC day and the top spenders."""

from __future__ import annotations

from decimal import Decimal

import pytest

from console.fleet.dashboard import spend_panel
from leases.services import attempt_renew, lease_claim
from tests.factories import AgentFactory, ProjectFactory, TaskFactory
from tests.leases.helpers import proof_of

pytestmark = pytest.mark.django_db


def test_spend_per_day_and_top_spenders(clock, ops_client):
    project = ProjectFactory()
    big, small = AgentFactory(projects=[project], handle="big-spender"), AgentFactory(projects=[project])
    one = lease_claim(task=TaskFactory(project=project), agent=big, lease_seconds=86400 * 2)
    two = lease_claim(task=TaskFactory(project=project), agent=small)
    attempt_renew(proof=proof_of(one), usage={"input_tokens": 100, "cost_usd": "1.5"})
    attempt_renew(proof=proof_of(two), usage={"output_tokens": 10, "cost_usd": "0.1"})
    clock.advance(86400 - 60)
    attempt_renew(proof=proof_of(one))  # kept alive across the day
    clock.advance(120)
    attempt_renew(proof=proof_of(one), usage={"input_tokens": 5, "cost_usd": "0.05"})

    panel = spend_panel(clock.now())
    assert len(panel.per_day) == 7
    assert [(tokens, cost) for _, tokens, cost in panel.per_day[-2:]] == [(110, Decimal("1.6")), (5, Decimal("0.05"))]
    assert [row.name for row in panel.agents] == ["big-spender", small.handle]
    assert panel.agents[0].cost_usd == Decimal("1.55")
    assert panel.tasks[0].name == one.task.key

    body = ops_client.get("/admin/").content.decode()
    assert "Spend · last 7 days" in body
    assert "big-spender" in body


def test_no_usage_shows_an_empty_state(ops_client):
    assert "No usage reported in the last 7 days." in ops_client.get("/admin/").content.decode()
