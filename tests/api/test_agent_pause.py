"""Pause (drain) an agent: its claims are refused AGENT_PAUSED, while the lease it holds renews and finishes."""

from __future__ import annotations

import pytest

from ledger.actors import SYSTEM
from ledger.models import Event, EventType
from ledger.services import agent_pause, agent_resume
from tests.api.conftest import assert_error, attempt_url, holder
from tests.factories import TaskFactory

pytestmark = pytest.mark.django_db


def test_a_paused_agent_claims_nothing_but_finishes_what_it_holds(client, agent, project, clock):
    held, other = TaskFactory(project=project), TaskFactory(project=project)
    claim = client.post(f"/api/v1/tasks/{held.key}/claim/", {}, format="json").json()
    assert agent_pause(agent=agent, actor=SYSTEM, reason="draining for the upgrade")
    assert not agent_pause(agent=agent, actor=SYSTEM)  # already paused: no change, no second event
    error = assert_error(client.post(f"/api/v1/tasks/{other.key}/claim/", {}, format="json"), 409, "AGENT_PAUSED")
    assert error["details"]["agent"] == agent.handle
    assert_error(client.post("/api/v1/claims/next/", {"project": "web"}, format="json"), 409, "AGENT_PAUSED")
    renewed = client.post(attempt_url(claim, "renew"), {}, format="json", **holder(claim))
    assert renewed.status_code == 200, renewed.content
    finished = client.post(attempt_url(claim, "finish"), {"outcome": "done"}, format="json", **holder(claim))
    assert finished.status_code == 200, finished.content
    assert list(Event.objects.filter(type=EventType.AGENT_PAUSED).values_list("payload", flat=True)) == [
        {"handle": agent.handle, "reason": "draining for the upgrade"}
    ]
    assert agent_resume(agent=agent, actor=SYSTEM)
    assert client.post(f"/api/v1/tasks/{other.key}/claim/", {}, format="json").status_code == 201
    assert Event.objects.filter(type=EventType.AGENT_RESUMED).count() == 1
