"""Bearer tokens, staff sessions, and project isolation: anything not yours is NOT_FOUND."""

from __future__ import annotations

import pytest
from django.contrib.auth.models import Group
from rest_framework.test import APIClient

from ledger.actors import SYSTEM
from ledger.models import Event, EventType, Task
from ledger.permissions import MANAGERS
from ledger.services import agent_deactivate
from tests.api.conftest import assert_error, attempt_url, client_for, holder
from tests.factories import AgentFactory, ProjectFactory, TaskFactory

pytestmark = pytest.mark.django_db


@pytest.mark.parametrize(
    "header",
    [None, "Bearer", "Bearer ", "Bearer nope", "Bearer lh_wrong", "Basic dXNlcjpwdw==", "Token lh_x", "Bearer a b"],
)
def test_a_missing_or_bad_token_is_authentication_failed(header, project):
    client = APIClient()
    if header is not None:
        client.credentials(HTTP_AUTHORIZATION=header)
    response = client.get("/api/v1/projects/")
    assert_error(response, 401, "AUTHENTICATION_FAILED")
    assert response["WWW-Authenticate"].startswith("Bearer")


def test_a_deactivated_agent_is_refused(agent, client):
    assert client.get("/api/v1/projects/").status_code == 200
    agent_deactivate(agent=agent, actor=SYSTEM)
    assert_error(client.get("/api/v1/projects/"), 401, "AUTHENTICATION_FAILED")


def test_a_staff_session_sees_every_project_and_acts_as_its_user(admin_user, project, task):
    other = ProjectFactory(slug="other")
    TaskFactory(project=other)
    client = APIClient()
    client.force_login(admin_user)
    slugs = [p["slug"] for p in client.get("/api/v1/projects/").json()["results"]]
    assert slugs == ["other", "web"]
    assert len(client.get("/api/v1/tasks/").json()["results"]) == 2
    created = client.post("/api/v1/tasks/", {"project": "other", "title": "From the admin"}, format="json")
    assert created.status_code == 201
    event = Event.objects.get(type=EventType.TASK_CREATED, task__key=created.json()["key"])
    assert event.actor_user == admin_user


def test_a_staff_user_cannot_hold_leases(admin_user, task):
    client = APIClient()
    client.force_login(admin_user)
    assert_error(client.post(f"/api/v1/tasks/{task.key}/claim/", {}, format="json"), 403, "PERMISSION_DENIED")
    assert_error(client.post("/api/v1/claims/next/", {"project": "web"}, format="json"), 403, "PERMISSION_DENIED")
    assert_error(
        client.post("/api/v1/attempts/1/renew/", {}, format="json", HTTP_X_LEASE_TOKEN="t", HTTP_X_LEASE_EPOCH="1"),
        403,
        "PERMISSION_DENIED",
    )
    assert_error(client.post("/api/v1/agents/me/heartbeat/"), 403, "PERMISSION_DENIED")


def test_a_staff_session_needs_the_csrf_token_to_write(admin_user, project):
    client = APIClient(enforce_csrf_checks=True)
    client.force_login(admin_user)
    assert client.get("/api/v1/tasks/").status_code == 200
    response = client.post("/api/v1/tasks/", {"project": "web", "title": "x"}, format="json")
    assert_error(response, 403, "PERMISSION_DENIED")


def test_a_non_staff_user_and_a_read_only_manager(django_user_model, project, task):
    plain = django_user_model.objects.create_user(username="plain", password="pw")
    client = APIClient()
    client.force_login(plain)
    assert_error(client.get("/api/v1/projects/"), 403, "PERMISSION_DENIED")

    manager = django_user_model.objects.create_user(username="manager", password="pw", is_staff=True)
    manager.groups.add(Group.objects.get(name=MANAGERS))
    client.force_login(manager)
    assert client.get(f"/api/v1/tasks/{task.key}/").status_code == 200
    assert_error(
        client.patch(f"/api/v1/tasks/{task.key}/", {"title": "x"}, format="json", HTTP_IF_MATCH="1"),
        403,
        "PERMISSION_DENIED",
    )


@pytest.fixture
def stranger_task(db):
    return TaskFactory(project=ProjectFactory(slug="secret"), title="Secret work", description="classified")


def test_an_agent_cannot_see_or_change_another_projects_task(client, stranger_task):
    key = stranger_task.key
    assert [p["slug"] for p in client.get("/api/v1/projects/").json()["results"]] == ["web"]
    assert client.get("/api/v1/tasks/").json()["results"] == []
    assert_error(client.get("/api/v1/tasks/?project=secret"), 404, "NOT_FOUND")
    assert_error(client.get(f"/api/v1/tasks/{key}/"), 404, "NOT_FOUND")
    assert_error(client.get(f"/api/v1/tasks/{key}/context/"), 404, "NOT_FOUND")
    assert_error(
        client.patch(f"/api/v1/tasks/{key}/", {"title": "x"}, format="json", HTTP_IF_MATCH="1"), 404, "NOT_FOUND"
    )
    assert_error(client.post(f"/api/v1/tasks/{key}/claim/", {}, format="json"), 404, "NOT_FOUND")
    assert_error(client.post("/api/v1/claims/next/", {"project": "secret"}, format="json"), 404, "NOT_FOUND")
    assert_error(client.post("/api/v1/tasks/", {"project": "secret", "title": "x"}, format="json"), 404, "NOT_FOUND")
    assert_error(
        client.post("/api/v1/tasks/", {"project": "web", "title": "x", "blocked_by": [key]}, format="json"),
        400,
        "VALIDATION_ERROR",
    )
    assert client.get("/api/v1/search/?q=classified").json()["results"] == []
    assert_error(client.get("/api/v1/search/?q=classified&project=secret"), 404, "NOT_FOUND")
    assert all(event["task"] != key for event in client.get("/api/v1/changes/").json()["events"])
    assert_error(client.get("/api/v1/changes/?project=secret"), 404, "NOT_FOUND")
    assert_error(client.get("/api/v1/metrics/?project=secret"), 404, "NOT_FOUND")
    assert Task.objects.get(pk=stranger_task.pk).version == 1


def test_an_agent_cannot_act_on_another_agents_attempt(client, other_client, task):
    claim = client.post(f"/api/v1/tasks/{task.key}/claim/", {}, format="json").json()
    # Even with the right token and epoch (leaked), the attempt is not the other agent's.
    for action, body in [
        ("renew", {}),
        ("notes", {"kind": "progress", "content": "hijack"}),
        ("finish", {"outcome": "done"}),
        ("release", {}),
        ("git", {"base_commit": "b" * 40}),
    ]:
        response = other_client.post(attempt_url(claim, action), body, format="json", **holder(claim))
        assert_error(response, 404, "NOT_FOUND")
    # It may read the attempt (same project), not act on it.
    assert other_client.get(attempt_url(claim)).status_code == 200


def test_an_agent_cannot_read_an_attempt_of_another_project(client, stranger_task):
    owner = AgentFactory(projects=[stranger_task.project])
    claim = client_for(owner).post(f"/api/v1/tasks/{stranger_task.key}/claim/", {}, format="json").json()
    assert_error(client.get(attempt_url(claim)), 404, "NOT_FOUND")
    assert_error(client.post(attempt_url(claim, "renew"), {}, format="json", **holder(claim)), 404, "NOT_FOUND")
