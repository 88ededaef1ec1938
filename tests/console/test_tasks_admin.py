"""The Tasks page: lease-aware columns and filters, a bounded query count, the timeline, honest refusals."""

from __future__ import annotations

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

from leases.services import lease_claim, task_update
from ledger.actors import SYSTEM
from ledger.models import EventType
from ledger.services import dependency_add
from tests.factories import AgentFactory, TaskFactory

pytestmark = pytest.mark.django_db

TASKS = "/admin/ledger/task/"


def rows(client, query: str = "") -> str:
    response = client.get(TASKS + query)
    assert response.status_code == 200
    return response.content.decode()


def test_the_list_shows_effective_status_holder_and_lease_left(ops_client, fleet):
    body = rows(ops_client)
    assert "In progress" in body
    assert "agent-07" in body
    assert "lh-remaining" in body


def test_filters_use_the_lease_annotation(ops_client, fleet):
    in_progress = rows(ops_client, "?effective_status=in_progress")
    assert fleet.held.key in in_progress
    assert fleet.idle.key not in in_progress
    ready = rows(ops_client, "?effective_status=ready")
    assert fleet.idle.key in ready
    assert fleet.held.key not in ready
    by_holder = rows(ops_client, "?holder=agent-07")
    assert fleet.held.key in by_holder
    assert fleet.idle.key not in by_holder
    nobody = rows(ops_client, "?holder=__nobody__")
    assert fleet.idle.key in nobody
    assert fleet.held.key not in nobody
    assert fleet.held.key in rows(ops_client, f"?q={fleet.held.key}")


def test_the_list_costs_the_same_queries_for_five_or_fifty_rows(ops_client, fleet):
    def count() -> int:
        with CaptureQueriesContext(connection) as captured:
            rows(ops_client)
        return len(captured.captured_queries)

    few = count()
    holder = AgentFactory(handle="agent-99", projects=[fleet.project])
    for number in range(40):
        task = TaskFactory(project=fleet.project, title=f"More {number}")
        if number % 4 == 0:
            lease_claim(task=task, agent=holder)
    assert count() == few


def test_the_task_page_has_attempts_dependencies_and_the_timeline(ops_client, fleet):
    dependency_add(task=fleet.held, blocked_by=fleet.idle, actor=SYSTEM)
    task_update(task=fleet.held, actor=SYSTEM, changes={"priority": 9})
    body = ops_client.get(f"{TASKS}{fleet.held.pk}/change/").content.decode()
    assert 'id="timeline"' in body
    for event_type in (
        EventType.TASK_CREATED,
        EventType.ATTEMPT_CLAIMED,
        EventType.TASK_DEPENDENCY_ADDED,
        EventType.TASK_UPDATED,
    ):
        assert event_type in body
    assert "Attempts (newest first)" in body
    assert "Blocked by" in body
    assert fleet.idle.key in body
    assert fleet.grant.attempt.label in body


def test_reopening_a_ready_task_is_refused_with_a_reason(ops_client, fleet):
    response = ops_client.post(
        TASKS, {"action": "reopen", "_selected_action": [fleet.idle.pk], "index": 0}, follow=True
    )
    body = response.content.decode()
    assert "only done or cancelled tasks reopen" in body
    fleet.idle.refresh_from_db()
    assert fleet.idle.status == "ready"


def test_force_releasing_a_task_without_a_lease_says_so(ops_client, fleet):
    data = {
        "action": "force_release",
        "_selected_action": [fleet.idle.pk, fleet.held.pk],
        "index": 0,
        "post": "yes",
        "reason": "cleanup",
        "process_gone": "on",
    }
    body = ops_client.post(TASKS, data, follow=True).content.decode()
    assert "Force-released 1 task" in body
    assert "1 task had no live lease" in body


def test_the_confirmation_refuses_without_reason_or_tick(ops_client, fleet):
    url = f"{TASKS}{fleet.held.pk}/force-release/"
    for data in ({"post": "yes"}, {"post": "yes", "reason": "x"}, {"post": "yes", "process_gone": "on"}):
        response = ops_client.post(url, data)
        assert response.status_code == 200
        assert "Nothing was done" in response.content.decode()
    fleet.grant.attempt.refresh_from_db()
    assert fleet.grant.attempt.status == "active"
    response = ops_client.post(url, {"post": "yes", "reason": "gone", "process_gone": "on"})
    assert response.status_code == 302
    assert response["Location"].endswith(f"{TASKS}{fleet.held.pk}/change/")
    fleet.grant.attempt.refresh_from_db()
    assert fleet.grant.attempt.status == "revoked"
