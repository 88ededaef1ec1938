"""Agent health from evidence (issue 32): findings, a stopped heartbeat beside renewals, budget, pause."""

from __future__ import annotations

import pytest
from django.contrib.admin.models import LogEntry

from insight.agent_health import BUDGET_SPENT, SILENT_RENEWED, agent_health
from leases.models import AgentDailyUsage, Attempt
from leases.services import attempt_renew, lease_claim
from ledger.models import Agent
from ledger.services import agent_heartbeat
from reconciliation.models import Condition, Finding, SubjectType
from tests.factories import AgentFactory, ProjectFactory, TaskFactory
from tests.leases.helpers import proof_of

pytestmark = pytest.mark.django_db


@pytest.fixture
def kept(clock):
    """An agent whose process died while a keeper renews its lease."""
    web = ProjectFactory(slug="web")
    agent = AgentFactory(handle="kept", projects=[web])
    task = TaskFactory(project=web, title="Held by a keeper")
    agent_heartbeat(agent=agent)
    grant = lease_claim(task=task, agent=agent, lease_seconds=1800)
    return web, agent, task, grant


def _state(clock, handle: str) -> str:
    return next(h.state for h in agent_health(clock.now()) if h.agent.handle == handle)


def test_a_keeper_renewing_for_a_dead_process_is_silent_renewed_not_alive(clock, kept):
    _, _, _, grant = kept
    clock.advance(21 * 60)
    attempt_renew(proof=proof_of(grant))
    assert _state(clock, "kept") == SILENT_RENEWED  # heartbeat 21 min ago, renewed just now


def test_open_dead_agent_findings_make_it_silent_renewed_and_are_linked(ops_client, clock, kept):
    web, agent, task, grant = kept
    clock.advance(3 * 60)
    attempt_renew(proof=proof_of(grant))
    assert _state(clock, "kept") == "alive"  # renewed just now, heartbeat 3 min ago, no finding yet
    attempt = Attempt.objects.get(pk=grant.attempt.pk)
    for condition in (Condition.LIVE_LEASE_DEAD_AGENT, Condition.STALLED_ATTEMPT):
        Finding.objects.create(
            condition=condition,
            project=web,
            subject_type=SubjectType.ATTEMPT,
            subject_key=str(attempt.pk),
            task=task,
            attempt=attempt,
            first_seen_at=clock.now(),
            last_seen_at=clock.now(),
        )
    assert _state(clock, "kept") == SILENT_RENEWED
    page = ops_client.get("/admin/ledger/agent/health/").content.decode()
    assert "silent · renewed" in page
    assert "2 open findings" in page
    assert "?agent=kept&amp;status__exact=unresolved" in page
    findings = ops_client.get("/admin/reconciliation/finding/?agent=kept&status__exact=unresolved")
    assert findings.status_code == 200
    assert findings.content.decode().count('class="action-select"') == 2
    # The force-release page believes the findings, not the renewal heard a moment ago.
    release = ops_client.get(f"/admin/ledger/agent/{agent.pk}/release-all/").content.decode()
    assert "probably still running" not in release
    assert "The evidence says kept&#x27;s process is gone" in release
    task_release = ops_client.get(f"/admin/ledger/task/{task.pk}/force-release/").content.decode()
    assert "probably still running" not in task_release
    assert 'id="lh-liveness-warning"' not in task_release


def test_a_silent_agent_whose_budget_is_spent_says_so(clock, kept):
    _, agent, _, _ = kept
    Agent.objects.filter(pk=agent.pk).update(daily_budget_tokens=1000)
    AgentDailyUsage.objects.create(
        agent=agent, day=clock.now().date(), input_tokens=900, output_tokens=200, updated_at=clock.now()
    )
    assert _state(clock, "kept") == "alive"  # alive beats the budget
    clock.advance(11 * 60)
    assert _state(clock, "kept") == BUDGET_SPENT


def test_pause_and_resume_from_agent_health_write_log_entries(ops_client, kept):
    _, agent, _, _ = kept
    page = ops_client.get(f"/admin/ledger/agent/{agent.pk}/pause/")
    assert page.status_code == 200
    assert "AGENT_PAUSED" in page.content.decode()
    response = ops_client.post(f"/admin/ledger/agent/{agent.pk}/pause/", {"post": "yes", "reason": "drain"})
    assert response.status_code == 302
    agent.refresh_from_db()
    assert agent.claims_paused_at is not None
    assert agent.pause_reason == "drain"
    assert "Resume…" in ops_client.get("/admin/ledger/agent/health/").content.decode()
    ops_client.post(f"/admin/ledger/agent/{agent.pk}/resume/", {"post": "yes", "reason": "done"})
    agent.refresh_from_db()
    assert agent.claims_paused_at is None
    messages = list(LogEntry.objects.filter(object_id=str(agent.pk)).values_list("change_message", flat=True))
    assert sorted(messages) == ["Paused: drain", "Resumed: done"]


def test_a_manager_may_not_pause(manager_client, kept):
    _, agent, _, _ = kept
    response = manager_client.post(f"/admin/ledger/agent/{agent.pk}/pause/", {"post": "yes", "reason": "x"})
    assert response.status_code == 403
