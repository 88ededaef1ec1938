"""HTTP niceties: the browsable API for staff, OPTIONS and HEAD, the Allow header of shared paths."""

from __future__ import annotations

import pytest
from rest_framework.test import APIClient

from tests.api.conftest import assert_error

pytestmark = pytest.mark.django_db


def test_the_browsable_api_renders_for_a_staff_session(admin_user, task):
    client = APIClient()
    client.force_login(admin_user)
    response = client.get("/api/v1/tasks/", HTTP_ACCEPT="text/html")
    assert response.status_code == 200
    assert response["Content-Type"].startswith("text/html")
    assert task.key in response.content.decode()


def test_options_and_head(client, task):
    options = client.options("/api/v1/tasks/")
    assert options.status_code == 200
    assert options["Allow"] == "GET, POST, HEAD, OPTIONS"
    head = client.head(f"/api/v1/tasks/{task.key}/")
    assert head.status_code == 200
    assert head["ETag"] == '"1"'


def test_an_idempotency_key_is_for_agents_only(admin_user, task):
    client = APIClient()
    client.force_login(admin_user)
    response = client.post(
        "/api/v1/tasks/", {"project": "web", "title": "x"}, format="json", HTTP_IDEMPOTENCY_KEY="staff-key"
    )
    assert_error(response, 400, "VALIDATION_ERROR")


def test_json_is_the_default_rendering(client, task):
    response = client.get("/api/v1/tasks/", HTTP_ACCEPT="*/*")
    assert response["Content-Type"] == "application/json"
    assert b'"results":[' in response.content  # compact separators
