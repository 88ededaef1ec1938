"""`claimable` on compact items, the ready view, and dependencies changing both (SPEC §16.3);
quarantine as an agent meets it (SPEC §16.4)."""

from __future__ import annotations

import pytest
from django.contrib.auth import get_user_model

from leases.services import task_release_quarantine
from ledger.actors import Actor
from ledger.models import Event, EventType, TaskDependency
from tests.api.conftest import assert_error, attempt_url, holder
from tests.factories import TaskFactory

pytestmark = pytest.mark.django_db


def listed(client, **query):
    response = client.get("/api/v1/tasks/", query)
    assert response.status_code == 200, response.content
    return {item["key"]: item for item in response.json()["results"]}


def test_dependencies_move_claimability_and_a_cycle_names_its_path(client, project, clock):
    first = TaskFactory(project=project)
    second = TaskFactory(project=project)
    assert listed(client)[second.key]["claimable"] is True
    added = client.post(f"/api/v1/tasks/{second.key}/dependencies/", {"blocked_by": first.key}, format="json")
    assert added.status_code == 200
    assert listed(client)[second.key]["claimable"] is False
    assert second.key not in listed(client, ready="true")
    cycle = client.post(f"/api/v1/tasks/{first.key}/dependencies/", {"blocked_by": second.key}, format="json")
    error = assert_error(cycle, 409, "DEPENDENCY_CYCLE")
    assert error["details"]["path"] == [first.key, second.key, first.key]
    removed = client.post(f"/api/v1/tasks/{second.key}/dependencies/remove/", {"blocked_by": first.key}, format="json")
    assert removed.status_code == 200
    assert TaskDependency.objects.filter(task=second, removed_at__isnull=False).count() == 1  # the row stays
    assert listed(client)[second.key]["claimable"] is True


def test_the_ready_view_lists_claimable_tasks_in_claim_next_order_with_cursor_pages(client, project, clock):
    low = TaskFactory(project=project, priority=1)
    clock.advance(1)
    high_old = TaskFactory(project=project, priority=5)
    clock.advance(1)
    high_new = TaskFactory(project=project, priority=5)
    TaskFactory(project=project, status="open")
    held = TaskFactory(project=project, priority=9)
    client.post(f"/api/v1/tasks/{held.key}/claim/", {}, format="json")
    keys = []
    cursor = None
    while True:
        query = {"ready": "true", "limit": 2, **({"cursor": cursor} if cursor else {})}
        page = client.get("/api/v1/tasks/", query).json()
        keys += [item["key"] for item in page["results"]]
        assert all(item["claimable"] for item in page["results"])
        cursor = page["next_cursor"]
        if cursor is None:
            break
    assert keys == [high_old.key, high_new.key, low.key]
    nxt = client.post("/api/v1/claims/next/", {"project": project.slug}, format="json").json()
    assert nxt["task"]["key"] == keys[0]
    assert_error(client.get("/api/v1/tasks/", {"ready": "yes"}), 400, "VALIDATION_ERROR")


def test_a_task_failing_three_times_is_quarantined_once_and_never_handed_out(client, project, clock):
    broken = TaskFactory(project=project, priority=99)
    fine = TaskFactory(project=project)
    for _ in range(3):
        claim = client.post("/api/v1/claims/next/", {"project": project.slug}, format="json").json()
        assert claim["task"]["key"] == broken.key
        body = {"outcome": "failed", "failure_reason_code": "tests_failed"}
        finished = client.post(attempt_url(claim, "finish"), body, format="json", **holder(claim))
        assert finished.status_code == 200
    assert finished.json()["task"]["status"] == "blocked"
    assert Event.objects.filter(task=broken, type=EventType.TASK_QUARANTINED).count() == 1
    shown = client.get(f"/api/v1/tasks/{broken.key}/").json()
    assert shown["blocked_reason"].startswith("quarantined: 3 attempts in a row failed or expired")
    claim = client.post("/api/v1/claims/next/", {"project": project.slug}, format="json").json()
    assert claim["task"]["key"] == fine.key
    admin = get_user_model().objects.create(username="ops", is_staff=True)
    task_release_quarantine(task=broken, actor=Actor(user=admin))
    assert listed(client)[broken.key]["claimable"] is True
    again = client.post("/api/v1/claims/next/", {"project": project.slug}, format="json").json()
    assert again["task"]["key"] == broken.key
    assert Event.objects.filter(task=broken, type=EventType.TASK_QUARANTINED).count() == 1
