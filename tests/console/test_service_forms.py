"""Add forms save through services; a service's refusal comes back as a form error, never a server error."""

from __future__ import annotations

import pytest
from django.contrib.messages import get_messages

from environments.models import Environment
from ledger.models import Agent, Project, Task
from tests.factories import AgentFactory, ProjectFactory

pytestmark = pytest.mark.django_db


def test_an_environment_whose_database_url_carries_a_password_is_refused(ops_client):
    project = ProjectFactory(slug="web")
    data = {
        "project": project.pk,
        "name": "preview-b",
        "kind": "database",
        "isolation": "container",
        "resources": '{"database_url": "postgres://app:hunter2@db/preview_b"}',
        "credentials_ref": "",
    }
    response = ops_client.post("/admin/environments/environment/add/", data)
    assert response.status_code == 200
    assert "must not contain a password" in response.content.decode()
    assert not Environment.objects.exists()


def test_an_environment_is_created_through_the_service(ops_client, ledger_admin):
    project = ProjectFactory(slug="web")
    data = {
        "project": project.pk,
        "name": "preview-b",
        "kind": "database",
        "isolation": "container",
        "resources": '{"database_url": "postgres://db/preview_b", "ports": [5433]}',
        "credentials_ref": "vault:preview-b",
    }
    response = ops_client.post("/admin/environments/environment/add/", data)
    assert response.status_code == 302
    environment = Environment.objects.get(name="preview-b")
    assert environment.resources == {"database_url": "postgres://db/preview_b", "ports": [5433]}
    assert project.pk == environment.project_id


def test_a_project_whose_key_prefix_cannot_be_derived_is_refused_on_the_form(ops_client):
    data = {
        "slug": "9lives",
        "name": "Nine lives",
        "key_prefix": "",
        "repository": "",
        "default_branch": "main",
        "default_lease_seconds": 900,
        "queue_wait_max_seconds": 3600,
        "required_isolation": "none",
    }
    response = ops_client.post("/admin/ledger/project/add/", data)
    assert response.status_code == 200
    assert "Cannot derive a task key prefix" in response.content.decode()
    assert not Project.objects.filter(slug="9lives").exists()


def test_a_blocked_task_needs_a_reason(ops_client):
    project = ProjectFactory(slug="web")
    data = {"project": project.pk, "title": "Blocked one", "status": "blocked", "blocked_reason": "", "priority": 0}
    response = ops_client.post("/admin/ledger/task/add/", data)
    assert response.status_code == 200
    assert not Task.objects.filter(title="Blocked one").exists()


def test_a_duplicate_agent_handle_shows_no_token(ops_client):
    AgentFactory(handle="agent-07")
    response = ops_client.post("/admin/ledger/agent/add/", {"handle": "agent-07", "kind": "claude"})
    assert response.status_code == 200
    body = response.content.decode()
    assert "agent-07" in body
    assert 'class="lh-token"' not in body
    assert Agent.objects.count() == 1


def test_the_token_lives_only_in_its_one_response(ops_client):
    response = ops_client.post("/admin/ledger/agent/add/", {"handle": "agent-42", "kind": "claude"})
    assert response.status_code == 200
    assert "no-store" in response["Cache-Control"]
    body = response.content.decode()
    token = body.split('data-agent="agent-42">', 1)[1].split("<", 1)[0].strip()
    assert token.startswith("lh_")
    session = ops_client.session
    assert all(token not in str(value) for value in session.values())
    assert all(token not in str(message) for message in get_messages(response.wsgi_request))
    assert token not in ops_client.get("/admin/ledger/agent/").content.decode()
