"""`POST /tasks/{key}/dependencies/` and `…/dependencies/remove/` (SPEC §16.3): add and end a dependency.

The row stays when removed; a cycle is DEPENDENCY_CYCLE with its path; both tasks must be visible; writes are
idempotent under an Idempotency-Key; the answer is the task's full view.
"""

from __future__ import annotations

import pytest
from django.contrib.auth.models import Group
from rest_framework.test import APIClient

from ledger.models import Event, EventType, TaskDependency
from ledger.permissions import MANAGERS
from tests.api.conftest import assert_error, client_for
from tests.factories import AgentFactory, ProjectFactory, TaskFactory

pytestmark = pytest.mark.django_db


@pytest.fixture
def current(project):
    return TaskFactory(project=project, title="The task being worked on")


@pytest.fixture
def follow_up(project):
    return TaskFactory(project=project, title="A follow-up it must wait for", status="open")


def add(client, task, blocked_by, **headers):
    return client.post(
        f"/api/v1/tasks/{task.key}/dependencies/", {"blocked_by": blocked_by.key}, format="json", **headers
    )


def remove(client, task, blocked_by, **headers):
    return client.post(
        f"/api/v1/tasks/{task.key}/dependencies/remove/", {"blocked_by": blocked_by.key}, format="json", **headers
    )


def test_adding_answers_the_full_task_and_blocks_its_next_claim(client, current, follow_up):
    response = add(client, current, follow_up)
    assert response.status_code == 200, response.content
    body = response.json()
    assert body == client.get(f"/api/v1/tasks/{current.key}/").json()
    assert body["blocked_by"] == [{"key": follow_up.key, "status": "open", "effective_status": "open"}]
    assert body["unresolved_blockers"] == 1
    assert Event.objects.filter(type=EventType.TASK_DEPENDENCY_ADDED, task=current).count() == 1
    refused = assert_error(
        client.post(f"/api/v1/tasks/{current.key}/claim/", {}, format="json"), 409, "TASK_NOT_CLAIMABLE"
    )
    assert refused["details"]["reason"] == "unresolved_blockers"


def test_adding_twice_keeps_one_dependency_and_one_event(client, current, follow_up):
    assert add(client, current, follow_up).status_code == 200
    again = add(client, current, follow_up)
    assert again.status_code == 200
    assert again.json()["blocked_by"] == [{"key": follow_up.key, "status": "open", "effective_status": "open"}]
    assert TaskDependency.objects.filter(task=current).count() == 1
    assert Event.objects.filter(type=EventType.TASK_DEPENDENCY_ADDED).count() == 1


def test_removing_sets_removed_at_and_keeps_the_row(client, current, follow_up, clock):
    add(client, current, follow_up)
    clock.advance(30)
    response = remove(client, current, follow_up)
    assert response.status_code == 200, response.content
    assert response.json()["blocked_by"] == []
    assert response.json()["unresolved_blockers"] == 0
    (row,) = TaskDependency.objects.filter(task=current)
    assert row.removed_at == clock.now()
    assert Event.objects.filter(type=EventType.TASK_DEPENDENCY_REMOVED, task=current).count() == 1
    # Removing what is not there changes nothing and still answers the task.
    assert remove(client, current, follow_up).status_code == 200
    assert Event.objects.filter(type=EventType.TASK_DEPENDENCY_REMOVED).count() == 1
    # And it can be added again: a new row.
    assert add(client, current, follow_up).json()["unresolved_blockers"] == 1
    assert TaskDependency.objects.filter(task=current).count() == 2


def test_a_cycle_is_refused_with_its_path(client, project, current, follow_up):
    third = TaskFactory(project=project, title="Third")
    add(client, current, follow_up)
    add(client, follow_up, third)
    error = assert_error(add(client, third, current), 409, "DEPENDENCY_CYCLE")
    assert error["details"]["path"] == [third.key, current.key, follow_up.key, third.key]
    assert not TaskDependency.objects.filter(task=third).exists()
    error = assert_error(add(client, current, current), 409, "DEPENDENCY_CYCLE")
    assert error["details"]["path"] == [current.key, current.key]


def test_both_tasks_must_be_visible_to_the_caller(client, current):
    hidden = TaskFactory(project=ProjectFactory(slug="secret"), title="Secret")
    assert_error(add(client, current, hidden), 404, "NOT_FOUND")
    assert_error(add(client, hidden, current), 404, "NOT_FOUND")
    assert_error(remove(client, current, hidden), 404, "NOT_FOUND")
    assert_error(remove(client, hidden, current), 404, "NOT_FOUND")
    missing = client.post(f"/api/v1/tasks/{current.key}/dependencies/", {"blocked_by": "WEB-404"}, format="json")
    assert_error(missing, 404, "NOT_FOUND")
    assert not TaskDependency.objects.exists()


def test_a_task_of_another_visible_project_may_block(project, current):
    """SPEC §22: dependencies cross projects; the caller must see both tasks (else NOT_FOUND, above)."""
    elsewhere = ProjectFactory(slug="api")
    both = client_for(AgentFactory(projects=[project, elsewhere]))
    blocker = TaskFactory(project=elsewhere)
    response = add(both, current, blocker)
    assert response.status_code == 200, response.content
    assert TaskDependency.objects.filter(task=current, blocked_by=blocker, removed_at__isnull=True).exists()


def test_a_missing_or_bad_blocker_is_a_validation_error(client, current):
    for body in ({}, {"blocked_by": ""}, {"blocked_by": "x" * 25}, {"blocked_by": ["WEB-2"]}):
        response = client.post(f"/api/v1/tasks/{current.key}/dependencies/", body, format="json")
        assert list(assert_error(response, 400, "VALIDATION_ERROR")["details"]["fields"]) == ["blocked_by"]


def test_adding_and_removing_are_idempotent_under_a_key(client, current, follow_up):
    first = add(client, current, follow_up, HTTP_IDEMPOTENCY_KEY="dep-1")
    replay = add(client, current, follow_up, HTTP_IDEMPOTENCY_KEY="dep-1")
    assert (replay.content, replay["Idempotent-Replayed"]) == (first.content, "true")
    assert_error(remove(client, current, follow_up, HTTP_IDEMPOTENCY_KEY="dep-1"), 409, "IDEMPOTENCY_CONFLICT")
    removed = remove(client, current, follow_up, HTTP_IDEMPOTENCY_KEY="dep-2")
    replayed = remove(client, current, follow_up, HTTP_IDEMPOTENCY_KEY="dep-2")
    assert (replayed.content, replayed["Idempotent-Replayed"]) == (removed.content, "true")
    assert Event.objects.filter(type__startswith="task.dependency_").count() == 2


def test_a_refused_cycle_is_replayed_too(client, current, follow_up):
    add(client, current, follow_up)
    refused = add(client, follow_up, current, HTTP_IDEMPOTENCY_KEY="cycle")
    replayed = add(client, follow_up, current, HTTP_IDEMPOTENCY_KEY="cycle")
    assert assert_error(replayed, 409, "DEPENDENCY_CYCLE") == assert_error(refused, 409, "DEPENDENCY_CYCLE")
    assert replayed["Idempotent-Replayed"] == "true"


def test_a_read_only_manager_cannot_change_dependencies(django_user_model, current, follow_up):
    manager = django_user_model.objects.create_user(username="manager", password="pw", is_staff=True)
    manager.groups.add(Group.objects.get(name=MANAGERS))
    client = APIClient()
    client.force_login(manager)
    assert_error(add(client, current, follow_up), 403, "PERMISSION_DENIED")
    assert_error(remove(client, current, follow_up), 403, "PERMISSION_DENIED")


def test_a_staff_user_adds_as_itself(admin_user, current, follow_up):
    client = APIClient()
    client.force_login(admin_user)
    assert add(client, current, follow_up).status_code == 200
    assert Event.objects.get(type=EventType.TASK_DEPENDENCY_ADDED).actor_user == admin_user
