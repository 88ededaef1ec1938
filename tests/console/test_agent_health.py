"""Agent health: alive, late, silent; live leases, last checkpoint, 7-day counts; release all, (re)activate."""

from __future__ import annotations

import pytest

from core.errors import ValidationFailed
from insight.agent_health import agent_health
from leases.models import Attempt, AttemptStatus
from leases.services import attempt_finish, lease_claim, note_add, sweep_expired
from ledger.actors import SYSTEM
from ledger.models import Agent, Event, EventType
from ledger.services import agent_deactivate, agent_heartbeat, agent_rotate_token
from tests.factories import AgentFactory, ProjectFactory, TaskFactory
from tests.leases.helpers import proof_of

pytestmark = pytest.mark.django_db


@pytest.fixture
def crew(clock):
    web = ProjectFactory(slug="web")
    busy = AgentFactory(handle="busy", projects=[web])
    quiet = AgentFactory(handle="quiet", projects=[web])
    held = TaskFactory(project=web, title="Held work")
    grant = lease_claim(task=held, agent=busy, lease_seconds=1800)
    note_add(proof=proof_of(grant), kind="checkpoint", content="halfway through the parser")
    done = lease_claim(task=TaskFactory(project=web), agent=busy)
    attempt_finish(proof=proof_of(done), outcome="done")
    failed = lease_claim(task=TaskFactory(project=web), agent=busy)
    attempt_finish(proof=proof_of(failed), outcome="failed", failure_reason_code="tests_failed")
    agent_heartbeat(agent=quiet)
    return web, busy, quiet, held, grant


def test_liveness_moves_from_alive_to_late_to_silent(clock, crew):
    _, _busy, _quiet, _, _ = crew
    states = {h.agent.handle: h.state for h in agent_health(clock.now())}
    assert states == {"busy": "alive", "quiet": "alive"}
    clock.advance(5 * 60)
    states = {h.agent.handle: h.state for h in agent_health(clock.now())}
    assert states == {"busy": "late", "quiet": "late"}
    clock.advance(10 * 60)
    states = {h.agent.handle: h.state for h in agent_health(clock.now())}
    assert states == {"busy": "silent", "quiet": "silent"}


def test_a_row_has_live_leases_checkpoint_and_week_counts_in_bounded_queries(
    clock, crew, django_assert_max_num_queries
):
    _, _busy, _, held, _ = crew
    with django_assert_max_num_queries(7):  # + the open findings and the quarantined work (issue 32)
        rows = {h.agent.handle: h for h in agent_health(clock.now())}
    row = rows["busy"]
    assert [a.task_id for a in row.live] == [held.pk]
    assert row.last_checkpoint is not None
    assert row.last_checkpoint.content == "halfway through the parser"
    assert (row.done_7d, row.failed_7d, row.expired_7d) == (1, 1, 0)
    clock.advance(3600)
    sweep_expired()
    row = {h.agent.handle: h for h in agent_health(clock.now())}["busy"]
    assert (row.done_7d, row.failed_7d, row.expired_7d) == (1, 1, 1)  # the held lease lapsed and was swept
    assert row.live == []
    clock.advance(8 * 86400)
    row = {h.agent.handle: h for h in agent_health(clock.now())}["busy"]
    assert (row.done_7d, row.failed_7d, row.expired_7d) == (0, 0, 0)


def test_the_page_lists_agents_with_state_and_leases(client, manager, ledger_admin, crew):
    _, _, _, held, _ = crew
    client.force_login(manager)
    body = client.get("/admin/ledger/agent/health/").content.decode()
    assert 'id="agent-busy"' in body
    assert held.key in body
    assert "Held work" in body
    assert "halfway through the parser" in body
    assert "Force-release all" not in body  # Managers only look
    client.force_login(ledger_admin)
    assert "Force-release all" in client.get("/admin/ledger/agent/health/").content.decode()


def test_force_release_all_needs_the_tick_and_revokes_every_lease_of_the_agent(ops_client, clock, crew):
    web, busy, _, _held, grant = crew
    other = lease_claim(task=TaskFactory(project=web, title="Second"), agent=busy)
    url = f"/admin/ledger/agent/{busy.pk}/release-all/"
    page = ops_client.get(url).content.decode()
    assert "I have confirmed the agent process is gone" in page
    assert "heard from" in page  # it renewed/claimed just now: the warning says so
    assert "run heartbeat" in page
    refused = ops_client.post(url, {"post": "yes", "reason": "gone"})
    assert refused.status_code == 200  # no tick: nothing done
    assert Attempt.objects.filter(agent=busy, status=AttemptStatus.ACTIVE).count() == 2
    done = ops_client.post(url, {"post": "yes", "reason": "host died", "process_gone": "on"})
    assert done.status_code == 302
    assert Attempt.objects.get(pk=grant.attempt.pk).status == AttemptStatus.REVOKED
    assert Attempt.objects.get(pk=other.attempt.pk).status == AttemptStatus.REVOKED
    assert Event.objects.filter(type=EventType.ATTEMPT_REVOKED, payload__reason="host died").count() == 2


def test_deactivate_with_a_reason_then_reactivate(ops_client, crew):
    _, _, quiet, _, _ = crew
    response = ops_client.post(f"/admin/ledger/agent/{quiet.pk}/deactivate/", {"post": "yes", "reason": "retired"})
    assert response.status_code == 302
    quiet.refresh_from_db()
    assert not quiet.is_active
    assert Event.objects.get(type=EventType.AGENT_DEACTIVATED).payload == {"handle": "quiet", "reason": "retired"}
    response = ops_client.post(f"/admin/ledger/agent/{quiet.pk}/reactivate/", {"post": "yes", "reason": "back"})
    assert response.status_code == 302
    quiet.refresh_from_db()
    assert quiet.is_active
    assert quiet.deactivated_at is None
    assert Event.objects.get(type=EventType.AGENT_REACTIVATED).payload == {"handle": "quiet", "reason": "back"}


def test_rotating_a_deactivated_agents_token_is_refused_by_the_service(crew):
    """Bug 10: the rotation handed out a token that only ever got 401."""
    _, _, quiet, _, _ = crew
    agent_deactivate(agent=quiet, actor=SYSTEM)
    before = Agent.objects.get(pk=quiet.pk).token_hash
    with pytest.raises(ValidationFailed, match="deactivated"):
        agent_rotate_token(agent=quiet, actor=SYSTEM)
    assert Agent.objects.get(pk=quiet.pk).token_hash == before
    assert not Event.objects.filter(type=EventType.AGENT_TOKEN_ROTATED).exists()


def test_rotating_a_deactivated_agents_token_in_the_admin_shows_why_and_issues_none(ops_client, crew):
    _, _, quiet, _, _ = crew
    agent_deactivate(agent=quiet, actor=SYSTEM)
    response = ops_client.post(
        "/admin/ledger/agent/", {"action": "rotate_token", "_selected_action": [quiet.pk], "post": "yes"}, follow=True
    )
    body = response.content.decode()
    assert "is deactivated" in body
    assert "Reactivate it first" in body
    assert "Rotated" not in body
    assert not Event.objects.filter(type=EventType.AGENT_TOKEN_ROTATED).exists()
    page = ops_client.get(f"/admin/ledger/agent/{quiet.pk}/rotate-token/", follow=True).content.decode()
    assert "Reactivate it first" in page


def test_the_revoke_confirmation_shows_heartbeat_and_renewal_beside_the_tick_and_warns_when_just_heard(
    ops_client, clock, crew
):
    _, busy, _, held, _ = crew
    agent_heartbeat(agent=busy)
    page = ops_client.get(f"/admin/ledger/task/{held.pk}/force-release/").content.decode()
    liveness = page[page.index('id="lh-liveness"') : page.index("I have confirmed the agent process is gone")]
    assert "busy: alive" in liveness
    assert "run heartbeat 0 s ago" in liveness
    assert "last renewal" in liveness
    assert 'id="lh-liveness-warning"' in liveness
    clock.advance(5 * 60)
    page = ops_client.get(f"/admin/ledger/task/{held.pk}/force-release/").content.decode()
    assert "run heartbeat 5 min 00 s ago" in page
    assert 'id="lh-liveness-warning"' not in page
