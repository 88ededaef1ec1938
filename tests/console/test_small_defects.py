"""Issue 32's small defects, each pinned by a test that failed before its fix."""

from __future__ import annotations

import pytest

from tests.factories import ProjectFactory

pytestmark = pytest.mark.django_db


@pytest.mark.parametrize("query", ["?holder=%00", "?holder=a%00b", "?q=%00"])
def test_a_nul_in_a_task_filter_is_no_server_error(ops_client, fleet, query):
    response = ops_client.get(f"/admin/ledger/task/{query}")
    assert response.status_code in (200, 302), response.status_code


def test_exporting_events_with_a_garbage_date_filter_is_no_server_error(ops_client, fleet):
    response = ops_client.get("/admin/ledger/event/export/?created_at__gte=garbage")
    assert response.status_code == 302
    assert response["Location"].endswith("?e=1")


def test_projects_are_listed_in_natural_order(ops_client):
    for slug in ("q10", "q2", "q1", "q0", "q11"):
        ProjectFactory(slug=slug, name=slug.upper())
    body = ops_client.get("/admin/ledger/project/").content.decode()
    positions = [body.index(f">{slug.upper()}<") for slug in ("q0", "q1", "q2", "q10", "q11")]
    assert positions == sorted(positions)


# --- reassign and cancel-with-release (issue 32, round two) -------------------------------


def test_reassigning_a_done_task_is_refused_and_reserves_nobody(ops_client, fleet):
    from ledger.models import Task

    Task.objects.filter(pk=fleet.idle.pk).update(status="done")
    data = {
        "action": "reassign",
        "_selected_action": [fleet.idle.pk],
        "index": 0,
        "post": "yes",
        "agent": fleet.other.pk,
        "reason": "hand it over",
        "process_gone": "on",
    }
    body = ops_client.post("/admin/ledger/task/", data, follow=True).content.decode()
    assert "Reassigned" not in body
    assert "only an open, ready or blocked task is reassigned" in body
    assert Task.objects.get(pk=fleet.idle.pk).reserved_for_id is None


def test_the_reassign_service_refuses_a_task_that_is_not_open_ready_or_blocked(fleet):
    from core.errors import InvalidStatusTransition
    from leases.services import task_reassign
    from ledger.actors import SYSTEM
    from ledger.models import Task

    for status in ("done", "cancelled", "review", "delivered"):
        Task.objects.filter(pk=fleet.idle.pk).update(status=status)
        with pytest.raises(InvalidStatusTransition):
            task_reassign(task=fleet.idle, agent=fleet.other, actor=SYSTEM, reason="move it")
    Task.objects.filter(pk=fleet.idle.pk).update(status="blocked", blocked_reason="waits for a decision")
    task_reassign(task=fleet.idle, agent=fleet.other, actor=SYSTEM, reason="move it")
    assert Task.objects.get(pk=fleet.idle.pk).reserved_for_id == fleet.other.pk


def test_cancel_with_force_release_asks_for_the_process_gone_tick(ops_client, fleet):
    from leases.models import Attempt

    url = f"/admin/ledger/task/{fleet.held.pk}/cancel/"
    page = ops_client.get(url).content.decode()
    assert "I have confirmed the agent process is gone" in page
    assert "agent-07" in page  # the holder's liveness line, as force-release shows it
    response = ops_client.post(url, {"post": "yes", "also_release": "on", "reason": "dropped"})
    assert response.status_code == 200
    assert "Nothing was done" in response.content.decode()
    assert Attempt.objects.get(pk=fleet.grant.attempt.pk).status == "active"
    response = ops_client.post(url, {"post": "yes", "also_release": "on", "reason": "dropped", "process_gone": "on"})
    assert response.status_code == 302
    assert Attempt.objects.get(pk=fleet.grant.attempt.pk).status == "revoked"


def test_cancel_without_force_release_needs_no_tick(ops_client, fleet):
    from leases.models import Attempt
    from ledger.models import Task

    response = ops_client.post(f"/admin/ledger/task/{fleet.held.pk}/cancel/", {"post": "yes", "reason": ""})
    assert response.status_code == 302
    assert Attempt.objects.get(pk=fleet.grant.attempt.pk).status == "active"
    assert Task.objects.get(pk=fleet.held.pk).status == "cancelled"
